"""The HTML report: one self-contained page a team lead reads in a minute (docs/html-report.md).

Top to bottom: the **verdict** of each dataset (per reader a sentence, a chart of each
retriever's eRAG score with its CI, and every pair with the p that decides it); then per
dataset its name, size and run date, what the numbers mean in words, what the labels cost,
the fit diagnostics (when given), one **worked example** per retriever from the question where
the retrievers disagree most, and the details: the eRAG leaderboard, the dataset's report
tables (each drawn by its declaration's page block, :mod:`erag_dagster.reports.catalog`: the
human-judgment leaderboard, Table 1 as a heat-map with Figure 1, label agreement), a per-query
drill-down pre-sorted by disagreement, the names with their partition hashes and full specs,
the readers behind the labels and links to the stored parquet files; then the reports across
datasets (their page blocks).

The parts: :mod:`.html_story` (verdict, meanings, examples, fit warnings),
:mod:`.html_details` (leaderboard, drill-down), :mod:`.html_chart` (the SVG chart),
:mod:`.html_blocks` (escaping, names, tables), :mod:`.html_words` (sentences) and
:mod:`.html_examples` (which question and documents to show); this module assembles the page.

Policy:

- **No network, no script.** CSS in a ``<style>`` element, the verdict chart an inline SVG,
  Figure 1 a ``data:image/png;base64`` URI; a Content-Security-Policy ``<meta>``
  (``default-src 'none'``) makes the browser refuse any fetch a future edit might add. Links to
  files are relative ``href``s (a click, not a fetch).
- **Every string is escaped** (:mod:`.html_blocks`): names, ids, texts and model JSON may
  hold ``<script>``; nothing from the inputs is markup.
- **Names without hashes**: partition keys (``bm25-286b153c``) show as registry names
  (:func:`~.html_blocks.display_names`); the keys and full specs are in the details table.
- **The page computes no verdict**: it renders the :class:`~.verdict.Verdict` it is handed
  (the run's one), and each view names its own test family (:data:`~.html_words.FAMILIES`).
- **Fits the page**: no element is wider than the viewport (checked at 1400 and 390 px in
  ``tests/test_html_report_browser.py``); a wide table scrolls inside its own box.
- A part whose input is missing says so in one line instead of an empty table.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import polars as pl

from erag_dagster.core.paths import atomic_path
from erag_dagster.labels.audit import identity_columns
from erag_dagster.meta.per_query import System
from erag_dagster.reports.catalog import BY_KEY, REPORTS
from erag_dagster.reports.cross_leaderboard import (
    MEAN_OVER_DATASETS,
    erag_leaderboard,
    with_holm,
)
from erag_dagster.reports.declaration import Report
from erag_dagster.reports.html_blocks import (
    absent,
    display_names,
    esc,
    frame_table,
    note,
)
from erag_dagster.reports.html_details import drilldown_html, erag_board_html
from erag_dagster.reports.html_examples import WorkedExample
from erag_dagster.reports.html_story import examples_html, fit_html, meaning_html, verdict_html
from erag_dagster.reports.html_words import (
    DatasetFacts,
    LabelCost,
    cost_sentence,
    facts_sentence,
)
from erag_dagster.reports.verdict import Verdict
from erag_dagster.stats.settings import Statistics

#: The identity columns the page shows for each reader fingerprint (of
#: :func:`~erag_dagster.labels.audit.identity_columns`).
IDENTITY_SHOWN = ("model", "model_hash", "dtype", "hardware")

#: Columns of :func:`reader_identities`.
IDENTITY_TABLE = ("reader", "reader_fingerprint", "labels", *IDENTITY_SHOWN)

#: The fit diagnostics' warning lines for a dataset (``None``: no diagnostics given).
FitWarnings = Sequence[str] | None

#: Columns of a :attr:`DatasetSection.specs` frame.
SPEC_COLUMNS = ("kind", "name", "partition_key", "spec")

_CSS = """
*, *::before, *::after { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, sans-serif; margin: 1.5em auto; max-width: 1320px;
  padding: 0 1em; color: #1b1b1b; background: #fff; overflow-wrap: anywhere; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { border-bottom: 2px solid #ccd;
  padding-bottom: .2em; margin-top: 2em; } h3 { margin-top: 1.6em; } h4 { margin: 1em 0 .3em; }
p.lede { font-size: 1.05em; color: #333; margin-top: 0; }
p.sentence { font-size: 1.1em; margin: .3em 0 .5em; }
table { border-collapse: collapse; margin: .3em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccd; padding: .25em .5em; text-align: left; vertical-align: top;
  overflow-wrap: normal; }
th { background: #eef; } td.num { text-align: right; }
td.code { font-family: ui-monospace, monospace; font-size: .85em; white-space: normal;
  word-break: break-all; min-width: 14em; }
td.text { white-space: normal; min-width: 16em; max-width: 32em; }
td.id { font-family: ui-monospace, monospace; font-size: .8em; color: #555; }
td.best { outline: 2px solid #123; outline-offset: -2px; }
div.wide { overflow-x: auto; max-width: 100%; margin-bottom: .8em; }
tr.baseline td { background: #f6f6fb; }
p.note { color: #555; font-size: .88em; margin: .2em 0; }
svg.chart { display: block; max-width: 520px; margin: .3em 0 .6em; }
svg.chart text { font: 15px system-ui, sans-serif; fill: #1b1b1b; }
svg.chart text.tick { font-size: 12px; fill: #555; }
svg.chart .grid { stroke: #dde; stroke-width: 1; }
svg.chart .ci { stroke: #2a5599; stroke-width: 2.5; }
svg.chart .mean { fill: #2a5599; }
div.examples { display: grid; grid-template-columns: repeat(auto-fit, minmax(16em, 1fr));
  gap: .8em; }
div.example { border: 1px solid #ccd; border-radius: 6px; padding: .6em .8em; }
div.example h4 { margin-top: 0; }
blockquote { margin: .3em 0; padding: .3em .6em; background: #f7f7fa;
  border-left: 3px solid #aab; font-size: .92em; }
mark { background: #fde68a; }
ul.warnings li { color: #8a3b00; }
img.figure { max-width: 100%; height: auto; border: 1px solid #ccd; }
pre.across { overflow-x: auto; font-size: .85em; max-width: 100%; }
nav a { margin-right: 1em; }
@media (max-width: 600px) { body { font-size: 14px; margin: .8em auto; padding: 0 .6em; } }
"""

#: No fetch of any kind: images only from data: URIs, styles only inline.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


@dataclass(frozen=True)
class DatasetSection:
    """What the page shows for one dataset; ``None`` (or empty) where the run has no such part.

    ``name``: the dataset's display name (registry name, or :func:`~.html_words.
    dataset_display_name` of its spec); ``facts``: its size and full spec; ``verdict``: the
    run's :class:`~.verdict.Verdict` of this dataset (rendered, never recomputed);
    ``erag_per_query``: for the drill-down; ``questions``: question id → text (drill-down);
    ``downstream_metric``: the reader's metric behind the labels (``f1``); ``cost``:
    :class:`~.html_words.LabelCost`; ``examples``: :class:`~.html_examples.WorkedExample`\\ s;
    ``fit_warnings``: the fit diagnostics' warning lines (``None``: no diagnostics given, no
    section; empty: "no warning"); ``erag_board``: :func:`dataset_erag_leaderboard`;
    ``reports``: the dataset's report tables by key (``retrieval_report``,
    ``correlation_report``, ``label_agreement``: each drawn by its declaration's page block,
    :mod:`erag_dagster.reports.catalog`); ``side_files``: the files those blocks show, by name
    (Figure 1's png); ``identities``: :func:`reader_identities`; ``specs``: the names,
    partition keys and full specs (:data:`SPEC_COLUMNS`); ``files``: ``(label, href)`` pairs
    (:func:`file_links`).
    """

    name: str
    facts: DatasetFacts | None = None
    verdict: Verdict | None = None
    erag_per_query: pl.DataFrame | None = None
    questions: Mapping[str, str] = field(default_factory=dict)
    downstream_metric: str | None = None
    cost: LabelCost | None = None
    examples: Sequence[WorkedExample] = field(default_factory=tuple)
    fit_warnings: FitWarnings = None
    erag_board: pl.DataFrame | None = None
    ranking_metric: str | None = None
    reports: Mapping[str, pl.DataFrame] = field(default_factory=dict)
    side_files: Mapping[str, bytes] = field(default_factory=dict)
    identities: pl.DataFrame | None = None
    specs: pl.DataFrame | None = None
    files: Sequence[tuple[str, str | None]] = field(default_factory=tuple)

    def names(self) -> dict[str, str]:
        """Display name of every partition key the section's frames hold
        (:func:`~.html_blocks.display_names`)."""
        keys: list[str] = []
        for frame, columns in (
            (self.erag_per_query, ("reader", "retriever")),
            (self.erag_board, ("reader", "retriever")),
            *((table, ("reader", "retriever")) for table in self.reports.values()),
            (self.verdict.ranking if self.verdict else None, ("reader", "retriever")),
        ):
            if frame is not None:
                for c in columns:
                    if c in frame.columns:
                        keys += [str(v) for v in frame.get_column(c).drop_nulls().to_list()]
        return display_names(keys)


def dataset_erag_leaderboard(
    per_query: pl.DataFrame,
    metrics: Sequence[str],
    stats: Statistics,
    baseline: str | None = None,
) -> pl.DataFrame:
    """One dataset's eRAG leaderboard: :func:`~.cross_leaderboard.erag_leaderboard`
    on its ``erag_per_query`` table without the mean-over-datasets rows (one dataset: the same
    numbers again), Holm re-applied over the remaining comparisons (every reader, metric and
    non-baseline retriever of the dataset), with the evaluation's ``stats`` (the same CIs and
    p as the run's ``erag_leaderboard``). ``baseline``: the retriever compared against
    (default the table's first); one the table lacks falls back to that default."""
    if baseline is not None and baseline not in per_query.get_column("retriever").to_list():
        baseline = None
    board = erag_leaderboard({"dataset": per_query}, metrics, stats, baseline=baseline)
    return with_holm(board.filter(pl.col("dataset") != MEAN_OVER_DATASETS).drop("dataset"))


def reader_identities(
    doc_labels: Mapping[System, pl.DataFrame],
    identity_of: Callable[[str], Mapping[str, Any] | None],
) -> pl.DataFrame:
    """Who made the eRAG labels: one row per ``(reader partition key, reader_fingerprint)``
    among the labels, with ``labels`` (how many) and the :data:`IDENTITY_SHOWN` columns of the
    fingerprint's registered identity (``identity_of``: the label store's
    ``reader_identity``; an unregistered fingerprint gets nulls). Sorted by reader, then
    fingerprint. No labels: an empty frame with the columns of :data:`IDENTITY_TABLE`."""
    frames = [
        labels.group_by("reader_fingerprint").len("labels").with_columns(reader=pl.lit(reader))
        for (reader, _retriever), labels in doc_labels.items()
        if labels.height
    ]
    schema = {"reader": pl.String, "reader_fingerprint": pl.String, "labels": pl.Int64}
    if not frames:
        return pl.DataFrame(schema=schema | dict.fromkeys(IDENTITY_SHOWN, pl.String))
    counts = (
        pl.concat(frames)
        .group_by("reader", "reader_fingerprint")
        .agg(pl.col("labels").sum().cast(pl.Int64))
        .sort("reader", "reader_fingerprint")
    )
    described = []
    for fingerprint in counts.get_column("reader_fingerprint").to_list():
        identity = identity_of(fingerprint)
        columns = identity_columns(dict(identity)) if identity is not None else {}
        described.append({c: columns.get(c) for c in IDENTITY_SHOWN})
    details = pl.DataFrame(described, schema=dict.fromkeys(IDENTITY_SHOWN, pl.String))
    return pl.concat([counts.select(*schema), details], how="horizontal")


def file_links(files: Sequence[Path | str], page_folder: Path) -> list[tuple[str, str | None]]:
    """``(label, href)`` for each stored file: the label is the path below the folder that
    holds the files and the page (``assets/doc_labels/r1/bm25.parquet``); the href the path
    relative to ``page_folder``, URL-quoted."""
    paths = [Path(f) for f in files]
    if not paths:
        return []
    common = Path(os.path.commonpath([page_folder, *paths]))
    return [
        (p.relative_to(common).as_posix(), quote(Path(os.path.relpath(p, page_folder)).as_posix()))
        for p in paths
    ]


def render_html_report(
    sections: Sequence[DatasetSection],
    *,
    statistics: Statistics,
    title: str = "eRAG evaluation report",
    run_id: str | None = None,
    written: datetime | None = None,
    across: Mapping[str, pl.DataFrame] | None = None,
) -> str:
    """The whole page (a ``str`` of UTF-8 HTML); see the module docstring.

    ``run_id``: the Dagster run the page was written by (shown, not linked); ``written``: when
    (UTC; shown as the run's date); ``across``: the reports across datasets by key, each drawn
    after the datasets by its declaration's page block (:mod:`erag_dagster.reports.catalog`:
    the terminal's text table, preformatted). A section's verdict opens the page (no verdict:
    no such section). ``statistics``: the evaluation's (the stars' alpha and the intervals'
    level of every table the page draws; each verdict carries its own).
    """
    body = [f"<h1>{esc(title)}</h1>"]
    if len(sections) == 1:
        body.append(_lede(sections[0], written))
    elif written is not None:
        body.append(f'<p class="lede">Run {written:%Y-%m-%d %H:%M} UTC.</p>')
    if len(sections) > 1:
        links = [f'<a href="#dataset-{i}">{esc(s.name)}</a>' for i, s in enumerate(sections)]
        if any(frame.height for frame in (across or {}).values()):
            links.append('<a href="#across">Across datasets</a>')
        body.append(f"<nav>{' '.join(links)}</nav>")
    judged = [s for s in sections if s.verdict is not None and s.verdict.readers]
    if judged:
        parts = ['<section id="verdict"><h2>Verdict</h2>']
        for s in judged:
            if len(sections) > 1:
                parts.append(f"<h3>Dataset {esc(s.name)}</h3>")
            parts.append(verdict_html(s.verdict, s.names()))
        body.append("\n".join(parts) + "</section>")
    for index, section in enumerate(sections):
        body.append(
            _dataset_html(index, section, written, lede=len(sections) > 1, stats=statistics)
        )
    across_blocks = [
        _report_block(BY_KEY[key], frame, {}, statistics)
        for key, frame in (across or {}).items()
        if BY_KEY[key].page is not None and frame.height
    ]
    if across_blocks:
        body.append(
            '<section id="across"><h2>Across datasets</h2>\n'
            + "\n".join(across_blocks)
            + "</section>"
        )
    if run_id:
        body.append(f'<p class="note">Written by Dagster run <code>{esc(run_id)}</code>.</p>')
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head>\n"
        "<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_html_report(page: str, path: Path) -> Path:
    """Write ``page`` to ``path`` atomically (UTF-8; a reader never sees half a page)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path


# --- the one-minute parts ----------------------------------------------------------------------


def _lede(s: DatasetSection, written: datetime | None, named: bool = True) -> str:
    """The title line: ``Dataset <name> · size · run date`` (``named``: with the name; a
    section under its own heading leaves it out)."""
    facts = s.facts or DatasetFacts(name=s.name)
    line = esc(facts_sentence(facts, written))
    lead = f"Dataset <strong>{esc(s.name)}</strong>" if named else ""
    return f'<p class="lede">{" · ".join(p for p in (lead, line) if p)}</p>'


# --- the details -------------------------------------------------------------------------------


def _report_block(
    report: Report, frame: pl.DataFrame | None, files: Mapping[str, bytes], stats: Statistics
) -> str:
    """One report table's heading and block (its declaration's page view), or the one line
    saying it is missing."""
    assert report.page is not None
    heading = f"<h3>{esc(report.page.heading)}</h3>"
    if frame is None or not frame.height:
        return heading + "\n" + absent(report.page.absent)
    return heading + "\n" + report.page.render(frame, files, stats)


def _dataset_html(
    index: int, s: DatasetSection, written: datetime | None, lede: bool, stats: Statistics
) -> str:
    names = s.names()
    parts = [f'<section id="dataset-{index}"><h2>Dataset {esc(s.name)}</h2>']
    if lede:  # one dataset: its lede is the page's
        parts.append(_lede(s, written, named=False))
    parts.append("<h3>What the numbers mean</h3>")
    parts.append(meaning_html(s.erag_board, s.downstream_metric, names))
    parts.append("<h3>What it cost</h3>")
    parts.append(
        f"<p>{esc(cost_sentence(s.cost))}</p>"
        if s.cost is not None
        else absent("no eRAG labels in this run: no reader cost")
    )
    if s.fit_warnings is not None:  # the fit diagnostics: wired by one argument
        parts.append('<h3 id="fit-diagnostics">Fit diagnostics</h3>')
        parts.append(fit_html(s.fit_warnings))
    parts.append("<h3>Worked examples: where the retrievers disagree most</h3>")
    metric = s.verdict.metric if s.verdict else (s.ranking_metric or "")
    parts.append(examples_html(s.examples, metric, names))
    parts.append("<h3>eRAG leaderboard</h3>")
    if s.erag_board is not None and s.erag_board.height and s.ranking_metric:
        parts.append(erag_board_html(s.erag_board, s.ranking_metric, names, stats))
    else:
        parts.append(absent("no eRAG labels in this run"))
    for report in REPORTS:  # the report tables with a page block, in catalog order
        if report.scope == "dataset" and report.page is not None:
            parts.append(_report_block(report, s.reports.get(report.key), s.side_files, stats))
    parts.append("<h3>Per question: where the retrievers disagree</h3>")
    parts.append(drilldown_html(s.erag_per_query, metric, s.questions, names))
    parts.append("<h3>Details: names, partition hashes and specs</h3>")
    if s.specs is not None and s.specs.height:
        parts.append(frame_table(s.specs, code=("partition_key", "spec"), label="specs"))
        parts.append(
            note(
                "The page names each retriever and reader by its registry name; its Dagster "
                "partition is the name plus the first 8 hex digits of the spec's content hash."
            )
        )
    else:
        parts.append(absent("no registry specs given"))
    parts.append("<h4>Readers behind the eRAG labels</h4>")
    if s.identities is not None and s.identities.height:
        parts.append(
            frame_table(s.identities, code=("reader_fingerprint", *IDENTITY_SHOWN), label="readers")
        )
        parts.append(
            note(
                "One row per reader partition and fingerprint among the labels; the identity "
                "is the one registered in the label store (erag-dagster audit shows a label's)."
                ' hardware: "any" where the answers do not depend on the machine.'
            )
        )
    else:
        parts.append(absent("no eRAG labels in this run"))
    parts.append("<h4>Stored files</h4>")
    if s.files:
        items = [
            f'<li><a href="{html.escape(href, quote=True)}">{esc(label)}</a></li>'
            if href is not None
            else f"<li>{esc(label)}</li>"
            for label, href in s.files
        ]
        parts.append("<ul>" + "".join(items) + "</ul>")
    else:
        parts.append(absent("no stored file found"))
    parts.append("</section>")
    return "\n".join(parts)
