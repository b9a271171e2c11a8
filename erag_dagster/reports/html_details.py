"""The eRAG leaderboard and the per-question drill-down of the HTML report
(:mod:`erag_dagster.reports.html`), as escaped HTML tables.

The leaderboard: per reader, retrievers ranked by the headline metric (competition ranking),
each metric's mean [CI at the evaluation's confidence] and the comparison with the baseline in
the leaderboard's own test family (:data:`~erag_dagster.reports.html_words.FAMILIES`). The
drill-down: every question (at most :data:`~erag_dagster.reports.html_examples.DRILLDOWN_ROWS`),
sorted by disagreement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import polars as pl

from erag_dagster.reports.html_blocks import absent, esc, note, rows_table
from erag_dagster.reports.html_examples import DRILLDOWN_ROWS, drilldown
from erag_dagster.reports.html_words import FAMILIES
from erag_dagster.reports.tables import MISSING, ci_text
from erag_dagster.stats.settings import Statistics


def _absent_labels() -> str:
    return absent("no eRAG labels in this run")


def drilldown_html(
    per_query: pl.DataFrame | None,
    metric: str | None,
    questions: Mapping[str, str],
    names: Mapping[str, str],
) -> str:
    """The per-question table (:func:`~erag_dagster.reports.html_examples.drilldown`) in a box
    that scrolls on its own, and a note saying how it is sorted (and cut)."""
    if per_query is None or not per_query.height or metric not in per_query.columns:
        return _absent_labels()
    table = drilldown(per_query, metric, questions, names)
    headers = list(table.columns)
    rows = []
    for row in table.iter_rows():
        cells = [f'<td class="text">{esc(row[0])}</td>']
        cells += [f'<td class="num">{_num(v)}</td>' for v in row[1:-1]]
        cells.append(f'<td class="id">{esc(row[-1])}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    box = (
        f'<div class="wide" role="region" aria-label="drill-down" tabindex="0"><table '
        f'class="drilldown"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
        "</table></div>"
    )
    total = per_query.get_column("query_id").n_unique()
    cut = ""
    if total > table.height:
        cut = f" The {DRILLDOWN_ROWS} most disputed of {total} are shown."
    return box + note(
        f"eRAG {metric} of each retriever at each question; disagreement: the largest minus "
        f"the smallest over the retrievers (the largest over the readers), sorted by it.{cut}"
    )


def _num(value: object) -> str:
    return esc(MISSING) if value is None else f"{float(value):.3f}"  # type: ignore[arg-type]


def erag_board_html(
    board: pl.DataFrame, ranking: str, names: Mapping[str, str], stats: Statistics
) -> str:
    """Per reader: retrievers ranked by ``ranking`` (competition ranking: ties share a
    place), the ranking metric's CI and comparison, then every other metric's CI (their
    level: ``stats.confidence``, the one the board was computed with)."""
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
        headers = [
            "#", "retriever", "queries", f"{ranking} [{stats.percent} CI]", "vs baseline",
            *others,
        ]  # fmt: skip
        body = []
        for r in ranked.iter_rows(named=True):
            retriever = r["retriever"]
            shown = names.get(retriever, retriever)
            name = f"{shown} (baseline)" if r["baseline"] else shown
            row = [str(r["place"]), name, str(r["queries"]), _ci(r), _versus(r)]
            row += [_ci(cells[(retriever, m)]) if (retriever, m) in cells else MISSING
                    for m in others]  # fmt: skip
            body.append((r["baseline"], row))
        parts.append(f"<h4>Reader {esc(names.get(reader, reader))}</h4>")
        parts.append(
            rows_table(headers, body, right=[True, False, True, True, True], label="leaderboard")
        )
    family = int(board.get_column("family")[0])
    parts.append(
        note(
            f"Ranked by eRAG {ranking} (mean over queries of the list metric on the reader's "
            f"per-document labels); [low, high]: {stats.percent} percentile bootstrap CI over "
            "queries. "
            "vs baseline: difference of the means on the same queries and its p. "
            + FAMILIES["leaderboard"].format(m=family)
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
