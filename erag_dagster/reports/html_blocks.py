"""Building blocks of the HTML report (:mod:`erag_dagster.reports.html`): escaping, display
names, notes and tables.

Every string from the inputs goes through :func:`esc` (:func:`html.escape`, ``quote=True``):
nothing from a dataset, a registry or a label store is markup. Tables are wrapped in a box that
scrolls sideways on its own (:func:`wide`), so a wide table never widens the page.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence

import polars as pl

from erag_dagster.reports.tables import format_cell
from erag_dagster.reports.verdict import short_name


def esc(value: object) -> str:
    """``value`` as escaped HTML text (``None`` → ``–``; floats as
    :func:`~erag_dagster.reports.tables.format_cell` writes them)."""
    return html.escape(format_cell(value), quote=True)


def esc_cell(value: object) -> str:
    """:func:`esc` for a table cell: the comma of a CI (``[0.04, 0.62]``) is followed by a
    no-break space, so a narrow table wraps a cell between its value and its interval,
    never inside the interval."""
    return esc(value).replace(", ", ",\u00a0")


def display_names(keys: Iterable[str]) -> dict[str, str]:
    """Each registry partition key (``bm25-286b153c``) → the name a person reads (``bm25``,
    :func:`~erag_dagster.reports.verdict.short_name`); a ``"retriever / reader"`` system key
    shortens part by part. Two keys that would read alike (two versions of ``bm25`` in one
    table) keep their full keys, so no two rows look the same."""
    keys = list(dict.fromkeys(keys))
    short = {k: " / ".join(short_name(p) for p in k.split(" / ")) for k in keys}
    seen: dict[str, int] = {}
    for name in short.values():
        seen[name] = seen.get(name, 0) + 1
    return {k: (short[k] if seen[short[k]] == 1 else k) for k in keys}


def renamed(frame: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """``frame`` with the partition keys in ``columns`` replaced by :func:`display_names`
    (columns it lacks are skipped)."""
    present = [c for c in columns if c in frame.columns]
    if not present or frame.height == 0:
        return frame
    values = [v for c in present for v in frame.get_column(c).drop_nulls().to_list()]
    names = display_names(str(v) for v in values)
    return frame.with_columns(pl.col(c).replace(names) for c in present)


def note(text: str) -> str:
    """A small grey paragraph (escaped)."""
    return f'<p class="note">{html.escape(text, quote=True)}</p>'


def absent(text: str) -> str:
    """The one line a part without input shows instead of an empty table."""
    return f'<p class="note absent">{html.escape(text, quote=True)}.</p>'


def td(inner: str, cls: str = "", style: str = "") -> str:
    """One cell; ``inner`` is already HTML."""
    attrs = (f' class="{cls}"' if cls else "") + (f' style="{style}"' if style else "")
    return f"<td{attrs}>{inner}</td>"


def wide(table: str, label: str = "") -> str:
    """A table in a box that scrolls sideways when it is wider than the page (the page itself
    never does). ``label``: the box's accessible name."""
    aria = f' role="region" aria-label="{html.escape(label, quote=True)}" tabindex="0"'
    return f'<div class="wide"{aria if label else ""}>{table}</div>'


def head_row(headers: Sequence[str]) -> str:
    """The ``<thead>`` of a table (escaped)."""
    return "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead>"


def frame_table(frame: pl.DataFrame, code: Sequence[str] = (), label: str = "") -> str:
    """A frame as a table, cells as :func:`~erag_dagster.reports.tables.format_cell` writes
    them; numeric columns right-aligned, ``code`` columns in monospace (and wrapped)."""
    classes = [
        "num" if dtype.is_numeric() else "code" if name in code else ""
        for name, dtype in frame.schema.items()
    ]
    rows = [
        "<tr>"
        + "".join(td(esc_cell(v), cls) for v, cls in zip(row, classes, strict=True))
        + "</tr>"
        for row in frame.iter_rows()
    ]
    return wide(f"<table>{head_row(frame.columns)}<tbody>{''.join(rows)}</tbody></table>", label)


def rows_table(
    headers: Sequence[str],
    rows: Sequence[tuple[bool, Sequence[str]]],
    right: Sequence[bool],
    label: str = "",
) -> str:
    """Text rows as a table; ``(True, cells)`` rows are the baseline's (shaded); columns past
    ``right`` are numeric."""
    body = []
    for baseline, cells in rows:
        numeric = [*right, *([True] * (len(cells) - len(right)))]
        tds = "".join(
            td(esc_cell(c), "num" if n else "") for c, n in zip(cells, numeric, strict=True)
        )
        body.append(f'<tr class="baseline">{tds}</tr>' if baseline else f"<tr>{tds}</tr>")
    return wide(f"<table>{head_row(headers)}<tbody>{''.join(body)}</tbody></table>", label)


_LEADING_NUMBER = re.compile(r"^\*?(-?\d+(?:\.\d+)?)")


def heat_style(cell: str) -> str:
    """The background of a Table-1 cell by its correlation (the number the cell starts with,
    after a ``*``): blue for tau > 0, orange for tau < 0, the deeper the larger ``|tau|``
    (lightness 97 % at 0 down to 62 % at 1, so dark text stays readable); ``""`` for a cell
    without a number (``nan``, ``–``)."""
    match = _LEADING_NUMBER.match(cell)
    if match is None:
        return ""
    tau = max(-1.0, min(1.0, float(match.group(1))))
    hue = 210 if tau >= 0 else 25
    lightness = 97 - 35 * abs(tau)
    return f"background:hsl({hue},70%,{lightness:.0f}%)"


def heat_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool], star: str
) -> str:
    """Table 1 as a heat-map: numeric cells coloured by :func:`heat_style`; a cell starting
    with ``star`` (best in its column within its system) is bold and outlined."""

    def cell(text: str, numeric: bool) -> str:
        if not numeric:
            return td(esc(text))
        inner, cls = esc_cell(text), "num"
        if text.startswith(star):
            inner, cls = f"<strong>{inner}</strong>", "num best"
        return td(inner, cls, heat_style(text))

    body = "".join(
        "<tr>" + "".join(cell(c, r) for c, r in zip(row, right, strict=True)) + "</tr>"
        for row in rows
    )
    table = f'<table class="heat">{head_row(headers)}<tbody>{body}</tbody></table>'
    return wide(table, "Table 1")


def definition_list(items: Mapping[str, str]) -> str:
    """``term: text`` pairs as a ``<dl>`` (both escaped)."""
    body = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items.items())
    return f"<dl>{body}</dl>"
