"""Paper Table 1 across datasets: one column group per dataset, each dataset's own
:func:`~erag_dagster.meta.correlation.correlation_table` as it is (no number recomputed), and
its rendering. The leaderboards across datasets: :mod:`.cross_leaderboard`.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.meta.correlation import CI_COLUMNS, GROUP_COLUMNS
from erag_dagster.reports.tables import ci_text, render_cells
from erag_dagster.stats.settings import Statistics

__all__ = ["format_table1_across", "table1_across"]


def table1_across(
    per_dataset: Mapping[str, pl.DataFrame], statistic: str = "kendall_tau"
) -> pl.DataFrame:
    """Paper Table 1 across datasets: rows ``retriever, method, metric`` (a system is
    ``"<retriever> / <reader>"`` as in the single-dataset table), one column group per dataset
    (input order): ``"<dataset> <statistic>"``, ``"<dataset> low"``, ``"<dataset> high"`` (the
    percentile bootstrap CI over that dataset's queries) and ``"<dataset> n_queries"``.

    ``per_dataset`` maps a dataset name to its
    :func:`~erag_dagster.meta.correlation.correlation_table` (the ``correlation_report`` asset);
    the name, not the table's ``dataset`` column, labels the group. Rows appear in order of first
    appearance over the datasets; a system/method/metric a dataset lacks is null there.

    Uncertainty: the correlation tables carry no p-values (Table 1 compares methods by their
    correlation, not by a test), so there is nothing to Holm-correct: the per-dataset bootstrap
    CIs are the uncertainty, and they are not adjusted for the number of cells.
    """
    if statistic not in CI_COLUMNS:
        raise InputError(
            f"unknown statistic {statistic!r}; expected one of {', '.join(CI_COLUMNS)}"
        )
    low, high = CI_COLUMNS[statistic]
    index = ["retriever", "method", "metric"]
    wide: pl.DataFrame | None = None
    for name, table in per_dataset.items():
        missing = [c for c in (*GROUP_COLUMNS, statistic, low, high, "n_queries") if
                   c not in table.columns]  # fmt: skip
        if missing:
            raise InputError(
                f"correlation table of {name!r}: missing column(s) {', '.join(missing)}"
            )
        dup = table.filter(pl.struct(index).is_duplicated())
        if dup.height:
            row = dup.row(0, named=True)
            where = ", ".join(f"{c}={row[c]!r}" for c in index)
            raise InputError(f"correlation table of {name!r}: more than one row for {where}")
        part = table.select(
            *index,
            pl.col(statistic).cast(pl.Float64).alias(f"{name} {statistic}"),
            pl.col(low).cast(pl.Float64).alias(f"{name} low"),
            pl.col(high).cast(pl.Float64).alias(f"{name} high"),
            pl.col("n_queries").cast(pl.Int64).alias(f"{name} n_queries"),
        )
        wide = part if wide is None else wide.join(part, on=index, how="full", coalesce=True,
                                                   maintain_order="left_right")  # fmt: skip
    if wide is None:
        raise InputError("Table 1 across datasets needs at least one correlation table")
    return wide


def format_table1_across(
    wide: pl.DataFrame, stats: Statistics, statistic: str = "kendall_tau", markdown: bool = True,
    digits: int = 3, ci_digits: int = 2,
) -> str:  # fmt: skip
    """Render :func:`table1_across`: rows ``retriever, method, metric``, one column per dataset
    whose cell reads ``0.412 [0.30, 0.52]`` (``nan`` undefined, ``–`` missing), and a note
    saying what the brackets are (``stats.confidence``'s interval) and that no test (hence no
    Holm correction) is involved."""
    index = ["retriever", "method", "metric"]
    suffix = f" {statistic}"
    datasets = [c[: -len(suffix)] for c in wide.columns if c.endswith(suffix)]
    rows = []
    for row in wide.iter_rows(named=True):
        cells = [str(row[c]) for c in index]
        for d in datasets:
            cells.append(ci_text(row[f"{d}{suffix}"], row[f"{d} low"], row[f"{d} high"],
                                  digits, ci_digits))  # fmt: skip
        rows.append(cells)
    notes = [
        f"Cells: {statistic} over queries with end-to-end quality [{stats.percent} percentile "
        "bootstrap CI "
        "over that dataset's queries]; – not measured on that dataset; nan undefined.",
        "No significance test here, hence no multiple-comparison correction: the CIs are the "
        "uncertainty (not adjusted for the number of cells).",
    ]
    table = render_cells([*index, *datasets], rows, [False] * 3 + [True] * len(datasets), markdown)
    return table + "\n\n" + ("\n\n" if markdown else "\n").join(notes)
