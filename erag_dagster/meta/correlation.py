"""Table 1 and Figure 1 of the paper: how well each labelling method tracks end-to-end quality.

Inputs are long polars frames of per-query scores:

- ``per_query(dataset, retriever, method, metric, query_id, value)``: the retrieval score of a
  query's ranked list under a labelling ``method`` (eRAG, provenance/human qrels, containment,
  ...) and a list ``metric`` (``P@1``, ``nDCG@10``, ...);
- ``end_to_end(dataset, retriever, query_id, value)``: the downstream score of the full RAG
  pipeline (reader given the top-k documents together) on that query.

For every ``(dataset, retriever, method, metric)`` the correlation is taken **over queries**
between the retrieval score and the end-to-end score of the same ``(dataset, retriever)``, as
in the paper (§4.2): Kendall's tau-b and Spearman's rho with percentile bootstrap CIs (see
:mod:`erag_dagster.stats.correlation`, which also states when a CI is not reported: too many
resamples with an undefined correlation, or an interval excluding its estimate; the table
carries that share and the reason). Queries present on one side only are left out (inner join on
``query_id``); ``n_queries`` counts the queries used and ``n_unmatched`` those left out from
either side. A correlation that is undefined (a side constant over the matched queries, or
fewer than two of them) is ``nan``, never an error.

Every group is bootstrapped with the same seed (one :class:`~erag_dagster.stats.settings.
Statistics` value, required) and its queries sorted by id, so methods
compared on the same queries are resampled with the same draws (common random numbers), and
results do not depend on row order.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.stats.correlation import (
    CorrelationEstimate,
    bootstrap_ci,
    kendall_tau_b,
    spearman_rho,
)
from erag_dagster.stats.settings import Statistics

PER_QUERY_COLUMNS = ("dataset", "retriever", "method", "metric", "query_id", "value")
END_TO_END_COLUMNS = ("dataset", "retriever", "query_id", "value")
#: The index columns of every output row (one group of queries).
GROUP_COLUMNS = ("dataset", "retriever", "method", "metric")

CORRELATION_SCHEMA: dict[str, type[pl.DataType]] = {
    "dataset": pl.String,
    "retriever": pl.String,
    "method": pl.String,
    "metric": pl.String,
    "kendall_tau": pl.Float64,
    "kendall_low": pl.Float64,
    "kendall_high": pl.Float64,
    "kendall_undefined": pl.Float64,
    "kendall_ci_note": pl.String,
    "spearman_rho": pl.Float64,
    "spearman_low": pl.Float64,
    "spearman_high": pl.Float64,
    "spearman_undefined": pl.Float64,
    "spearman_ci_note": pl.String,
    "n_queries": pl.Int64,
    "n_unmatched": pl.Int64,
}

#: Each statistic's confidence-interval columns in :func:`correlation_table`'s output.
CI_COLUMNS: dict[str, tuple[str, str]] = {
    "kendall_tau": ("kendall_low", "kendall_high"),
    "spearman_rho": ("spearman_low", "spearman_high"),
}
#: Each statistic's share of undefined bootstrap resamples and the reason its CI is not
#: reported (null when it is): annotations of a figure, not part of a row's identity.
CI_NOTE_COLUMNS: dict[str, tuple[str, str]] = {
    "kendall_tau": ("kendall_undefined", "kendall_ci_note"),
    "spearman_rho": ("spearman_undefined", "spearman_ci_note"),
}
_STATISTICS = {"kendall_tau": kendall_tau_b, "spearman_rho": spearman_rho}


def _ci_cells(est: CorrelationEstimate) -> tuple[float, float, float, float, str | None]:
    """``value, low, high, undefined share, note`` of one estimate (one statistic's columns)."""
    return est.value, est.low, est.high, est.undefined_share, est.ci_note


def _validate(frame: pl.DataFrame, columns: tuple[str, ...], name: str) -> pl.DataFrame:
    """Select and type ``columns``; reject null/non-finite values and duplicate keys."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{name}: missing column(s) {', '.join(missing)}")
    keys = [c for c in columns if c != "value"]
    out = frame.select(*[pl.col(c).cast(pl.String) for c in keys], pl.col("value").cast(pl.Float64))
    bad = out.filter(pl.col("value").is_null() | ~pl.col("value").is_finite())
    if bad.height:
        row = bad.row(0, named=True)
        where = ", ".join(f"{c}={row[c]!r}" for c in keys)
        raise InputError(f"{name}: missing or non-finite value {row['value']} at {where}")
    dup = out.filter(pl.struct(keys).is_duplicated())
    if dup.height:
        row = dup.row(0, named=True)
        where = ", ".join(f"{c}={row[c]!r}" for c in keys)
        raise InputError(f"{name}: more than one value for {where}")
    return out


def correlation_table(
    per_query: pl.DataFrame, end_to_end: pl.DataFrame, stats: Statistics
) -> pl.DataFrame:
    """Per ``(dataset, retriever, method, metric)``: correlation with end-to-end quality.

    Returns one row per group of ``per_query`` (in order of first appearance) with
    :data:`CORRELATION_SCHEMA`: ``kendall_tau``/``spearman_rho``, their percentile bootstrap
    bounds (``*_low``, ``*_high``) at ``stats.confidence`` (``stats.resamples`` resamples from
    ``stats.seed``), the share of resamples whose statistic was
    undefined (``*_undefined``, in ``[0, 1]``), why the bounds are ``nan`` when they are
    (``*_ci_note``, else null; policy in :func:`~erag_dagster.stats.correlation.bootstrap_ci`),
    ``n_queries`` and ``n_unmatched``.
    """
    pq = _validate(per_query, PER_QUERY_COLUMNS, "per_query")
    e2e = _validate(end_to_end, END_TO_END_COLUMNS, "end_to_end").rename({"value": "end_to_end"})
    pair_keys = ["dataset", "retriever"]
    joined = pq.join(e2e, on=[*pair_keys, "query_id"], how="inner").sort("query_id")
    matched = {
        key: group for key, group in joined.group_by(list(GROUP_COLUMNS), maintain_order=True)
    }
    group_sizes = {row[:4]: row[4] for row in pq.group_by(list(GROUP_COLUMNS)).len().iter_rows()}
    e2e_sizes = {(row[0], row[1]): row[2] for row in e2e.group_by(pair_keys).len().iter_rows()}
    rows = []
    for key in pq.select(GROUP_COLUMNS).unique(maintain_order=True).iter_rows():
        group = matched.get(key)
        x = group["value"].to_numpy() if group is not None else []
        y = group["end_to_end"].to_numpy() if group is not None else []
        n = len(x)
        tau = bootstrap_ci(x, y, kendall_tau_b, stats)
        rho = bootstrap_ci(x, y, spearman_rho, stats)
        unmatched = (group_sizes[key] - n) + (e2e_sizes.get(key[:2], 0) - n)
        rows.append((*key, *_ci_cells(tau), *_ci_cells(rho), n, unmatched))
    return pl.DataFrame(rows, schema=CORRELATION_SCHEMA, orient="row")


def table1(frame: pl.DataFrame, statistic: str = "kendall_tau") -> pl.DataFrame:
    """Pivot a :func:`correlation_table` frame: methods as rows, metrics as columns.

    Output columns: ``dataset, retriever, method`` then one ``Float64`` column per metric (in
    order of first appearance) holding ``statistic`` (any value column, e.g. ``kendall_tau``,
    ``spearman_rho`` or a CI bound such as ``kendall_low``). A method without a metric gets
    null there.
    """
    missing = [c for c in (*GROUP_COLUMNS, statistic) if c not in frame.columns]
    if missing:
        raise InputError(f"correlation frame: missing column(s) {', '.join(missing)}")
    dup = frame.filter(pl.struct(GROUP_COLUMNS).is_duplicated())
    if dup.height:
        row = dup.row(0, named=True)
        where = ", ".join(f"{c}={row[c]!r}" for c in GROUP_COLUMNS)
        raise InputError(f"correlation frame: more than one row for {where}")
    index = ["dataset", "retriever", "method"]
    metrics = frame["metric"].unique(maintain_order=True).to_list()
    if not metrics:
        return pl.DataFrame(schema={c: pl.String for c in index})
    wide = frame.select(*index, "metric", pl.col(statistic).cast(pl.Float64)).pivot(
        on="metric", index=index, values=statistic, maintain_order=True
    )
    return wide.select(*index, *[pl.col(m).cast(pl.Float64) for m in metrics])


def best_per_column(table: pl.DataFrame) -> pl.DataFrame:
    """Mark the best (highest) value of each metric column within each dataset x retriever.

    Takes a :func:`table1` frame; returns the same shape with ``dataset, retriever, method``
    kept and each metric column a ``Boolean``: true where the value equals the group maximum
    (ties are all marked). NaN and null are never best, nor is a reference row
    (:data:`~erag_dagster.meta.label_methods.REFERENCE_METHODS`: the closed-book score).
    """
    from erag_dagster.meta.label_methods import REFERENCE_METHODS

    index = ["dataset", "retriever"]
    metric_columns = [c for c in table.columns if c not in (*index, "method")]
    reference = pl.col("method").is_in(sorted(REFERENCE_METHODS))
    marks = []
    for c in metric_columns:
        value = pl.when(reference).then(None).otherwise(pl.col(c).cast(pl.Float64).fill_nan(None))
        marks.append((value == value.max().over(index)).fill_null(False).alias(c))
    return table.select(*index, "method", *marks)


def correlation_vs_k(
    per_k: Mapping[int, tuple[pl.DataFrame, pl.DataFrame]],
    stats: Statistics,
    statistic: str = "kendall_tau",
) -> pl.DataFrame:
    """Correlation as a function of the number of retrieved documents ``k`` (paper Figure 1).

    ``per_k`` maps ``k`` to that cut-off's ``(per_query, end_to_end)`` frames. Returns rows
    ``k, dataset, retriever, method, metric, <statistic>, low, high, undefined, ci_note,
    n_queries`` sorted by ``k`` (keeping each k's group order), where ``statistic`` is
    ``kendall_tau`` or ``spearman_rho``, ``[low, high]`` its bootstrap interval and
    ``undefined``/``ci_note`` as in :func:`correlation_table`.
    """
    if statistic not in _STATISTICS:
        raise InputError(
            f"unknown statistic {statistic!r}; expected one of {', '.join(_STATISTICS)}"
        )
    low_col, high_col = CI_COLUMNS[statistic]
    share_col, note_col = CI_NOTE_COLUMNS[statistic]
    frames = []
    for k in sorted(per_k):
        if int(k) != k or k < 1:
            raise InputError(f"cut-off k must be a positive integer, got {k!r}")
        per_query, end_to_end = per_k[k]
        table = correlation_table(per_query, end_to_end, stats)
        frames.append(
            table.select(
                pl.lit(int(k), dtype=pl.Int64).alias("k"),
                *GROUP_COLUMNS,
                statistic,
                pl.col(low_col).alias("low"),
                pl.col(high_col).alias("high"),
                pl.col(share_col).alias("undefined"),
                pl.col(note_col).alias("ci_note"),
                "n_queries",
            )
        )
    if not frames:
        schema: dict[str, type[pl.DataType]] = {"k": pl.Int64}
        schema |= {c: pl.String for c in GROUP_COLUMNS}
        schema |= {statistic: pl.Float64, "low": pl.Float64, "high": pl.Float64}
        schema |= {"undefined": pl.Float64, "ci_note": pl.String, "n_queries": pl.Int64}
        return pl.DataFrame(schema=schema)
    return pl.concat(frames)
