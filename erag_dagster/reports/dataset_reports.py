"""The report tables of one dataset, each declared once (:class:`~.declaration.Report`).

- ``retrieval_report``: the human-judgment leaderboard (pytrec_eval, trec_eval conventions):
  per retriever the mean of each human metric with a bootstrap CI and a paired comparison
  (randomisation test and t-test) with the registry's first retriever;
- ``erag_per_query`` / ``erag_report``: the eRAG list metrics per query and their means per
  (reader, retriever) — :mod:`.erag_tables`'s ``score`` and ``summarise`` (the steps every
  door's :class:`~erag_dagster.evaluation.session.EvaluationSession` calls);
- ``correlation_report``: Kendall tau-b / Spearman rho (bootstrap CIs) of every labelling
  method with end-to-end quality (paper Table 1), and correlation vs k (Figure 1);
- ``label_agreement``: agreement and Cohen's kappa of each automatic labelling with the human
  judgments on the same retrieved documents;
- ``efficiency_report``: wall time and peak memory, end-to-end vs eRAG (paper Table 2), on the
  first registry reader and the first retriever partition (sorted); materialised on purpose.

Every CI, test and star uses the evaluation's statistics (``config.statistics``: resamples,
seed, alpha, confidence, permutations), passed to each computation and view.

Terminal views: compact (the headline metric, one row per retriever / reader x method) unless
``full``; the page's blocks name each view's test family (:data:`~.html_words.FAMILIES`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping

import polars as pl

from erag_dagster.data.spec import parse_spec
from erag_dagster.meta.agreement import label_agreement_table
from erag_dagster.meta.correlation import table1
from erag_dagster.meta.correlation_report import correlation_report
from erag_dagster.meta.label_methods import CLOSED_BOOK_METHOD
from erag_dagster.reports import erag_tables
from erag_dagster.reports.declaration import (
    Computed,
    DatasetInputs,
    FilePath,
    Markdown,
    PageBlock,
    Report,
    ReportInput,
    markdown_table,
)
from erag_dagster.reports.html_blocks import frame_table, heat_table, note, renamed
from erag_dagster.reports.html_words import FAMILIES
from erag_dagster.reports.leaderboard import (
    STAT_SUFFIXES,
    format_leaderboard,
    leaderboard,
    leaderboard_metrics,
)
from erag_dagster.reports.tables import (
    compact_table1_text,
    format_table,
    format_table1,
    table1_cells,
)
from erag_dagster.reports.verdict import short_name
from erag_dagster.stats.settings import Statistics

_HASH = re.compile(r"-[0-9a-f]{8}\b")
FIGURE1_PNG = "correlation_vs_k.png"
"""Figure 1's side file, written by the correlation report into its folder."""
_RUN = ReportInput("retrieval_run", "retriever")
_DOC_LABELS = ReportInput("doc_labels", "reader_retriever")
_BASELINE_LABELS = ReportInput("baseline_labels", "reader_retriever")


def headline_metric(frame: pl.DataFrame) -> str:
    """The headline eRAG metric of a report frame: the first metric in the registry's
    ``list_metrics`` order (the first metric column of an ``erag_per_query``/``erag_report``
    frame, or the first ``metric`` of a Table-1 frame)."""
    if "metric" in frame.columns:
        return str(frame["metric"][0])
    return next(c for c in frame.columns if c not in ("reader", "retriever", "query_id", "queries"))


def _short(column: str) -> pl.Expr:
    return pl.col(column).map_elements(short_name, return_dtype=pl.String)


# -- retrieval_report ---------------------------------------------------------------------------


def _retrieval(inputs: DatasetInputs) -> Computed:
    qrels, metrics = inputs.values["qrels"], list(inputs.config.human_metrics)
    if qrels.height == 0:
        return Computed(
            pl.DataFrame(),
            {"metrics": metrics},
            why_empty="the dataset has no judgments",
            warnings=("the dataset has no judgments: no human-judgment report",),
        )
    runs = inputs.frames("retrieval_run")
    order = [p for p in inputs.retrievers if p in runs]
    stats = inputs.config.statistics
    board = leaderboard(
        qrels, {p: runs[p] for p in order}, metrics, stats,
        relevance_level=inputs.config.relevance_level,
    )  # fmt: skip
    metadata = {
        "report": markdown_table(format_leaderboard(board, stats)),
        "metrics": metrics,
        "relevance_level": inputs.config.relevance_level,
        "baseline": order[0],
    }
    return Computed(board, metadata)


def _retrieval_text(frame: pl.DataFrame, full: bool, stats: Statistics) -> str:
    if not frame.height:
        return format_table(frame)
    board = frame
    if not full:
        metric = leaderboard_metrics(frame)[0]
        columns = [f"{metric}{suffix}" for suffix in STAT_SUFFIXES]
        board = frame.select(
            _short("retriever"), "baseline", "queries", "dropped", metric, *columns
        )
    legend = (
        f"(mean [{stats.percent} bootstrap CI]; vs the first retriever: difference, "
        f"permutation p, * p < {stats.alpha:g}"
    )
    legend += ")" if full else f"; {len(leaderboard_metrics(frame))} metrics: --full)"
    return format_table(format_leaderboard(board, stats)) + "\n" + legend


def _retrieval_page(frame: pl.DataFrame, _files: Mapping[str, bytes], stats: Statistics) -> str:
    table = frame_table(
        format_leaderboard(renamed(frame, ["retriever"]), stats),
        label="human-judgment leaderboard",
    )
    legend = note(
        f"mean [{stats.percent} bootstrap CI]; vs the first retriever: difference, p "
        f"(* p < {stats.alpha:g}). " + FAMILIES["judgments"]
    )
    return table + "\n" + legend


RETRIEVAL_REPORT = Report(
    key="retrieval_report",
    title="Retrieval quality against human/provenance judgments (pytrec_eval)",
    inputs=(ReportInput("qrels"), _RUN),
    compute=_retrieval,
    text=_retrieval_text,
    page=PageBlock(
        "Retrieval quality on the human judgments", _retrieval_page, "the dataset has no judgments"
    ),
    needs_reader=False,
    figures=True,
    regression=True,
    description="Human-judgment leaderboard (pytrec_eval, trec_eval conventions): per retriever "
    "the mean of each metric with a bootstrap CI, and a paired comparison (randomisation "
    "test and t-test) with the first retriever of the registry.",
)


# -- erag_per_query, erag_report ----------------------------------------------------------------


ERAG_PER_QUERY = Report(
    key="erag_per_query",
    title="eRAG: list metrics per query, per reader and retriever",
    inputs=(_DOC_LABELS, ReportInput("queries")),
    compute=erag_tables.per_query_table,
    printed=False,
    description="Per-query eRAG list metrics: reader, retriever, query_id + one column per "
    "metric, computed on the eRAG labels of each run's top label_k documents, for every "
    "question of the dataset (one a run has no document for scores 0: docs/metrics.md).",
)

ERAG_REPORT = Report(
    key="erag_report",
    title="eRAG: list metrics on per-document reader labels, per retriever",
    inputs=(ReportInput("erag_per_query"),),
    compute=erag_tables.summary_table,
    # compact: left out (the verdict is its headline column, with CIs and tests)
    text=lambda frame, full, _stats: format_table(frame) if full else None,
    figures=True,
    description="The retriever comparison table: per (reader, retriever), the mean over "
    "queries of each eRAG list metric (the queries are those of erag_per_query).",
)


# -- correlation_report -------------------------------------------------------------------------

CLOSED_BOOK_NOTE = (
    "closed_book: the reader's score with no document, per question (a reference, never "
    "starred): where it is as high as eRAG's, end-to-end quality barely depends on retrieval"
)


def _correlation(inputs: DatasetInputs) -> Computed:
    config = inputs.config
    report = correlation_report(
        inputs.systems("doc_labels"), inputs.systems("baseline_labels"),
        inputs.systems("end_to_end"), dataset=inputs.dataset or parse_spec(config.dataset).name,
        metrics=config.list_metrics, label_k=config.label_k, e2e_ks=config.e2e_ks,
        stats=config.statistics, folder=inputs.folder,
    )  # fmt: skip
    image = base64.b64encode(report.plot.read_bytes()).decode()
    metadata = {
        "dataset": config.dataset,
        "table1_kendall": markdown_table(table1(report.table, "kendall_tau"), max_rows=100),
        "correlation_vs_k": markdown_table(report.by_k, max_rows=100),
        "plot": Markdown(f"![correlation vs k](data:image/png;base64,{image})"),
        "plot_path": FilePath(report.plot),
    }
    return Computed(report.table, metadata)


def _correlation_text(frame: pl.DataFrame, full: bool, _stats: Statistics) -> str:
    """Full: Table 1 as the paper lays it out; compact: the headline metric, rows reader x
    method, one column per retriever."""
    if not frame.height:
        return format_table(frame)
    if full:
        return format_table1(frame, statistic="kendall_tau")
    metric = headline_metric(frame)
    system = pl.col("retriever").str.split(" / ")
    pivoted = frame.filter(pl.col("metric") == metric).with_columns(
        retriever=system.list.get(-1).str.replace(_HASH.pattern, ""),
        metric=system.list.get(0).str.replace(_HASH.pattern, ""),
        method=pl.col("method").str.replace_all(_HASH.pattern, ""),
    )
    # the section's title explains the star and the CI: the marks join the head line
    table, marks = compact_table1_text(pivoted, "kendall_tau", ("dataset", "reader", "method"))
    head = " ".join([f"list metric {metric}, one column per retriever (every metric: --full).",
                     *marks])  # fmt: skip
    return "\n".join([head, table, *_reference_notes(frame)])


def _reference_notes(frame: pl.DataFrame) -> list[str]:
    """The line that says what a reference row of Table 1 is, when the table has one."""
    if CLOSED_BOOK_METHOD not in set(frame["method"]):
        return []
    return [CLOSED_BOOK_NOTE]


def _correlation_page(frame: pl.DataFrame, files: Mapping[str, bytes], _stats: Statistics) -> str:
    """Table 1 as a heat-map, then Figure 1 (its png, inline)."""
    cells = table1_cells(renamed(frame, ["retriever"]), "kendall_tau", compact=True)
    keep = [i for i, h in enumerate(cells.headers) if h != "dataset"]  # the section's name
    parts = [
        heat_table(
            [cells.headers[i] for i in keep],
            [[row[i] for i in keep] for row in cells.rows],
            [cells.right[i] for i in keep],
            star="*",
        ),
        note(
            "Kendall tau-b with the end-to-end score per query; colour: blue for positive, "
            "orange for negative, deeper for larger |tau|; outlined bold *: the best "
            "method in its column for that system."
        ),
        *(note(n) for n in _reference_notes(frame)),
        *(note(n) for n in cells.notes),
        "<h3>Figure 1: correlation vs number of retrieved documents</h3>",
    ]
    png = files.get(FIGURE1_PNG)
    if png:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f'<img class="figure" alt="Figure 1" src="data:image/png;base64,{data}">')
    else:
        parts.append('<p class="note absent">no figure in this run.</p>')
    return "\n".join(parts)


CORRELATION_REPORT = Report(
    key="correlation_report",
    title="Meta-evaluation: Kendall tau-b with end-to-end quality "
    "(bootstrap CI; * = best per column)",
    inputs=(_DOC_LABELS, _BASELINE_LABELS, ReportInput("end_to_end", "reader_retriever")),
    compute=_correlation,
    text=_correlation_text,
    page=PageBlock(
        "Table 1: correlation of each labelling method with end-to-end quality",
        _correlation_page,
        "no correlation report in this run (no Table 1, no Figure 1)",
    ),
    figures=True,
    regression=True,
    needs_gold=True,
    side_files=(FIGURE1_PNG,),
    description="Kendall tau-b / Spearman rho (bootstrap CIs) of every labelling method "
    "with end-to-end quality, per retriever (paper Table 1), and correlation vs k (Figure 1).",
)


# -- label_agreement ----------------------------------------------------------------------------


def _agreement(inputs: DatasetInputs) -> Computed:
    qrels = inputs.values["qrels"]
    table = label_agreement_table(
        inputs.systems("doc_labels"), inputs.systems("baseline_labels"), qrels,
        inputs.config.relevance_level,
    )  # fmt: skip
    why = "the dataset has no judgments" if qrels.height == 0 else None
    return Computed(table, {"report": markdown_table(table)}, why_empty=why)


def _agreement_text(frame: pl.DataFrame, full: bool, _stats: Statistics) -> str:
    if full or not frame.height:
        return format_table(frame)
    wide = frame.select(
        "method", pl.format("{}/{}", _short("reader"), _short("retriever")).alias("system"),
        "kappa",
    ).pivot(on="system", index="method", values="kappa", maintain_order=True)  # fmt: skip
    return format_table(wide, ".3f")


def _agreement_page(frame: pl.DataFrame, _files: Mapping[str, bytes], _stats: Statistics) -> str:
    table = frame_table(renamed(frame, ["reader", "retriever"]), label="label agreement")
    return (
        table + "\n" + note("agreement: share of documents labelled alike; kappa: Cohen's kappa.")
    )


LABEL_AGREEMENT = Report(
    key="label_agreement",
    title="Agreement of automatic labels with the human judgments (Cohen's kappa)",
    inputs=(_DOC_LABELS, _BASELINE_LABELS, ReportInput("qrels")),
    compute=_agreement,
    text=_agreement_text,
    page=PageBlock(
        "Agreement of automatic labels with the human judgments",
        _agreement_page,
        "no label agreement in this run",
    ),
    needs_gold=True,
    description="How each automatic labelling (eRAG, containment, semantic, LLM annotation) "
    "agrees with the human/provenance judgments on the same retrieved documents: raw agreement "
    "and Cohen's kappa per reader x retriever (unjudged documents count as non-relevant).",
)


# -- efficiency_report --------------------------------------------------------------------------


def _efficiency(inputs: DatasetInputs) -> Computed:
    from erag_dagster.meta.efficiency import efficiency_report

    config = inputs.config
    name, reader_config = inputs.reader_configs[0]
    runs = inputs.frames("retrieval_run")
    first = sorted(runs)[0]
    table = efficiency_report(
        name, reader_config, runs[first], inputs.values["queries"], inputs.values["corpus"],
        config.efficiency_ks, config.efficiency_queries, config.efficiency_rounds,
    )  # fmt: skip
    warnings = ()
    if table.is_empty():
        warnings = (
            f"no query has {max(config.efficiency_ks)} retrieved documents; raise k to measure",
        )
    metadata = {
        "report": markdown_table(table),
        "retriever": first,
        "ks": list(config.efficiency_ks),
        "rounds": config.efficiency_rounds,
    }
    return Computed(table, metadata, warnings=warnings)


EFFICIENCY_REPORT = Report(
    key="efficiency_report",
    title="Efficiency: end-to-end vs eRAG (query- / document-level batching)",
    inputs=(_RUN, ReportInput("corpus"), ReportInput("queries")),
    compute=_efficiency,
    text=lambda frame, _full, _stats: format_table(frame),
    printed=False,  # minutes of fresh reader processes: materialised on purpose
    checks=False,
    automatic=False,
    group="efficiency",
    runs_reader=True,
    description="Wall time and peak memory: end-to-end vs eRAG (query- and document-level "
    "batching), on the first registry reader and the first retriever partition (sorted).",
)
