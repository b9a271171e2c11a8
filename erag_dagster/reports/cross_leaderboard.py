"""Leaderboards across datasets: the BEIR-style one on human judgments and the eRAG one, and
their rendering (Table 1 across datasets: :mod:`.cross_table1`).

Every per-dataset cell is the single-dataset report's own number: the leaderboards call
:func:`~erag_dagster.reports.leaderboard.leaderboard_from_reports` once per dataset (same
seed, same draws), so a cell equals the ``retrieval_report`` of that dataset exactly.

Leaderboards are *long* frames, one row per ``(retriever, dataset, metric)`` (eRAG: per
``(reader, retriever, dataset, metric)``) with :data:`LEADERBOARD_SCHEMA`:

- ``mean`` (the dataset's aggregate), ``low``/``high`` (percentile bootstrap CI over the
  dataset's queries, at the statistics' ``confidence``), ``queries``/``dropped`` as in the
  single-dataset leaderboard;
- ``diff``/``p_perm``/``p_t``: paired comparison with the baseline retriever on the queries
  both scored (randomisation test and t-test; the baseline's own row reads 0 / 1 / 1);
- the **mean over datasets** row (``dataset`` = :data:`MEAN_OVER_DATASETS`): the unweighted
  mean of the dataset means (BEIR's convention: each dataset counts once, whatever its
  size). Its CI is a stratified bootstrap (queries resampled within each dataset,
  :func:`~erag_dagster.stats.significance.stratified_bootstrap_mean_ci`); its ``diff`` is the
  mean over datasets of the per-dataset differences, with ``p_perm`` the sign-flip test of that
  statistic flipping queries within datasets
  (:func:`~erag_dagster.stats.significance.stratified_randomisation_test`); ``p_t`` is null
  on every mean row (no t-test for a weighted mean of differences). A retriever missing from
  some dataset has no row there and a mean-over-datasets row of nulls (``datasets`` says on
  how many it ran): a mean over a different set of datasets would not be comparable with the
  others. A dataset without the baseline has null comparisons;
- ``p_holm``: ``p_perm`` Holm-adjusted (:func:`~erag_dagster.stats.significance.holm`) over
  the **family of every non-null non-baseline ``p_perm`` in the table** (all datasets, the
  mean-over-datasets rows and all metrics; eRAG: all readers too); ``family`` holds its size on
  every row. The baseline's rows have ``p_holm`` null (not a comparison).

Every function takes the evaluation's :class:`~erag_dagster.stats.settings.Statistics`
(resamples, permutations, confidence, seed; ``alpha`` for the rendered stars) as a required
argument: the same value the single-dataset reports get, so a cell equals theirs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.meta.per_query import check_erag_per_query, erag_summary
from erag_dagster.metrics.list_metrics import ListMetricReport
from erag_dagster.reports.leaderboard import (
    evaluate_runs,
    leaderboard_from_reports,
    metric_scores,
)
from erag_dagster.reports.tables import MISSING, ci_text, render_cells
from erag_dagster.stats.settings import Statistics
from erag_dagster.stats.significance import (
    align,
    holm,
    stratified_bootstrap_mean_ci,
    stratified_randomisation_test,
)

__all__ = [
    "LEADERBOARD_SCHEMA",
    "MEAN_OVER_DATASETS",
    "P_HOLM_TEST",
    "DatasetRuns",
    "beir_leaderboard",
    "erag_leaderboard",
    "format_cross_leaderboard",
]

#: The ``dataset`` value of the rows that average over datasets.
MEAN_OVER_DATASETS = "mean over datasets"

LEADERBOARD_SCHEMA: dict[str, type[pl.DataType]] = {
    "dataset": pl.String,
    "retriever": pl.String,
    "metric": pl.String,
    "baseline": pl.Boolean,
    "datasets": pl.Int64,
    "queries": pl.Int64,
    "dropped": pl.Int64,
    "mean": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
    "diff": pl.Float64,
    "p_perm": pl.Float64,
    "p_t": pl.Float64,
    "p_holm": pl.Float64,
    "family": pl.Int64,
}

#: The test and correction the leaderboards' ``p_holm`` comes from (for notes and metadata).
P_HOLM_TEST = "paired randomisation test, Holm-adjusted"


class DatasetRuns(NamedTuple):
    """One dataset of :func:`beir_leaderboard`: judgments, runs (name → run table) and the
    trec_eval relevance level of its binary measures (the dataset's configuration: 2 for TREC
    DL, else 1)."""

    qrels: pl.DataFrame
    runs: Mapping[str, pl.DataFrame]
    relevance_level: int


Board = dict[str, dict[str, ListMetricReport]]  # dataset -> retriever -> report


def beir_leaderboard(
    per_dataset: Mapping[str, DatasetRuns | tuple],
    metrics: Sequence[str],
    stats: Statistics,
    baseline: str | None = None,
) -> pl.DataFrame:
    """Retriever × dataset leaderboard on human judgments (see the module docstring).

    ``per_dataset`` maps a dataset name to a :class:`DatasetRuns` (or a plain
    ``(qrels, runs, relevance_level)`` tuple). ``baseline``: the retriever every other one is
    compared with; by default the first run of the first dataset. Rows: datasets in input order
    then :data:`MEAN_OVER_DATASETS`; within each, retrievers in order of first appearance, then
    metrics in the given order. Raises :class:`InputError` for no datasets, a baseline no
    dataset has, and what :func:`~erag_dagster.reports.leaderboard.leaderboard` refuses.
    """
    boards: Board = {}
    for name, value in per_dataset.items():
        ds = DatasetRuns(*value)
        boards[name] = evaluate_runs(ds.qrels, ds.runs, metrics, relevance_level=ds.relevance_level)
    rows = _rows(boards, metrics, baseline, stats)
    return with_holm(pl.DataFrame(rows, schema=LEADERBOARD_SCHEMA, orient="row"))


def erag_leaderboard(
    per_dataset: Mapping[str, pl.DataFrame],
    metrics: Sequence[str] | None,
    stats: Statistics,
    baseline: str | None = None,
) -> pl.DataFrame:
    """Reader × retriever × dataset leaderboard of eRAG list metrics (see the module docstring).

    ``per_dataset`` maps a dataset name to its ``erag_per_query`` table (``reader, retriever,
    query_id`` + one column per metric, :func:`~erag_dagster.meta.per_query.erag_per_query`).
    ``metrics``: ``None`` for every metric column of the first table. Within each reader every
    retriever is compared with ``baseline`` (default: the first retriever of the first
    dataset's table; a reader without it compares with its own first retriever). The Holm
    family spans all readers. Output: ``reader`` then :data:`LEADERBOARD_SCHEMA`'s columns,
    readers in order of first appearance. Cells' means are
    :func:`~erag_dagster.meta.per_query.erag_summary`'s (the ``erag_report`` asset's). An empty
    table contributes nothing; a missing column or a null/non-finite value raises
    :class:`InputError`.
    """
    tables = {name: t for name, t in per_dataset.items() if t.height}
    if not tables:
        raise InputError("the eRAG leaderboard needs at least one non-empty erag_per_query table")
    first = next(iter(tables.values()))
    keys = ("reader", "retriever", "query_id")
    names = list(metrics) if metrics else [c for c in first.columns if c not in keys]
    base = baseline if baseline is not None else str(first["retriever"][0])
    by_reader: dict[str, Board] = {}
    for dataset, table in tables.items():
        check_erag_per_query(table, names, f"erag_per_query of {dataset!r}")
        means = {
            (row["reader"], row["retriever"]): {m: row[m] for m in names}
            for row in erag_summary(table, names).iter_rows(named=True)
        }
        for (reader, retriever), group in table.group_by(
            "reader", "retriever", maintain_order=True
        ):
            report = ListMetricReport(
                per_query={row[0]: dict(zip(names, row[1:], strict=True)) for row in
                           group.select("query_id", *names).iter_rows()},
                aggregate=means[(reader, retriever)],
            )  # fmt: skip
            by_reader.setdefault(str(reader), {}).setdefault(dataset, {})[str(retriever)] = report
    if baseline is not None and not any(
        baseline in reports for boards in by_reader.values() for reports in boards.values()
    ):
        raise InputError(f"baseline {baseline!r} is not a retriever of any erag_per_query table")
    frames = []
    for reader, boards in by_reader.items():
        # a reader that never judged the baseline's lists compares with its own first retriever
        judged = any(base in reports for reports in boards.values())
        rows = _rows(boards, names, base if judged else None, stats)
        frames.append(
            pl.DataFrame(rows, schema=LEADERBOARD_SCHEMA, orient="row").select(
                pl.lit(reader).alias("reader"), pl.all()
            )
        )
    return with_holm(pl.concat(frames))


def _rows(
    boards: Board, metrics: Sequence[str], baseline: str | None, stats: Statistics
) -> list[tuple]:
    """Per-dataset rows (from the single-dataset leaderboard) and the mean-over-datasets rows."""
    if not boards:
        raise InputError("the cross-dataset leaderboard needs at least one dataset")
    order: list[str] = []
    for reports in boards.values():
        order += [r for r in reports if r not in order]
    base = order[0] if baseline is None else baseline
    if base not in order:
        raise InputError(f"baseline {base!r} is not a retriever of any dataset: {', '.join(order)}")
    rows: list[tuple] = []
    for dataset, reports in boards.items():
        has_base = base in reports
        board = leaderboard_from_reports(
            reports, metrics, stats, baseline=base if has_base else None
        )
        for row in board.iter_rows(named=True):
            for m in metrics:
                compared = (row[f"{m}_diff"], row[f"{m}_p_perm"], row[f"{m}_p_t"])
                rows.append(
                    (dataset, row["retriever"], m, row["retriever"] == base, 1, row["queries"],
                     row["dropped"], row[m], row[f"{m}_low"], row[f"{m}_high"],
                     *(compared if has_base else (None, None, None)), None, None)
                )  # fmt: skip
    for retriever in order:
        present = [d for d, reports in boards.items() if retriever in reports]
        complete = len(present) == len(boards)
        with_base = complete and all(base in reports for reports in boards.values())
        reports = [boards[d][retriever] for d in present]
        for m in metrics:
            cells = (None,) * 6
            if complete:
                cells = _mean_cells(
                    reports,
                    [boards[d][base] for d in present] if with_base else None,
                    m,
                    retriever == base,
                    stats,
                )
            rows.append(
                (MEAN_OVER_DATASETS, retriever, m, retriever == base, len(present),
                 sum(len(r.per_query) for r in reports),
                 sum(len(r.dropped_queries) for r in reports), *cells, None, None)
            )  # fmt: skip
    return rows


def _mean_cells(
    reports: Sequence[ListMetricReport],
    base_reports: Sequence[ListMetricReport] | None,
    metric: str,
    is_base: bool,
    stats: Statistics,
) -> tuple[float | None, ...]:
    """``mean, low, high, diff, p_perm, p_t`` of the mean over datasets (module docstring)."""
    mean = sum(r.aggregate[metric] for r in reports) / len(reports)
    scores = [metric_scores(r, metric) for r in reports]
    low, high = stratified_bootstrap_mean_ci([list(s.values()) for s in scores], stats)
    if base_reports is None:
        return mean, low, high, None, None, None
    if is_base:
        return mean, low, high, 0.0, 1.0, None
    differences = []
    for s, base in zip(scores, base_reports, strict=True):
        _ids, a, b, _only_a, _only_b = align(s, metric_scores(base, metric))
        differences.append(a - b)
    diff = float(np.mean([d.mean() for d in differences]))
    p_perm, _exact = stratified_randomisation_test(differences, stats)
    return mean, low, high, diff, p_perm, None


def with_holm(board: pl.DataFrame) -> pl.DataFrame:
    """Fill ``p_holm`` and ``family``: Holm over every non-baseline, non-null ``p_perm``."""
    tested = (~pl.col("baseline") & pl.col("p_perm").is_not_null()).alias("tested")
    flags = board.select(tested)["tested"]
    p = board["p_perm"].fill_null(math.nan).to_numpy().copy()
    p[~flags.to_numpy()] = math.nan
    adjusted = holm(p)
    return board.with_columns(
        p_holm=pl.Series(adjusted, dtype=pl.Float64).fill_nan(None),
        family=pl.lit(int(flags.sum()), dtype=pl.Int64),
    )


def format_cross_leaderboard(
    board: pl.DataFrame,
    stats: Statistics,
    markdown: bool = True,
    digits: int = 3,
    ci_digits: int = 2,
) -> str:
    """Render a :func:`beir_leaderboard` or :func:`erag_leaderboard` frame.

    Rows ``metric, [reader,] retriever`` (the baseline marked ``(baseline)``), one column per
    dataset then :data:`MEAN_OVER_DATASETS`. A cell reads ``0.512 [0.47, 0.55]``, followed by
    ``*`` (``\\*`` in markdown) where the Holm-adjusted p-value is below ``stats.alpha``;
    ``–`` where the retriever did not run. The notes name the test, the correction and the family
    size.
    """
    reader = ["reader"] if "reader" in board.columns else []
    datasets = board["dataset"].unique(maintain_order=True).to_list()
    keys = ["metric", *reader, "retriever"]
    star = "\\*" if markdown else "*"
    cells = {(*(row[k] for k in keys), row["dataset"]): row for row in board.iter_rows(named=True)}
    systems = board.select(keys[1:]).unique(maintain_order=True).rows()
    metrics = board["metric"].unique(maintain_order=True).to_list()
    rows = []
    for key in [(m, *system) for m in metrics for system in systems]:
        if not any((*key, d) in cells for d in datasets):
            continue
        first = cells[(*key, next(d for d in datasets if (*key, d) in cells))]
        label = f"{key[-1]} (baseline)" if first["baseline"] else key[-1]
        out = [*(str(k) for k in key[:-1]), label]
        for d in datasets:
            row = cells.get((*key, d))
            if row is None or row["mean"] is None:
                out.append(MISSING)
                continue
            text = ci_text(row["mean"], row["low"], row["high"], digits, ci_digits)
            p = row["p_holm"]
            out.append(text + (star if p is not None and p < stats.alpha else ""))
        rows.append(out)
    family = int(board["family"][0]) if board.height else 0
    base = board.filter(pl.col("baseline"))["retriever"].unique(maintain_order=True).to_list()
    notes = [
        f"[low, high]: {stats.percent} percentile bootstrap CI over the dataset's queries; "
        f"{MEAN_OVER_DATASETS}: unweighted mean of the dataset means, CI by a stratified "
        "bootstrap (queries resampled within each dataset).",
        f"{star} p < {stats.alpha:g}: {P_HOLM_TEST} over {family} comparisons (every "
        f"non-baseline cell of this table) with the baseline ({', '.join(base)}) on the same "
        "queries.",
    ]
    if any(MISSING in row for row in rows):
        notes.append(f"{MISSING}: not run on that dataset (a mean over datasets needs every one).")
    headers = [*keys, *datasets]
    table = render_cells(headers, rows, [False] * len(keys) + [True] * len(datasets), markdown)
    return table + "\n\n" + ("\n\n" if markdown else "\n").join(notes)
