"""Human-judgment leaderboard: one row per retriever, means with CIs and paired tests.

Every number comes from :func:`erag_dagster.metrics.human.evaluate_run`, i.e. pytrec_eval with
trec_eval's conventions:

- **Measures** (names as :mod:`erag_dagster.metrics.names` spells them): ``R@k`` (recall),
  ``P@k`` (precision; divides by ``k`` even when fewer than ``k`` documents were retrieved),
  ``Success@k`` (hit rate), ``RR`` (reciprocal rank of the first relevant document; MRR when
  averaged), ``AP`` (average precision; MAP when averaged), ``nDCG@k`` (graded: linear gain
  ``rel``, discount ``1 / log2(rank + 1)``, normalised by the ideal ordering of *all* the query's
  judgments).
- **Relevance level**: the binary measures (R, P, Success, RR, AP) count a document as relevant
  when its judgment is ``>= relevance_level`` (trec_eval ``-l``). Use ``relevance_level=2`` for
  the TREC Deep Learning passage judgments (0–3, where 1 means "related" but not relevant);
  nDCG always uses the graded judgments as gains.
- **Queries**: a run query without any judgment is dropped (not averaged), as trec_eval does;
  the leaderboard counts them per retriever in ``dropped``. A judged query the run did not
  retrieve for is not scored either (trec_eval without ``-c``). A judged query without any
  relevant document scores 0 on every measure and stays in the mean. Means are arithmetic
  means over the scored queries (``queries``).
- **Ties** in run scores: trec_eval orders a query's documents by score descending and breaks
  ties by doc id *descending*; it ignores the run's rank column
  (:func:`erag_dagster.retrieval.runs.rank_by_score` ranks the same way).

Uncertainty and comparisons (:mod:`erag_dagster.stats.significance`):

- ``{m}_low`` / ``{m}_high``: percentile bootstrap interval (at ``stats.confidence``) of the
  mean, resampling the scored queries with replacement ``stats.resamples`` times;
- ``{m}_diff = mean_r - mean_baseline`` over the queries both scored, with ``{m}_p_perm`` the
  two-sided paired randomisation (sign-flip) test and ``{m}_p_t`` the paired t-test. The baseline
  is compared with itself (difference 0, p = 1), so its row reads as the reference.

All random draws are seeded (``stats.seed``): the same inputs give the same table. The stars of
:func:`format_leaderboard` mark ``p_perm < stats.alpha`` (:class:`~erag_dagster.stats.settings.
Statistics`, a required argument of every function here: the registry's, never a default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.metrics.human import evaluate_run
from erag_dagster.metrics.list_metrics import ListMetricReport
from erag_dagster.stats.settings import Statistics
from erag_dagster.stats.significance import bootstrap_mean_ci, compare_paired

#: Per-metric columns of the leaderboard, as suffixes of the metric name (``nDCG@10_low``).
STAT_SUFFIXES: tuple[str, ...] = ("_low", "_high", "_diff", "_p_perm", "_p_t")


def evaluate_runs(
    qrels: pl.DataFrame,
    runs: Mapping[str, pl.DataFrame],
    metrics: Sequence[str],
    relevance_level: int,
) -> dict[str, ListMetricReport]:
    """:func:`~erag_dagster.metrics.human.evaluate_run` for every named run (order kept)."""
    if not runs:
        raise InputError("the leaderboard needs at least one run")
    if not metrics:
        raise InputError("the leaderboard needs at least one metric")
    return {
        name: evaluate_run(qrels, run, list(metrics), relevance_level=relevance_level)
        for name, run in runs.items()
    }


def metric_scores(report: ListMetricReport, metric: str) -> dict[str, float]:
    """``query_id -> value`` of one metric from a report."""
    return {qid: values[metric] for qid, values in report.per_query.items()}


def leaderboard_from_reports(
    reports: Mapping[str, ListMetricReport],
    metrics: Sequence[str],
    stats: Statistics,
    baseline: str | None = None,
) -> pl.DataFrame:
    """The leaderboard of already-evaluated runs (see :func:`leaderboard` for the columns)."""
    if not reports:
        raise InputError("the leaderboard needs at least one run")
    names = list(reports)
    base = names[0] if baseline is None else baseline
    if base not in reports:
        raise InputError(f"baseline {base!r} is not one of the runs: {', '.join(names)}")
    for name, report in reports.items():
        if not report.per_query:
            raise InputError(
                f"run {name!r} has no query with judgments "
                f"({len(report.dropped_queries)} run queries dropped)"
            )
    rows = []
    for name, report in reports.items():
        row: dict[str, object] = {
            "retriever": name,
            "baseline": name == base,
            "queries": len(report.per_query),
            "dropped": len(report.dropped_queries),
        }
        for m in metrics:
            scores = metric_scores(report, m)
            low, high = bootstrap_mean_ci(list(scores.values()), stats)
            cmp = compare_paired(scores, metric_scores(reports[base], m), stats)
            row |= {
                m: report.aggregate[m],
                f"{m}_low": low,
                f"{m}_high": high,
                f"{m}_diff": cmp.difference,
                f"{m}_p_perm": cmp.p_perm,
                f"{m}_p_t": cmp.p_t,
            }
        rows.append(row)
    schema: dict[str, pl.DataType] = {
        "retriever": pl.String(),
        "baseline": pl.Boolean(),
        "queries": pl.Int64(),
        "dropped": pl.Int64(),
    }
    for m in metrics:
        schema[m] = pl.Float64()
        schema |= {f"{m}{s}": pl.Float64() for s in STAT_SUFFIXES}
    return pl.DataFrame(rows, schema=schema)


def leaderboard(
    qrels: pl.DataFrame,
    runs: Mapping[str, pl.DataFrame],
    metrics: Sequence[str],
    stats: Statistics,
    *,
    relevance_level: int,
    baseline: str | None = None,
) -> pl.DataFrame:
    """Human-judgment leaderboard of ``runs`` (name → run table), one row per run, input order.

    Columns: ``retriever``, ``baseline`` (bool), ``queries`` (scored), ``dropped`` (run
    queries without judgments), then for each metric ``m``: ``m`` (mean over scored queries =
    ``evaluate_run``'s aggregate), ``m_low``/``m_high`` (bootstrap CI of the mean),
    ``m_diff``/``m_p_perm``/``m_p_t`` (paired comparison with the baseline; the first run when
    ``baseline`` is None); ``stats``: resamples, permutations, confidence and seed of every
    interval and test. See the module docstring for the conventions.

    Raises :class:`InputError` for no runs, no metrics, an unknown baseline, or a run without a
    single judged query.
    """
    reports = evaluate_runs(qrels, runs, metrics, relevance_level=relevance_level)
    return leaderboard_from_reports(reports, metrics, stats, baseline=baseline)


def leaderboard_metrics(board: pl.DataFrame) -> list[str]:
    """The metric names of a leaderboard frame, in column order."""
    fixed = {"retriever", "baseline", "queries", "dropped"}
    return [
        c for c in board.columns if c not in fixed and not any(c.endswith(s) for s in STAT_SUFFIXES)
    ]


def format_leaderboard(board: pl.DataFrame, stats: Statistics, digits: int = 4) -> pl.DataFrame:
    """A compact all-text version of a leaderboard for terminals and markdown.

    One row per retriever: ``retriever``, ``queries`` and one column per metric whose cell reads
    ``mean [low, high]``, followed for non-baseline rows by ``diff p=p_perm`` (``p<0.001`` below
    that) and a ``*`` when ``p_perm < stats.alpha`` (e.g.
    ``0.6912 [0.655, 0.725] +0.0123 p=0.012*``). The baseline's name carries ``(baseline)``. Render
    with
    :func:`~erag_dagster.reports.tables.format_table` or
    :func:`~erag_dagster.reports.tables.to_markdown`.
    """
    exprs: list[pl.Expr] = [
        pl.when(pl.col("baseline"))
        .then(pl.format("{} (baseline)", "retriever"))
        .otherwise(pl.col("retriever"))
        .alias("retriever"),
        pl.col("queries"),
    ]
    for m in leaderboard_metrics(board):
        ci = pl.format(
            "{} [{}, {}]",
            _fmt(pl.col(m), f"{{:.{digits}f}}"),
            _fmt(pl.col(f"{m}_low"), f"{{:.{digits - 1}f}}"),
            _fmt(pl.col(f"{m}_high"), f"{{:.{digits - 1}f}}"),
        )
        p_perm = pl.col(f"{m}_p_perm")
        p_text = (
            pl.when(p_perm < 0.001)
            .then(pl.lit("<0.001"))
            .otherwise(pl.concat_str([pl.lit("="), _fmt(p_perm, "{:.3f}")]))
        )
        # round first, then + 0.0 turns -0.0 into 0.0: no "-0.0000" for a zero difference
        diff = pl.col(f"{m}_diff").map_elements(
            lambda v: f"{round(v, digits) + 0.0:+.{digits}f}", return_dtype=pl.String
        )
        versus = pl.format(
            " {} p{}{}",
            diff,
            p_text,
            pl.when(p_perm < stats.alpha).then(pl.lit("*")).otherwise(pl.lit("")),
        )
        exprs.append(
            pl.when(pl.col("baseline")).then(ci).otherwise(pl.concat_str([ci, versus])).alias(m)
        )
    return board.select(exprs)


def _fmt(expr: pl.Expr, spec: str) -> pl.Expr:
    """Format floats with a Python format spec (``nan`` stays ``nan``)."""
    return expr.map_elements(spec.format, return_dtype=pl.String)
