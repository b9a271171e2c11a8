"""The report tables across the registry's datasets, each declared once
(:class:`~.declaration.Report`, ``scope="across"``): built only when two or more datasets have
the report's inputs (one dataset's report is that dataset's own).

- ``beir_leaderboard``: retriever x dataset on the human judgments (``qrels`` and every
  ``retrieval_run`` partition of each dataset with judgments), with the mean over datasets
  (BEIR's unweighted convention);
- ``erag_leaderboard``: reader x retriever x dataset on the eRAG labels (each dataset's
  ``erag_per_query``);
- ``table1_across``: Table 1 with one column group per dataset (``correlation_report``), the
  paper's layout.

The tables and their statistics (CIs, paired tests against the first registry retriever some
dataset ran, Holm-adjusted over the whole table) are :mod:`.cross_leaderboard`'s and
:mod:`.cross_table1`'s.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping

import polars as pl

from erag_dagster.reports.cross_leaderboard import (
    DatasetRuns,
    beir_leaderboard,
    erag_leaderboard,
    format_cross_leaderboard,
)
from erag_dagster.reports.cross_table1 import format_table1_across, table1_across
from erag_dagster.reports.declaration import (
    AcrossInputs,
    Computed,
    Markdown,
    PageBlock,
    Report,
    ReportInput,
)
from erag_dagster.reports.html_blocks import renamed
from erag_dagster.reports.tables import format_table
from erag_dagster.stats.settings import Statistics


def _baseline(inputs: AcrossInputs, ran: Mapping[str, object]) -> str | None:
    """The registry's first retriever that some dataset ran."""
    return next((p for p in inputs.retrievers if p in ran), None)


def _computed(
    table: pl.DataFrame, text: Callable[..., str], datasets: list[str], stats: Statistics
) -> Computed:
    metadata = {"report": Markdown(text(table, stats)), "rows": table.height, "datasets": datasets}
    return Computed(table, metadata)


def _text(
    render: Callable[..., str],
) -> Callable[[pl.DataFrame, bool, Statistics], str | None]:
    """The terminal view: the table as text (every cell either way)."""
    return lambda frame, _full, stats: (
        render(frame, stats, markdown=False) if frame.height else format_table(frame)
    )


def _page(
    render: Callable[..., str],
) -> Callable[[pl.DataFrame, Mapping[str, bytes], Statistics], str]:
    """The page's view: the terminal's text, names without hashes, preformatted."""

    def block(frame: pl.DataFrame, _files: Mapping[str, bytes], stats: Statistics) -> str:
        text = render(renamed(frame, ["reader", "retriever"]), stats, markdown=False)
        return f'<pre class="across">{html.escape(text, quote=True)}</pre>'

    return block


def _beir(inputs: AcrossInputs) -> Computed:
    runs = {n: dict(v.get("retrieval_run") or {}) for n, v in inputs.values.items()}
    judged = {
        n: DatasetRuns(v["qrels"], runs[n], inputs.configs[n].relevance_level)
        for n, v in inputs.values.items()
    }
    judged = {n: d for n, d in judged.items() if d.qrels.height}
    ran = {key: None for by_partition in runs.values() for key in by_partition}
    stats = inputs.config.statistics
    board = beir_leaderboard(
        judged, inputs.config.human_metrics, stats, baseline=_baseline(inputs, ran)
    )
    return _computed(board, format_cross_leaderboard, list(judged), stats)


def _erag(inputs: AcrossInputs) -> Computed:
    tables = {n: v["erag_per_query"] for n, v in inputs.values.items()}
    ran = {r: None for t in tables.values() for r in t.get_column("retriever").unique().to_list()}
    metrics = [
        m for m in inputs.config.list_metrics if all(m in t.columns for t in tables.values())
    ]
    stats = inputs.config.statistics
    board = erag_leaderboard(tables, metrics, stats, baseline=_baseline(inputs, ran))
    return _computed(board, format_cross_leaderboard, list(tables), stats)


def _table1(inputs: AcrossInputs) -> Computed:
    tables = {n: v["correlation_report"] for n, v in inputs.values.items()}
    wide = table1_across(tables, statistic="kendall_tau")
    return _computed(wide, format_table1_across, list(tables), inputs.config.statistics)


BEIR_LEADERBOARD = Report(
    key="beir_leaderboard",
    title="Across datasets: retriever x dataset on the human judgments",
    inputs=(ReportInput("qrels"), ReportInput("retrieval_run", "retriever")),
    compute=_beir,
    text=_text(format_cross_leaderboard),
    page=PageBlock(
        "Retrievers on the human judgments, per dataset and mean over datasets",
        _page(format_cross_leaderboard),
        "no judgments in two datasets",
    ),
    scope="across",
    needs_reader=False,
    checks=False,
    group="cross_dataset",
    description="Retriever x dataset on each dataset's human judgments, mean over datasets "
    "(BEIR's unweighted convention), bootstrap CIs, paired randomisation tests against the "
    "first registry retriever, Holm-adjusted over the whole table.",
)

ERAG_LEADERBOARD = Report(
    key="erag_leaderboard",
    title="Across datasets: eRAG list metrics, reader x retriever x dataset",
    inputs=(ReportInput("erag_per_query"),),
    compute=_erag,
    text=_text(format_cross_leaderboard),
    page=PageBlock(
        "eRAG list metrics, reader x retriever x dataset",
        _page(format_cross_leaderboard),
        "no eRAG labels in two datasets",
    ),
    scope="across",
    checks=False,
    group="cross_dataset",
    description="Reader x retriever x dataset on the eRAG labels (each dataset's "
    "erag_per_query), CIs, paired tests against the first registry retriever, Holm over the "
    "whole table.",
)

TABLE1_ACROSS = Report(
    key="table1_across",
    title="Across datasets: Table 1 (Kendall tau-b), one column group per dataset",
    inputs=(ReportInput("correlation_report"),),
    compute=_table1,
    text=_text(format_table1_across),
    page=PageBlock(
        "Table 1 (Kendall tau-b), one column per dataset",
        _page(format_table1_across),
        "no correlation report in two datasets",
    ),
    scope="across",
    checks=False,
    group="cross_dataset",
    description="Table 1 (Kendall tau-b with end-to-end quality, bootstrap CIs) with one "
    "column group per dataset, the paper's layout.",
)
