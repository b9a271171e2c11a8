"""The HTML report: one self-contained page with a run's reports (docs/html-report.md).

The page holds, per dataset: the eRAG leaderboard of each reader (retrievers ranked by the
ranking metric, 95% bootstrap CIs, the paired test against the baseline retriever,
Holm-adjusted), the human-judgment leaderboard (``retrieval_report``), Table 1 (the
correlation report), Figure 1 (its png, embedded), label agreement, the identity of the reader
behind every eRAG label, and links to the stored parquet files; plus, when one is given, a
verdict section at the top.

Policy:

- **No network.** Everything is inline: CSS in a ``<style>`` element, the figure as a
  ``data:image/png;base64`` URI, no script, no font, no external image; a
  Content-Security-Policy ``<meta>`` (``default-src 'none'``) makes the browser refuse any
  fetch a future edit might add. Links to files are relative ``href``s (a click, not a fetch).
- **Every string is escaped** (:func:`html.escape` with ``quote=True``): dataset names, ids,
  reader names and model JSON may hold ``<script>``; nothing from the inputs is markup.
- Cells follow the terminal reports' text (:mod:`erag_dagster.reports.tables`,
  :mod:`erag_dagster.reports.leaderboard`, :mod:`erag_dagster.reports.cross_leaderboard`): the
  same numbers in the same words, ``–`` missing, ``nan`` undefined.
- A section whose input is missing (a dataset without reader labels has no eRAG leaderboard,
  Table 1, figure or identities) says so in one line instead of an empty table.
"""

from __future__ import annotations

import base64
import html
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import polars as pl

from erag_dagster.labels.audit import identity_columns
from erag_dagster.meta.per_query import System
from erag_dagster.paths import atomic_path
from erag_dagster.reports.cross_leaderboard import (
    MEAN_OVER_DATASETS,
    P_HOLM_TEST,
    erag_leaderboard,
    with_holm,
)
from erag_dagster.reports.leaderboard import format_leaderboard
from erag_dagster.reports.tables import MISSING, ci_text, format_cell, table1_cells

#: The identity columns the page shows for each reader fingerprint (of
#: :func:`~erag_dagster.labels.audit.identity_columns`).
IDENTITY_SHOWN = ("model", "model_hash", "dtype", "hardware")

#: Columns of :func:`reader_identities`.
IDENTITY_TABLE = ("reader", "reader_fingerprint", "labels", *IDENTITY_SHOWN)

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
  padding: 0 1em; color: #1b1b1b; background: #fff; }
h1 { font-size: 1.6em; } h2 { border-bottom: 2px solid #ccd; padding-bottom: .2em;
  margin-top: 2em; } h3 { margin-top: 1.5em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccd; padding: .25em .6em; text-align: left; vertical-align: top;
  white-space: nowrap; }
th { background: #eef; } td.num { text-align: right; }
td.code { font-family: ui-monospace, monospace; font-size: .85em; white-space: normal;
  word-break: break-all; min-width: 12em; }
div.wide { overflow-x: auto; }
tr.baseline td { background: #f6f6fb; }
p.note { color: #555; font-size: .9em; margin: .2em 0; }
pre.verdict { background: #f4f8f4; border-left: 4px solid #4a4; padding: .8em;
  white-space: pre-wrap; }
img.figure { max-width: 100%; border: 1px solid #ccd; }
pre.across { overflow-x: auto; font-size: .85em; }
nav a { margin-right: 1em; }
"""

#: No fetch of any kind: images only from data: URIs, styles only inline.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def esc(value: object) -> str:
    """``value`` as escaped HTML text (``None`` → ``–``; floats as
    :func:`~erag_dagster.reports.tables.format_cell` writes them)."""
    return html.escape(format_cell(value), quote=True)


@dataclass(frozen=True)
class DatasetSection:
    """What the page shows for one dataset; ``None`` where the run has no such report.

    ``erag_board``: :func:`dataset_erag_leaderboard`; ``retrieval_report``: the
    ``retrieval_report`` asset (:func:`~erag_dagster.reports.leaderboard.leaderboard`);
    ``correlation_report``: the ``correlation_report`` asset (Table 1's long frame);
    ``figure_png``: Figure 1's png bytes; ``label_agreement``: the ``label_agreement`` asset;
    ``identities``: :func:`reader_identities`; ``files``: ``(label, href)`` pairs
    (:func:`file_links`).
    """

    name: str
    erag_board: pl.DataFrame | None = None
    ranking_metric: str | None = None
    retrieval_report: pl.DataFrame | None = None
    correlation_report: pl.DataFrame | None = None
    figure_png: bytes | None = None
    label_agreement: pl.DataFrame | None = None
    identities: pl.DataFrame | None = None
    files: Sequence[tuple[str, str | None]] = field(default_factory=tuple)


def dataset_erag_leaderboard(
    per_query: pl.DataFrame,
    metrics: Sequence[str],
    baseline: str | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> pl.DataFrame:
    """One dataset's eRAG leaderboard: :func:`~.cross_leaderboard.erag_leaderboard`
    on its ``erag_per_query`` table without the mean-over-datasets rows (one dataset: the same
    numbers again), Holm re-applied over the remaining comparisons (every reader, metric and
    non-baseline retriever of the dataset). ``baseline``: the retriever compared against
    (default the table's first); one the table lacks falls back to that default."""
    if baseline is not None and baseline not in per_query.get_column("retriever").to_list():
        baseline = None
    board = erag_leaderboard(
        {"dataset": per_query}, metrics, n_resamples=n_resamples, baseline=baseline, seed=seed
    )
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
    title: str = "eRAG evaluation report",
    run_id: str | None = None,
    verdict: str | Sequence[str] | None = None,
    across: Sequence[tuple[str, str]] = (),
) -> str:
    """The whole page (a ``str`` of UTF-8 HTML); see the module docstring.

    ``verdict``: the verdict text (lines; :mod:`erag_dagster.reports.verdict` once wired),
    shown first in a section of its own; no section without one (``None``, empty).
    ``run_id``: the Dagster run the page was written by (shown, not linked). ``across``:
    ``(title, text)`` of each report across datasets, the terminal's text table
    (:func:`~erag_dagster.reports.cross_leaderboard.format_cross_leaderboard`,
    :func:`~erag_dagster.reports.cross_table1.format_table1_across`), shown preformatted
    after the datasets.
    """
    body = [f"<h1>{esc(title)}</h1>"]
    if run_id:
        body.append(f'<p class="note">Written by Dagster run <code>{esc(run_id)}</code>.</p>')
    if len(sections) > 1:
        links = [f'<a href="#dataset-{i}">{esc(s.name)}</a>' for i, s in enumerate(sections)]
        if across:
            links.append('<a href="#across">Across datasets</a>')
        body.append(f"<nav>{' '.join(links)}</nav>")
    if verdict:  # None, "" or no lines: no section
        text = verdict if isinstance(verdict, str) else "\n".join(verdict)
        body.append(
            '<section id="verdict"><h2>Verdict</h2>'
            f'<pre class="verdict">{html.escape(text, quote=True)}</pre></section>'
        )
    for index, section in enumerate(sections):
        body.append(_dataset_html(index, section))
    if across:
        parts = ['<section id="across"><h2>Across datasets</h2>']
        for heading, text in across:
            parts.append(f"<h3>{esc(heading)}</h3>")
            parts.append(f'<pre class="across">{html.escape(text, quote=True)}</pre>')
        body.append("\n".join(parts) + "</section>")
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


# --- sections --------------------------------------------------------------------------------


def _dataset_html(index: int, s: DatasetSection) -> str:
    parts = [f'<section id="dataset-{index}"><h2>Dataset {esc(s.name)}</h2>']
    parts.append("<h3>eRAG leaderboard</h3>")
    if s.erag_board is not None and s.erag_board.height and s.ranking_metric:
        parts.append(_erag_board_html(s.erag_board, s.ranking_metric))
    else:
        parts.append(_absent("no eRAG labels in this run"))
    parts.append("<h3>Retrieval quality on the human judgments</h3>")
    if s.retrieval_report is not None and s.retrieval_report.height:
        parts.append(_table(format_leaderboard(s.retrieval_report)))
        parts.append(
            _note(
                "mean [95% bootstrap CI]; vs the first retriever: difference, permutation p "
                "(* p < 0.05, not corrected)."
            )
        )
    else:
        parts.append(_absent("the dataset has no judgments"))
    parts.append("<h3>Table 1: correlation of each labelling method with end-to-end quality</h3>")
    if s.correlation_report is not None and s.correlation_report.height:
        cells = table1_cells(s.correlation_report, "kendall_tau")
        # the dataset column repeats the section's name: left out
        keep = [i for i, h in enumerate(cells.headers) if h != "dataset"]
        parts.append(
            _cells_table(
                [cells.headers[i] for i in keep],
                [[row[i] for i in keep] for row in cells.rows],
                [cells.right[i] for i in keep],
                star="*",
            )
        )
        parts.append(_note("Kendall tau-b with the end-to-end score per query."))
        parts += [_note(n) for n in cells.notes]
    else:
        parts.append(_absent("no correlation report in this run"))
    parts.append("<h3>Figure 1: correlation vs number of retrieved documents</h3>")
    if s.figure_png:
        data = base64.b64encode(s.figure_png).decode("ascii")
        parts.append(
            f'<img class="figure" alt="Figure 1 of dataset {esc(s.name)}" '
            f'src="data:image/png;base64,{data}">'
        )
    else:
        parts.append(_absent("no figure in this run"))
    parts.append("<h3>Agreement of automatic labels with the human judgments</h3>")
    if s.label_agreement is not None and s.label_agreement.height:
        parts.append(_table(s.label_agreement))
        parts.append(_note("agreement: share of documents labelled alike; kappa: Cohen's kappa."))
    else:
        parts.append(_absent("no label agreement in this run"))
    parts.append("<h3>Readers behind the eRAG labels</h3>")
    if s.identities is not None and s.identities.height:
        parts.append(_table(s.identities, code=("reader_fingerprint", *IDENTITY_SHOWN)))
        parts.append(
            _note(
                "One row per reader partition and fingerprint among the labels; the identity "
                "is the one registered in the label store (erag-dagster audit shows a label's)."
                ' hardware: "any" where the answers do not depend on the machine.'
            )
        )
    else:
        parts.append(_absent("no eRAG labels in this run"))
    parts.append("<h3>Stored files</h3>")
    if s.files:
        items = [
            f'<li><a href="{html.escape(href, quote=True)}">{esc(label)}</a></li>'
            if href is not None
            else f"<li>{esc(label)}</li>"
            for label, href in s.files
        ]
        parts.append("<ul>" + "".join(items) + "</ul>")
    else:
        parts.append(_absent("no stored file found"))
    parts.append("</section>")
    return "\n".join(parts)


def _erag_board_html(board: pl.DataFrame, ranking: str) -> str:
    """Per reader: retrievers ranked by ``ranking`` (competition ranking: ties share a
    place), the ranking metric's CI and comparison, then every other metric's CI."""
    metrics = board.get_column("metric").unique(maintain_order=True).to_list()
    if ranking not in metrics:
        ranking = metrics[0]
    others = [m for m in metrics if m != ranking]
    parts = []
    for (reader,), rows in board.group_by("reader", maintain_order=True):
        cells = {(r["retriever"], r["metric"]): r for r in rows.iter_rows(named=True)}
        ranked = (
            rows.filter(pl.col("metric") == ranking)
            .with_columns(place=pl.col("mean").rank("min", descending=True).cast(pl.Int64))
            .sort("place", "retriever")
        )
        headers = ["#", "retriever", "queries", f"{ranking} [95% CI]", "vs baseline", *others]
        body = []
        for r in ranked.iter_rows(named=True):
            retriever = r["retriever"]
            name = f"{retriever} (baseline)" if r["baseline"] else retriever
            row = [str(r["place"]), name, str(r["queries"]), _ci(r), _versus(r)]
            row += [_ci(cells[(retriever, m)]) if (retriever, m) in cells else MISSING
                    for m in others]  # fmt: skip
            body.append((r["baseline"], row))
        parts.append(f"<h4>Reader {esc(reader)}</h4>")
        parts.append(_rows_table(headers, body, right=[True, False, True, True, True]))
    family = int(board.get_column("family")[0])
    parts.append(
        _note(
            f"Ranked by eRAG {ranking} (mean over queries of the list metric on the reader's "
            "per-document labels); [low, high]: 95% percentile bootstrap CI over queries."
        )
    )
    parts.append(
        _note(
            f"vs baseline: difference of the means on the same queries, p: {P_HOLM_TEST} over "
            f"{family} comparisons (every reader, metric and retriever of this dataset)."
        )
    )
    return "\n".join(parts)


def _ci(row: Mapping[str, Any]) -> str:
    return ci_text(row["mean"], row["low"], row["high"], 3, 2)


def _versus(row: Mapping[str, Any]) -> str:
    if row["baseline"]:
        return "baseline"
    diff, p = row["diff"], row["p_holm"]
    if diff is None or p is None or math.isnan(diff):
        return MISSING
    return f"{round(diff, 3) + 0.0:+.3f}, p = {p:.3f}"


# --- HTML building blocks ----------------------------------------------------------------------


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text, quote=True)}</p>'


def _absent(text: str) -> str:
    return f'<p class="note absent">{html.escape(text, quote=True)}.</p>'


def _table(frame: pl.DataFrame, code: Sequence[str] = ()) -> str:
    """A frame as a table, cells as :func:`~erag_dagster.reports.tables.format_cell` writes
    them; numeric columns right-aligned, ``code`` columns in monospace."""
    classes = [
        "num" if dtype.is_numeric() else "code" if name in code else ""
        for name, dtype in frame.schema.items()
    ]
    head = "".join(f"<th>{esc(c)}</th>" for c in frame.columns)
    rows = [
        "<tr>" + "".join(_td(esc(v), cls) for v, cls in zip(row, classes, strict=True)) + "</tr>"
        for row in frame.iter_rows()
    ]
    return _wide(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _cells_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool], star: str
) -> str:
    """Text cells as a table; a cell starting with ``star`` (best in its column) is bold."""

    def cell(text: str, numeric: bool) -> str:
        inner = esc(text)
        if text.startswith(star):
            inner = f"<strong>{inner}</strong>"
        return _td(inner, "num" if numeric else "")

    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(cell(c, r) for c, r in zip(row, right, strict=True)) + "</tr>"
        for row in rows
    )
    return _wide(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def _rows_table(
    headers: Sequence[str], rows: Sequence[tuple[bool, Sequence[str]]], right: Sequence[bool]
) -> str:
    """Text rows as a table; ``(True, cells)`` rows are the baseline's (shaded); columns past
    ``right`` are numeric."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for baseline, cells in rows:
        numeric = [*right, *([True] * (len(cells) - len(right)))]
        tds = "".join(_td(esc(c), "num" if n else "") for c, n in zip(cells, numeric, strict=True))
        body.append(f'<tr class="baseline">{tds}</tr>' if baseline else f"<tr>{tds}</tr>")
    return _wide(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def _td(inner: str, cls: str) -> str:
    return f'<td class="{cls}">{inner}</td>' if cls else f"<td>{inner}</td>"


def _wide(table: str) -> str:
    """A table in a box that scrolls sideways when it is wider than the page."""
    return f'<div class="wide">{table}</div>'
