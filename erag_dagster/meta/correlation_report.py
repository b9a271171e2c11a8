"""The correlation report (paper Table 1 and Figure 1) from every system's labels and
end-to-end scores, with its side files (tables as parquet, the figure as png) in a folder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from erag_dagster.core.paths import atomic_path
from erag_dagster.meta.correlation import correlation_table, correlation_vs_k
from erag_dagster.meta.per_query import FIGURE1_METRICS, System, correlation_inputs
from erag_dagster.meta.plots import plot_correlation_vs_k
from erag_dagster.stats.settings import Statistics


@dataclass(frozen=True)
class CorrelationReport:
    """``table``: :func:`correlation_table` at the labelling depth; ``by_k``:
    :func:`correlation_vs_k` over the end-to-end depths; ``plot``: the figure's file."""

    table: pl.DataFrame
    by_k: pl.DataFrame
    plot: Path


def correlation_report(
    doc_labels: Mapping[System, pl.DataFrame],
    baseline_labels: Mapping[System, pl.DataFrame],
    end_to_end: Mapping[System, pl.DataFrame],
    *,
    dataset: str,
    metrics: Sequence[str],
    label_k: int,
    e2e_ks: Sequence[int],
    stats: Statistics,
    folder: Path,
) -> CorrelationReport:
    """Table 1 on ``metrics`` at ``label_k``; Figure 1 on :data:`FIGURE1_METRICS` at each
    of ``e2e_ks``. Writes ``correlation_table.parquet``, ``correlation_vs_k.parquet`` and
    ``correlation_vs_k.png`` into ``folder`` (atomically, replacing earlier ones)."""
    per_query, e2e = correlation_inputs(
        doc_labels, baseline_labels, end_to_end, metrics, dataset, label_k
    )
    table = correlation_table(per_query, e2e, stats)
    per_k = {
        k: correlation_inputs(
            doc_labels,
            baseline_labels,
            end_to_end,
            [m.format(k=k) for m in FIGURE1_METRICS],
            dataset,
            k,
        )
        for k in e2e_ks
    }
    by_k = correlation_vs_k(per_k, stats)
    folder.mkdir(parents=True, exist_ok=True)
    plot = plot_correlation_vs_k(by_k, folder / "correlation_vs_k.png")
    for name, frame in (("correlation_table", table), ("correlation_vs_k", by_k)):
        with atomic_path(folder / f"{name}.parquet") as tmp:
            frame.write_parquet(tmp)
    return CorrelationReport(table, by_k, plot)


#: The list metrics of :func:`label_methods_table` at depth ``k``.
TABLE_METRICS = ("P@{k}", "Success@{k}", "RR", "AP", "nDCG(ideal=list)@{k}",
                 "nDCG(ideal=max)@{k}", "UDCG@{k}")  # fmt: skip


def label_methods_table(
    labels: pl.DataFrame,
    end_to_end: pl.DataFrame,
    k: int,
    dataset: str,
    stats: Statistics,
) -> pl.DataFrame:
    """Table 1 (:func:`~erag_dagster.meta.correlation.correlation_table` with ``stats``) of every
    ``method`` of ``labels`` (the label methods of :mod:`erag_dagster.meta.label_methods`;
    ``method, query_id, doc_id, rank, label``; the ``eRAG`` rows are the eRAG labels) against
    ``end_to_end`` (``query_id, k, score``) at depth ``k``, for :data:`TABLE_METRICS`, through
    :func:`~erag_dagster.meta.per_query.correlation_inputs` (one system, ``bm25 / reader``)."""
    system = ("reader", "bm25")
    erag = labels.filter(pl.col("method") == "eRAG").drop("method")
    others = labels.filter(pl.col("method") != "eRAG")
    per_query, e2e = correlation_inputs(
        {system: erag}, {system: others}, {system: end_to_end},
        [m.format(k=k) for m in TABLE_METRICS], dataset, k,
    )  # fmt: skip
    return correlation_table(per_query, e2e, stats)
