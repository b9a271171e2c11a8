"""The report of one evaluation: the frames, the verdict first, and their text.

:class:`RunReport` is what ``erag-dagster run`` prints and what
:func:`erag_dagster.evaluate` returns: the report frames (polars) by key, one
:class:`~erag_dagster.reports.verdict.Verdict` per dataset with reader labels, and
:meth:`RunReport.text` rendering them:

- **compact** (the default): the verdict, then each table cut to what a person reads first,
  on the *headline* metrics (the first human metric of the retrieval leaderboard, the first
  eRAG list metric elsewhere, :func:`headline_metric`): the retrieval leaderboard one row per
  retriever (mean [CI], difference and permutation p against the baseline); the eRAG report
  left out (the verdict is its headline column, with CIs and tests); Table 1 one row per reader
  and labelling method, one column per retriever (Kendall tau-b [CI]); label agreement one row
  per method, one column per reader / retriever (Cohen's kappa); the cross-dataset tables as
  they are;
- **full** (``--full``): every cell of every table, as the assets hold them.

Either way the fit diagnostics (:attr:`RunReport.fits`, :mod:`erag_dagster.meta.fit`) come
right after the verdict: compact, one line (or one per reader with warnings); full, a line per
reader x retriever and every warning with its fix.

:meth:`RunReport.write_tables` writes every frame in full as CSV and parquet (the run's
storage folder, ``<storage root>/reports/tables``, is the CLI's choice).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from erag_dagster.meta.fit import FitDiagnostics, fit_frame, format_fit
from erag_dagster.paths import atomic_path
from erag_dagster.reports.leaderboard import (
    STAT_SUFFIXES,
    format_leaderboard,
    leaderboard_metrics,
)
from erag_dagster.reports.tables import format_table, format_table1
from erag_dagster.reports.verdict import Verdict, short_name

#: Titles of the per-dataset reports, in print order.
TITLES: dict[str, str] = {
    "retrieval_report": "Retrieval quality against human/provenance judgments (pytrec_eval)",
    "erag_report": "eRAG: list metrics on per-document reader labels, per retriever",
    "correlation_report": "Meta-evaluation: Kendall tau-b with end-to-end quality "
    "(bootstrap 95% CI; * = best per column)",
    "label_agreement": "Agreement of automatic labels with the human judgments (Cohen's kappa)",
    "efficiency_report": "Efficiency: end-to-end vs eRAG (query- / document-level batching)",
}
#: Titles of the reports across datasets (a registry with two datasets or more).
ACROSS_TITLES: dict[str, str] = {
    "beir_leaderboard": "Across datasets: retriever x dataset on the human judgments",
    "erag_leaderboard": "Across datasets: eRAG list metrics, reader x retriever x dataset",
    "table1_across": "Across datasets: Table 1 (Kendall tau-b), one column group per dataset",
}
#: Title of the fit diagnostics (:mod:`erag_dagster.meta.fit`), printed after the verdict.
FIT_TITLE = "Do the labels fit the data? Answers cut, answer vs gold length, label vs judgment"
_KEYS = ("reader", "retriever", "query_id", "queries")
_HASH = re.compile(r"-[0-9a-f]{8}\b")


def headline_metric(frame: pl.DataFrame) -> str:
    """The headline eRAG metric of a report frame: the first metric in the registry's
    ``list_metrics`` order (the first metric column of an ``erag_per_query``/``erag_report``
    frame, or the first ``metric`` of a Table-1 frame)."""
    if "metric" in frame.columns:
        return str(frame["metric"][0])
    return next(c for c in frame.columns if c not in _KEYS)


@dataclass(frozen=True)
class Section:
    """One report of a run: ``key`` (``erag_report``, ...), its registry ``dataset`` (``None``
    for a registry without a ``datasets`` section or a report across datasets) and its frame
    (``None`` when it was not available: ``missing`` says why)."""

    key: str
    dataset: str | None
    frame: pl.DataFrame | None
    missing: str = ""

    @property
    def name(self) -> str:
        """``<dataset>/<key>`` or ``<key>``: the asset key's user string."""
        return f"{self.dataset}/{self.key}" if self.dataset else self.key

    @property
    def title(self) -> str:
        title = {**TITLES, **ACROSS_TITLES}.get(self.key, self.key)
        return title + (f" [dataset {self.dataset}]" if self.dataset else "")


@dataclass
class RunReport:
    """The reports of one evaluation (module docstring). ``frames`` holds every frame by
    :attr:`Section.name` (also those not printed, such as ``erag_per_query``);
    ``tables_dir``, once :meth:`write_tables` ran, where the full tables are; ``fits``, the
    fit diagnostics of each labelled reader x retriever (written as the ``fit`` table)."""

    sections: list[Section]
    verdicts: list[Verdict] = field(default_factory=list)
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    tables_dir: Path | None = None
    fits: list[FitDiagnostics] = field(default_factory=list)

    def __getitem__(self, name: str) -> pl.DataFrame:
        """The frame of a report by name (``erag_report``, or ``<dataset>/erag_report``)."""
        if name in self.frames:
            return self.frames[name]
        matches = [k for k in self.frames if k.rsplit("/", 1)[-1] == name]
        if len(matches) == 1:
            return self.frames[matches[0]]
        known = ", ".join(self.frames) or "none"
        raise KeyError(f"no single report {name!r} in this run (reports: {known})")

    @property
    def retrieval_report(self) -> pl.DataFrame:
        """Human-judgment leaderboard (one row per retriever; empty without judgments)."""
        return self["retrieval_report"]

    @property
    def erag_report(self) -> pl.DataFrame:
        """Per (reader, retriever): ``queries`` and the mean of each eRAG list metric."""
        return self["erag_report"]

    @property
    def erag_per_query(self) -> pl.DataFrame:
        """Per (reader, retriever, query): each eRAG list metric."""
        return self["erag_per_query"]

    @property
    def verdict(self) -> Verdict:
        """The verdict (a registry with several datasets: see :attr:`verdicts`)."""
        if len(self.verdicts) != 1:
            raise KeyError(f"{len(self.verdicts)} verdicts in this run; see .verdicts")
        return self.verdicts[0]

    def text(self, full: bool = False) -> str:
        """The verdict, then every section (compact unless ``full``), then where the full
        tables are (when written)."""
        blocks = [
            f"== Verdict{f' [dataset {v.dataset}]' if v.dataset else ''}: which retriever "
            f"helps the reader, and is the difference real? ==\n{v.text}"
            for v in self.verdicts
        ]
        if self.fits:  # right after the verdict: labels that do not fit the data undo it
            fit = format_fit(self.fits, full)
            if full or not blocks:
                blocks.append(f"== {FIT_TITLE} ==\n{fit}")
            else:  # compact: one line under the verdict (the first page stays one page)
                blocks[-1] += f"\n{fit}"
        for section in self.sections:
            if section.frame is None:
                blocks.append(f"{section.title}: not available ({section.missing})")
                continue
            body = render_section(section.key, section.frame, full)
            if body is not None:
                blocks.append(f"== {section.title} ==\n{body}")
        if self.tables_dir is not None:
            hint = "" if full else " (every cell: erag-dagster run --full)"
            blocks.append(f"Full tables as CSV and parquet: {self.tables_dir}{hint}")
        return "\n\n".join(blocks)

    def __str__(self) -> str:
        return self.text()

    def write_tables(self, folder: Path | str) -> Path:
        """Write every frame and the verdicts' ``ranking``/``pairs`` to ``folder`` as
        ``<name>.csv`` and ``<name>.parquet`` (``<dataset>/<key>`` names make a sub-folder;
        each file written atomically). Returns the folder, also kept in :attr:`tables_dir`."""
        folder = Path(folder)
        tables = dict(self.frames)
        if self.fits:
            tables.setdefault("fit", fit_frame(self.fits))
        for v in self.verdicts:
            prefix = f"{v.dataset}/" if v.dataset else ""
            tables[f"{prefix}verdict_ranking"] = v.ranking
            tables[f"{prefix}verdict_pairs"] = v.pairs
        for name, frame in tables.items():
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(target.with_suffix(".parquet")) as tmp:
                frame.write_parquet(tmp)
            with atomic_path(target.with_suffix(".csv")) as tmp:
                frame.write_csv(tmp)
        self.tables_dir = folder
        return folder


def render_section(key: str, frame: pl.DataFrame, full: bool = False) -> str | None:
    """The text of one report frame (compact unless ``full``; module docstring); ``None``
    where the report leaves the section out (``erag_per_query``; compact: ``erag_report``)."""
    if key == "erag_per_query":
        return None
    if key in ACROSS_TITLES and frame.height:
        from erag_dagster.reports.cross_leaderboard import format_cross_leaderboard
        from erag_dagster.reports.cross_table1 import format_table1_across

        text = format_table1_across if key == "table1_across" else format_cross_leaderboard
        return text(frame, markdown=False)
    if key == "correlation_report" and frame.height:
        if full:
            return format_table1(frame, statistic="kendall_tau")
        return _compact_table1(frame)
    if key == "retrieval_report" and frame.height:
        board = frame if full else _headline_board(frame)
        legend = "(mean [95% bootstrap CI]; vs the first retriever: difference, permutation p"
        legend += ")" if full else f"; {len(leaderboard_metrics(frame))} metrics: --full)"
        return format_table(format_leaderboard(board)) + "\n" + legend
    if key == "erag_report" and not full:
        return None  # the verdict is its headline column, with CIs and tests
    if key == "label_agreement" and frame.height and not full:
        return _compact_agreement(frame)
    return format_table(frame)


def _short(column: str) -> pl.Expr:
    return pl.col(column).map_elements(short_name, return_dtype=pl.String)


def _headline_board(board: pl.DataFrame) -> pl.DataFrame:
    metric = leaderboard_metrics(board)[0]
    stats = [f"{metric}{suffix}" for suffix in STAT_SUFFIXES]
    return board.select(_short("retriever"), "baseline", "queries", "dropped", metric, *stats)


def _compact_table1(frame: pl.DataFrame) -> str:
    """Table 1 on the headline metric: rows reader x method, one column per retriever."""
    metric = headline_metric(frame)
    system = pl.col("retriever").str.split(" / ")
    pivoted = frame.filter(pl.col("metric") == metric).with_columns(
        retriever=system.list.get(-1).str.replace(_HASH.pattern, ""),
        metric=system.list.get(0).str.replace(_HASH.pattern, ""),
        method=pl.col("method").str.replace_all(_HASH.pattern, ""),
    )
    text = format_table1(
        pivoted, statistic="kendall_tau", compact=True, headers=("dataset", "reader", "method")
    )
    return f"list metric {metric}, one column per retriever (every metric: --full)\n{text}"


def _compact_agreement(frame: pl.DataFrame) -> str:
    wide = frame.select(
        "method", pl.format("{}/{}", _short("reader"), _short("retriever")).alias("system"),
        "kappa",
    ).pivot(on="system", index="method", values="kappa", maintain_order=True)  # fmt: skip
    return format_table(wide, ".3f")


def sections_order(
    dataset_names: Sequence[str | None], readers: dict[str | None, bool], many: bool
) -> list[tuple[str | None, str]]:
    """``(dataset, key)`` of the printed reports: per dataset the :data:`TITLES` reports (the
    reader-label ones only where the dataset has reader labels), then with ``many`` datasets
    the :data:`ACROSS_TITLES` ones."""
    wanted = [
        (name, key)
        for name in dataset_names
        for key in TITLES
        if key == "retrieval_report" or readers.get(name, False)
    ]
    return wanted + ([(None, key) for key in ACROSS_TITLES] if many else [])
