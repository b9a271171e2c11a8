"""The verdict's chart: each retriever's eRAG score with its CI, one inline SVG per reader.

A dot-and-whisker chart drawn as SVG text (no script, no font, no fetch): one row per
retriever in the verdict's rank order, the dot at the mean over questions, the whisker from the
CI's low to its high bound, the numbers written at the right. The x axis runs from 0 to the
smallest of 0.25, 0.5 and 1 that holds every upper bound (eRAG list metrics are in ``[0, 1]``), with
gridlines at each fifth of it. The SVG scales to its box (``viewBox``, ``width="100%"``), so
it never widens the page; its text is real ``<text>`` (a browser test can measure it).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

#: Geometry in SVG user units (the chart scales to its box).
WIDTH = 470
ROW = 30
TOP = 10
LABEL_W = 100
VALUE_W = 150
AXIS_H = 40


def _scale_max(highs: Sequence[float]) -> float:
    top = max((h for h in highs if h == h), default=1.0)  # NaN-safe
    return next((m for m in (0.25, 0.5, 1.0) if top <= m), max(1.0, top))


def ci_chart_svg(
    rows: Sequence[Mapping[str, object]],
    metric: str,
    names: Mapping[str, str],
    title: str,
    level: str,
) -> str:
    """One reader's chart. ``rows``: the verdict's ranking rows of that reader, in rank order
    (``retriever``, ``mean``, ``low``, ``high``); ``names``: partition key → display name;
    ``title``: the SVG's accessible title; ``level``: the intervals' level as written under
    the axis (``95%``: :attr:`~erag_dagster.stats.settings.Statistics.percent`). An empty
    ``rows`` gives ``""``."""
    if not rows:
        return ""
    x0, x1 = LABEL_W, WIDTH - VALUE_W
    top = _scale_max([float(r["high"]) for r in rows])  # type: ignore[arg-type]

    def x(value: float) -> float:
        return x0 + (x1 - x0) * max(0.0, min(value, top)) / top

    height = TOP + ROW * len(rows) + AXIS_H
    base = TOP + ROW * len(rows)
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {height}" width="100%" '
        f'preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{html.escape(title, quote=True)}</title>",
    ]
    for i in range(6):  # gridlines and tick labels at each fifth of the axis
        gx = x(top * i / 5)
        parts.append(f'<line x1="{gx:.1f}" y1="{TOP}" x2="{gx:.1f}" y2="{base}" class="grid"/>')
        parts.append(
            f'<text x="{gx:.1f}" y="{base + 16}" text-anchor="middle" class="tick">'
            f"{top * i / 5:.2g}</text>"
        )
    for i, row in enumerate(rows):
        y = TOP + ROW * i + ROW / 2
        mean, low, high = (float(row[k]) for k in ("mean", "low", "high"))  # type: ignore[arg-type]
        name = names.get(str(row["retriever"]), str(row["retriever"]))
        parts += [
            f'<text x="{x0 - 8}" y="{y + 4:.1f}" text-anchor="end" class="label">'
            f"{html.escape(name, quote=True)}</text>",
            f'<line x1="{x(low):.1f}" y1="{y:.1f}" x2="{x(high):.1f}" y2="{y:.1f}" class="ci"/>',
            f'<line x1="{x(low):.1f}" y1="{y - 6:.1f}" x2="{x(low):.1f}" y2="{y + 6:.1f}" '
            'class="ci"/>',
            f'<line x1="{x(high):.1f}" y1="{y - 6:.1f}" x2="{x(high):.1f}" y2="{y + 6:.1f}" '
            'class="ci"/>',
            f'<circle cx="{x(mean):.1f}" cy="{y:.1f}" r="5" class="mean"/>',
            f'<text x="{x1 + 10}" y="{y + 4:.1f}" class="value">'
            f"{mean:.2f} [{low:.2f}, {high:.2f}]</text>",
        ]
    parts.append(
        f'<text x="{(x0 + x1) / 2:.1f}" y="{height - 4}" text-anchor="middle" class="tick">'
        f"eRAG {html.escape(metric, quote=True)} (mean over questions, "
        f"{html.escape(level, quote=True)} CI)</text>"
    )
    parts.append("</svg>")
    return "".join(parts)
