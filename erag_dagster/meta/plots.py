"""Figures of the meta-evaluation: correlation with end-to-end quality versus ``k`` (Figure 1).

Rendering uses matplotlib's Agg (file-only) backend through an explicit
:class:`~matplotlib.figure.Figure` and ``FigureCanvasAgg``, so it never opens a window, never
touches pyplot's global figure registry (safe in Dagster's threaded executors) and never
switches the process-wide backend of other code. Files are written atomically.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.core.paths import atomic_path

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_LABELS = {"kendall_tau": "Kendall's tau-b", "spearman_rho": "Spearman's rho"}


#: At most this many panels side by side: a system with more metrics wraps onto more rows.
MAX_COLUMNS = 3

#: A registry partition key's content-hash suffix (``bm25-286b153c``): the panel titles name the
#: retriever and reader without it (the rule of
#: :func:`erag_dagster.reports.verdict.short_name`, which meta/ cannot import).
_PARTITION_HASH = re.compile(r"-[0-9a-f]{8}\b")


def _short(name: str) -> str:
    return _PARTITION_HASH.sub("", name)


def correlation_vs_k_figure(frame: pl.DataFrame, title: str | None = None) -> Figure:
    """Figure 1 as a matplotlib :class:`~matplotlib.figure.Figure` (Agg canvas attached; see
    :func:`plot_correlation_vs_k` for what it shows and the errors it raises).

    Metrics: a metric whose cut-off equals the row's ``k`` (``P@1`` at k = 1, ``P@3`` at
    k = 3: the frame :func:`~erag_dagster.meta.correlation.correlation_vs_k` builds) is one
    panel ``P@k``, its curve over k; ``RR``, ``AP`` and fixed cut-offs are panels of their own.
    Layout: each ``(dataset, retriever)`` system gets ``ceil(metrics / MAX_COLUMNS)`` rows of
    at most :data:`MAX_COLUMNS` panels (unused panels hidden); panel titles are short
    (``bm25 / smollm2 · P@3``: partition hashes dropped, the dataset named only when the
    frame holds several); one legend below the panels; matplotlib's constrained layout keeps
    titles, labels and legend from overlapping.
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

    # A metric whose cut-off is the row's k (P@1 at k = 1, P@3 at k = 3) is one curve over k:
    # "P@k" (RR, AP and fixed cut-offs stay as they are).
    data = frame.sort("k").with_columns(
        metric=pl.struct("metric", "k").map_elements(
            lambda row: re.sub(rf"@{row['k']}$", "@k", str(row["metric"])),
            return_dtype=pl.String,
        )
    )
    panels = data.select("dataset", "retriever").unique(maintain_order=True).rows()
    metrics = data["metric"].unique(maintain_order=True).to_list()
    methods = data["method"].unique(maintain_order=True).to_list()
    all_k = data["k"].unique().sort().to_list()
    several_datasets = data["dataset"].n_unique() > 1
    columns = min(MAX_COLUMNS, len(metrics))
    rows_each = math.ceil(len(metrics) / columns)

    fig = Figure(figsize=(4.0 * columns, 3.0 * rows_each * len(panels) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows_each * len(panels), columns, squeeze=False)
    colors = [f"C{i % 10}" for i in range(len(methods))]
    handles: dict[str, object] = {}
    for p, (dataset, retriever) in enumerate(panels):
        system = _short(str(retriever))
        if several_datasets:
            system = f"{dataset} · {system}"
        for c, metric in enumerate(metrics):
            ax = axes[p * rows_each + c // columns][c % columns]
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
                (drawn,) = ax.plot(ks, ys, marker="o", color=color, label=method)
                if np.isfinite(ys).any() or method not in handles:
                    handles[method] = drawn
                ax.fill_between(
                    ks, line["low"].to_numpy(), line["high"].to_numpy(), color=color, alpha=0.2
                )
            ax.set_xticks(all_k)
            ax.set_title(f"{system} · {metric}", fontsize=9)
            ax.set_xlabel("k (retrieved documents)", fontsize=8)
            ax.set_ylabel(_LABELS[statistic], fontsize=8)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
        for c in range(len(metrics), rows_each * columns):  # the wrapped rows' spare panels
            axes[p * rows_each + c // columns][c % columns].set_visible(False)
    finite = data.group_by("method").agg(pl.col(statistic).is_finite().any())
    defined = {m for m, ok in finite.iter_rows() if ok}
    labels = [m if m in defined else f"{m} (undefined)" for m in handles]
    fig.legend(
        list(handles.values()), labels, loc="outside lower center",
        ncols=min(len(handles), 4), fontsize=8,
    )  # fmt: skip
    if title:
        fig.suptitle(title)
    return fig


def plot_correlation_vs_k(
    frame: pl.DataFrame, path: Path | str, title: str | None = None, dpi: int = 120
) -> Path:
    """Plot a :func:`~erag_dagster.meta.correlation.correlation_vs_k` frame to ``path``.

    One panel per ``(dataset, retriever)`` x ``metric`` (laid out by
    :func:`correlation_vs_k_figure`); in each, one line per ``method`` with x = ``k`` and
    y = the statistic (``kendall_tau`` or ``spearman_rho`` column), and a shaded band between
    ``low`` and ``high`` (the bootstrap CI). NaN points are left as gaps; a method undefined at
    every k in every panel is listed in the legend as ``(undefined)``. Raises
    :class:`InputError` for a missing column or an empty frame. The format follows ``path``'s
    suffix (``.png`` if none: png, pdf, svg...). Returns ``path``.
    """
    fig = correlation_vs_k_figure(frame, title)
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi)
    return path
