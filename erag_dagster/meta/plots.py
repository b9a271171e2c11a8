"""Figures of the meta-evaluation: correlation with end-to-end quality versus ``k`` (Figure 1).

Rendering uses matplotlib's Agg (file-only) backend through an explicit
:class:`~matplotlib.figure.Figure` and ``FigureCanvasAgg``, so it never opens a window, never
touches pyplot's global figure registry (safe in Dagster's threaded executors) and never
switches the process-wide backend of other code. Files are written atomically.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from erag_dagster.errors import InputError
from erag_dagster.paths import atomic_path

_LABELS = {"kendall_tau": "Kendall's tau-b", "spearman_rho": "Spearman's rho"}


def plot_correlation_vs_k(
    frame: pl.DataFrame, path: Path | str, title: str | None = None, dpi: int = 120
) -> Path:
    """Plot a :func:`~erag_dagster.meta.correlation.correlation_vs_k` frame to ``path``.

    One panel per ``(dataset, retriever)`` (rows) x ``metric`` (columns); in each, one line per
    ``method`` with x = ``k`` and y = the statistic (``kendall_tau`` or ``spearman_rho``
    column), and a shaded band between ``low`` and ``high`` (the bootstrap CI). NaN points are
    left as gaps; a method undefined at every k is listed in the legend as ``(undefined)``.
    The format follows ``path``'s suffix (``.png`` if none: png, pdf, svg...).
    Returns ``path``.
    """
    statistic = next((c for c in _LABELS if c in frame.columns), None)
    needed = ["k", "dataset", "retriever", "method", "metric", "low", "high"]
    missing = [c for c in needed if c not in frame.columns]
    if statistic is None:
        missing.append("kendall_tau or spearman_rho")
    if missing:
        raise InputError(f"correlation-vs-k frame: missing column(s) {', '.join(missing)}")
    if frame.height == 0:
        raise InputError("correlation-vs-k frame is empty: nothing to plot")

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data = frame.sort("k")
    panels = data.select("dataset", "retriever").unique(maintain_order=True).rows()
    metrics = data["metric"].unique(maintain_order=True).to_list()
    methods = data["method"].unique(maintain_order=True).to_list()
    all_k = data["k"].unique().sort().to_list()

    fig = Figure(figsize=(4.0 * len(metrics), 3.2 * len(panels)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), len(metrics), squeeze=False, sharex=True)
    colors = [f"C{i % 10}" for i in range(len(methods))]
    for r, (dataset, retriever) in enumerate(panels):
        for c, metric in enumerate(metrics):
            ax = axes[r][c]
            cell = data.filter(
                (pl.col("dataset") == dataset)
                & (pl.col("retriever") == retriever)
                & (pl.col("metric") == metric)
            )
            for method, color in zip(methods, colors, strict=True):
                line = cell.filter(pl.col("method") == method)
                if line.height == 0:
                    continue
                ks = line["k"].to_numpy()
                ys = line[statistic].to_numpy()
                label = method if np.isfinite(ys).any() else f"{method} (undefined)"
                ax.plot(ks, ys, marker="o", color=color, label=label)
                ax.fill_between(
                    ks, line["low"].to_numpy(), line["high"].to_numpy(), color=color, alpha=0.2
                )
            ax.set_xticks(all_k)
            ax.set_title(f"{dataset} / {retriever} — {metric}", fontsize=9)
            ax.set_xlabel("k (retrieved documents)")
            ax.set_ylabel(_LABELS[statistic])
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)

    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi)
    return path
