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

Each table's text, compact or full, is its declaration's terminal view
(:mod:`erag_dagster.reports.catalog`); this module orders and frames them.

Either way the fit diagnostics (:attr:`RunReport.fits`, :mod:`erag_dagster.meta.fit`) come
right after the verdict: compact, one line (or one per reader with warnings); full, a line per
reader x retriever and every warning with its fix.

:meth:`RunReport.write_tables` writes every frame in full as CSV and parquet (the run's
storage folder, ``<storage root>/reports/tables``, is the CLI's choice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from erag_dagster.core.paths import atomic_path
from erag_dagster.meta.fit import FitDiagnostics, fit_frame, format_fit
from erag_dagster.reports.catalog import BY_KEY, REPORTS, dataset_reports_for, reports_across
from erag_dagster.reports.dataset_reports import headline_metric
from erag_dagster.reports.tables import format_table
from erag_dagster.reports.verdict import Verdict
from erag_dagster.stats.settings import Statistics

__all__ = ["ACROSS_TITLES", "FIT_TITLE", "TITLES", "RunReport", "Section", "headline_metric"]

#: Titles of the per-dataset reports, in print order (from the report declarations).
TITLES: dict[str, str] = {
    r.key: r.title for r in REPORTS if r.scope == "dataset" and r.text is not None
}
#: Titles of the reports across datasets (a registry with two datasets or more).
ACROSS_TITLES: dict[str, str] = {r.key: r.title for r in reports_across()}
#: Title of the fit diagnostics (:mod:`erag_dagster.meta.fit`), printed after the verdict.
FIT_TITLE = "Do the labels fit the data? Answers cut, answer vs gold length, label vs judgment"


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
    """The reports of one evaluation (module docstring). ``statistics``: the settings every
    CI and test of its frames was computed with (the views' stars mark ``alpha``, their
    legends name ``confidence``); ``frames`` holds every frame by :attr:`Section.name` (also
    those not printed, such as ``erag_per_query``); ``tables_dir``, once :meth:`write_tables`
    ran, where the full tables are; ``fits``, the fit diagnostics of each labelled reader x
    retriever (written as the ``fit`` table); ``notes``: lines the evaluation wants read (a
    query a system has no labelled document for, scored 0: docs/metrics.md)."""

    sections: list[Section]
    statistics: Statistics
    verdicts: list[Verdict] = field(default_factory=list)
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    tables_dir: Path | None = None
    fits: list[FitDiagnostics] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

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
        if self.notes:  # e.g. queries a system has no labelled document for (scored 0)
            blocks.append("\n".join(f"note: {line}" for line in self.notes))
        for section in self.sections:
            if section.frame is None:
                blocks.append(f"{section.title}: not available ({section.missing})")
                continue
            body = render_section(section.key, section.frame, self.statistics, full)
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


def render_section(
    key: str, frame: pl.DataFrame, stats: Statistics, full: bool = False
) -> str | None:
    """The text of one report frame (compact unless ``full``): its declaration's terminal view
    (:mod:`erag_dagster.reports.catalog`); ``None`` where the report leaves the section out
    (``erag_per_query``; compact: ``erag_report``); a frame of no declared report as a table."""
    report = BY_KEY.get(key)
    if report is None:
        return format_table(frame)
    return None if report.text is None else report.text(frame, full, stats)


def sections_order(
    dataset_names: Sequence[str | None], readers: dict[str | None, bool], many: bool
) -> list[tuple[str | None, str]]:
    """``(dataset, key)`` of the printed reports: per dataset the :data:`TITLES` reports (the
    reader-label ones only where the dataset has reader labels), then with ``many`` datasets
    the :data:`ACROSS_TITLES` ones."""
    wanted = [
        (name, r.key)
        for name in dataset_names
        for r in dataset_reports_for(readers.get(name, False))
        if r.key in TITLES
    ]
    return wanted + ([(None, key) for key in ACROSS_TITLES] if many else [])
