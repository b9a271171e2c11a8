"""Plain-text and markdown tables for the CLI and Dagster metadata (``MetadataValue.md``).

Cell rendering policy (all renderers):

- floats use ``floatfmt`` (Python format spec, default ``.4f``); NaN prints as ``nan``
  (a value that is *undefined*, e.g. a correlation over constant scores) and infinities as
  ``inf`` / ``-inf``;
- null (``None``) prints as ``–`` (en dash): the value is *missing*;
- booleans print as ``true`` / ``false``; other values use ``str``; line breaks become spaces;
- numeric columns (integers, floats) are right-aligned, all others left-aligned, headers
  aligned like their column.

Text tables separate columns by two spaces and underline the header with dashes; trailing
spaces are stripped. Markdown tables are GitHub-flavoured, padded so the source is aligned
too, with ``|`` inside cells escaped as ``\\|``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.meta.correlation import (
    CI_COLUMNS,
    CI_NOTE_COLUMNS,
    GROUP_COLUMNS,
    best_per_column,
    table1,
)

MISSING = "–"
_TABLE1_INDEX = ("dataset", "retriever", "method")


def ci_bounds(low: float | None, high: float | None, ci_digits: int = 2) -> str:
    """``0.47, 0.55``: the bounds of a CI with ``ci_digits`` decimals (``nan`` for a missing or
    undefined bound)."""
    return ", ".join(
        "nan" if b is None or math.isnan(b) else f"{b:.{ci_digits}f}" for b in (low, high)
    )


def ci_text(
    value: float | None,
    low: float | None,
    high: float | None,
    digits: int = 3,
    ci_digits: int = 2,
) -> str:
    """``0.512 [0.47, 0.55]`` (:func:`ci_bounds`); :data:`MISSING` when ``value`` is missing,
    ``nan`` when it is undefined (no interval then)."""
    if value is None:
        return MISSING
    if math.isnan(value):
        return "nan"
    return f"{value:.{digits}f} [{ci_bounds(low, high, ci_digits)}]"


def format_cell(value: object, floatfmt: str = ".4f") -> str:
    """Render one value following the module's cell policy."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return format(value, floatfmt)
    return " ".join(str(value).splitlines())


def _cells(frame: pl.DataFrame, floatfmt: str) -> tuple[list[str], list[list[str]], list[bool]]:
    headers = list(frame.columns)
    right = [dtype.is_numeric() for dtype in frame.dtypes]
    rows = [[format_cell(v, floatfmt) for v in row] for row in frame.iter_rows()]
    return headers, rows, right


def _render_text(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]
) -> str:
    if not headers:
        return ""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def _render_markdown(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]
) -> str:
    if not headers:
        return ""
    headers = [h.replace("|", "\\|") for h in headers]
    rows = [[c.replace("|", "\\|") for c in r] for r in rows]
    widths = [max([3, len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        ]
        return "| " + " | ".join(parts) + " |"

    rule = [
        "-" * (w - 1) + ":" if r else ":" + "-" * (w - 1)
        for w, r in zip(widths, right, strict=True)
    ]
    out = [line(headers), line(rule)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def render_cells(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: Sequence[bool],
    markdown: bool = False,
) -> str:
    """Render already-formatted cells (``right``: which columns to right-align) as a text or
    markdown table, for reports whose cells are composite text (``0.512 [0.47, 0.55]``)."""
    return (_render_markdown if markdown else _render_text)(headers, rows, right)


def format_table(frame: pl.DataFrame, floatfmt: str = ".4f") -> str:
    """An aligned plain-text table of ``frame`` for terminals (header, dashes, rows).

    A frame without columns renders as the empty string; one without rows as header + rule.
    """
    return _render_text(*_cells(frame, floatfmt))


def to_markdown(frame: pl.DataFrame, floatfmt: str = ".4f") -> str:
    """A GitHub-flavoured markdown table of ``frame`` (for Dagster ``MetadataValue.md``)."""
    return _render_markdown(*_cells(frame, floatfmt))


def format_table1(
    frame: pl.DataFrame,
    statistic: str = "kendall_tau",
    markdown: bool = False,
    digits: int = 3,
    ci_digits: int = 2,
    compact: bool = False,
    headers: Sequence[str] = _TABLE1_INDEX,
) -> str:
    """Render the paper's Table 1 from a :func:`~erag_dagster.meta.correlation.correlation_table`.

    Rows ``dataset, retriever, method``; one column per metric. Each cell is
    ``value [low, high]`` (e.g. ``0.412 [0.30, 0.52]``: ``digits`` decimals for the value,
    ``ci_digits`` for the bootstrap bounds), prefixed with ``*`` where it is the best (highest)
    in its column within its dataset and retriever (``\\*`` in markdown). An undefined
    correlation prints as ``nan`` (no interval), a missing method/metric pair as ``–``. Where
    the frame has the ``*_undefined``/``*_ci_note`` columns, a CI that is not reported prints
    its note instead (``-0.062 [no CI: 36.6% of resamples undefined]``) and a reported one
    computed with undefined resamples gets their share (``0.41 [0.20, 0.60] (1.8% undef.)``).
    A footnote explains the marks; its ``nan`` and ``no CI`` lines appear only when needed.

    ``compact`` (the run's short report): a CI that is not reported prints ``[no CI]``, the
    share of undefined resamples is left out and the footnote is one or two short lines.
    ``headers``: the names printed over the three index columns (a pivoted frame may hold
    readers in ``retriever``).
    """
    star = "\\*" if markdown else "*"
    cells = table1_cells(frame, statistic, star, digits, ci_digits, compact)
    render = _render_markdown if markdown else _render_text
    table = render([*headers, *cells.headers[len(_TABLE1_INDEX) :]], cells.rows, cells.right)
    if compact:  # the star's line, then the marks on one line
        marks = " ".join(cells.notes[1:])
        return "\n".join([table, cells.notes[0], *([marks] if marks else [])])
    # Markdown joins adjacent lines into one paragraph; a blank line keeps the notes apart.
    return table + "\n\n" + ("\n\n" if markdown else "\n").join(cells.notes)


class Table1Cells(NamedTuple):
    """Table 1 as text cells (:func:`table1_cells`): ``right`` says which columns are numeric;
    ``notes`` are the footnote lines."""

    headers: list[str]
    rows: list[list[str]]
    right: list[bool]
    notes: list[str]


def compact_table1_text(
    frame: pl.DataFrame, statistic: str, headers: Sequence[str]
) -> tuple[str, list[str]]:
    """Compact Table 1 for a section whose title already explains the star and the bootstrap
    CI: the rendered table and its marks (``nan: ...``, ``no CI: ...``; only those present),
    without the star footnote (:func:`format_table1` keeps it for a table printed alone)."""
    cells = table1_cells(frame, statistic, "*", compact=True)
    table = _render_text([*headers, *cells.headers[len(_TABLE1_INDEX) :]], cells.rows, cells.right)
    return table, cells.notes[1:]


def table1_cells(
    frame: pl.DataFrame,
    statistic: str = "kendall_tau",
    star: str = "*",
    digits: int = 3,
    ci_digits: int = 2,
    compact: bool = False,
) -> Table1Cells:
    """The cells and notes of :func:`format_table1` (its docstring states them, ``compact``
    too), with ``star`` marking the best cell, for renderers other than text and markdown (the
    HTML report)."""
    if statistic not in CI_COLUMNS:
        raise InputError(
            f"unknown statistic {statistic!r}; expected one of {', '.join(CI_COLUMNS)}"
        )
    low_col, high_col = CI_COLUMNS[statistic]
    values = table1(frame, statistic)
    lows = table1(frame, low_col)
    highs = table1(frame, high_col)
    share_col, note_col = CI_NOTE_COLUMNS[statistic]
    annotated = {share_col, note_col} <= set(frame.columns)
    shares = table1(frame, share_col) if annotated else None
    # A CI's note (why it is not reported), by (dataset, retriever, method, metric).
    ci_notes: dict[tuple[str, ...], str] = {}
    if annotated:
        noted = frame.filter(pl.col(note_col).is_not_null())
        ci_notes = {r[:-1]: r[-1] for r in noted.select(*GROUP_COLUMNS, note_col).iter_rows()}
    best = best_per_column(values)
    metrics = [c for c in values.columns if c not in _TABLE1_INDEX]

    any_nan = any_undefined = False
    rows: list[list[str]] = []
    for i in range(values.height):
        index = tuple(values[c][i] for c in _TABLE1_INDEX)
        row = [format_cell(v) for v in index]
        for m in metrics:
            v, lo, hi = values[m][i], lows[m][i], highs[m][i]
            if v is None:
                row.append(MISSING)
            elif math.isnan(v):
                any_nan = True
                row.append("nan")
            else:
                mark = star if best[m][i] else ""
                share = shares[m][i] if shares is not None else None
                bounds = ci_notes.get((*index, m)) or ci_bounds(lo, hi, ci_digits)
                if compact and bounds.startswith("no CI"):
                    bounds = "no CI"
                cell = f"{mark}{v:.{digits}f} [{bounds}]"
                if share and not bounds.startswith("no CI") and not compact:
                    cell += f" ({share:.1%} undef.)"
                any_undefined |= bool(share) or bounds.startswith("no CI")
                row.append(cell)
        rows.append(row)
    headers = [*_TABLE1_INDEX, *metrics]
    right = [False] * len(_TABLE1_INDEX) + [True] * len(metrics)
    if compact:
        notes = [f"{star} best in its column; [low, high]: percentile bootstrap CI over queries."]
        if any_nan:
            notes.append("nan: correlation undefined (a side's scores are constant).")
        if any_undefined:
            notes.append("no CI: too many undefined resamples (--full says how many).")
        return Table1Cells(headers, rows, right, notes)
    notes = [
        f"{star} best in its column within the dataset and retriever.",
        "[low, high]: percentile bootstrap CI over queries.",
    ]
    if any_nan:
        notes.append("nan: correlation undefined (scores constant over the queries, or n < 2).")
    if any_undefined:
        notes.append(
            "undef.: share of bootstrap resamples with a constant side (correlation undefined);"
            " the CI counts them at -1 (low) and +1 (high), and is not reported when they reach"
            " (1 - confidence)/2 of the resamples or when it would exclude the estimate."
        )
    return Table1Cells(headers, rows, right, notes)
