"""What a report table is, declared once: :class:`Report`.

A report is a table the run computes from other assets and shows in three places: as a Dagster
asset (with its checks and metadata), in the terminal (``erag-dagster run``, compact or
``--full``) and on the HTML page. One :class:`Report` value holds all of it: the asset key, its
inputs, the computation, the terminal text and the page block; the Dagster assets
(:mod:`erag_dagster.orchestration.assets.reports`),
:class:`~erag_dagster.reports.run_report.RunReport` and the page (:mod:`erag_dagster.reports.html`)
are generated from the list in :mod:`erag_dagster.reports.catalog`. Adding a report table is a
module declaring one :class:`Report` plus its line in that list (docs/ARCHITECTURE.md).

This module is Dagster-free (the import-layer contracts): a computation returns plain values
and the metadata wrappers below (:class:`Markdown`, :class:`FilePath`), which the asset factory
turns into Dagster metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.meta.per_query import System
from erag_dagster.reports.tables import to_markdown
from erag_dagster.stats.settings import Statistics

#: How an input is partitioned: ``None`` (one value), ``"retriever"`` (one frame per retriever
#: partition key) or ``"reader_retriever"`` (one frame per ``(reader, retriever)``).
Partitioning = Literal["retriever", "reader_retriever"] | None


@dataclass(frozen=True)
class ReportInput:
    """One upstream asset a report reads: its name within the dataset (``qrels``,
    ``retrieval_run``, ...) and how it is partitioned (:data:`Partitioning`)."""

    name: str
    partitioned: Partitioning = None


@dataclass(frozen=True)
class Markdown:
    """Metadata shown as Markdown in the Dagster UI (a table, an inline image)."""

    text: str


def markdown_table(frame: pl.DataFrame, max_rows: int = 50) -> Markdown:
    """The first ``max_rows`` rows of ``frame`` as a Markdown table."""
    return Markdown(to_markdown(frame.head(max_rows)))


@dataclass(frozen=True)
class FilePath:
    """Metadata naming a file on this machine (the UI shows it as a path)."""

    path: Path


@dataclass(frozen=True)
class DatasetInputs:
    """What a dataset report's computation receives.

    ``values``: each declared input by name; a partitioned one as a mapping from its partition
    key (a retriever key) or its :data:`~erag_dagster.meta.per_query.System` (``(reader,
    retriever)``) to its frame. ``config``: the dataset's settings in force. ``dataset``: the
    registry dataset's name (``None`` without a ``datasets`` section). ``retrievers`` /
    ``readers``: the registry's partition keys in registry order (the first retriever is every
    comparison's baseline); ``reader_configs``: each registry reader's name and config mapping.
    ``folder``: where the report may write side files (Figure 1's png), created by the caller.
    """

    values: Mapping[str, Any]
    config: EvaluationConfig
    dataset: str | None
    retrievers: Sequence[str]
    readers: Sequence[str] = ()
    reader_configs: Sequence[tuple[str, Mapping[str, Any]]] = ()
    folder: Path | None = None

    def frames(self, name: str) -> dict[Any, pl.DataFrame]:
        """A partitioned input (a mapping; empty when the input was not given)."""
        return dict(self.values.get(name) or {})

    def systems(self, name: str) -> dict[System, pl.DataFrame]:
        """A reader x retriever input keyed by ``(reader, retriever)``."""
        return self.frames(name)


@dataclass(frozen=True)
class AcrossInputs:
    """What a report across datasets receives: ``values[dataset][input]`` for each dataset that
    has the report's inputs (partitioned inputs as in :class:`DatasetInputs`), each dataset's
    ``configs``, the settings without a dataset (``config``) and the registry's retriever keys in
    order (``retrievers``: the first one some dataset ran is the baseline)."""

    values: Mapping[str, Mapping[str, Any]]
    configs: Mapping[str, EvaluationConfig]
    config: EvaluationConfig
    retrievers: Sequence[str]


@dataclass(frozen=True)
class Computed:
    """A report's computed value: its ``frame``, the ``metadata`` shown with the
    materialisation (plain values, :class:`Markdown`, :class:`FilePath`), why an empty frame is
    fine (``why_empty``: the ``not_empty`` check passes saying so) and ``warnings`` to log."""

    frame: pl.DataFrame
    metadata: Mapping[str, Any] = field(default_factory=dict)
    why_empty: str | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class PageBlock:
    """The page's view of one report: its heading, the HTML under it for a non-empty frame
    (``render(frame, side_files, stats)``; ``side_files``: the files of
    :attr:`Report.side_files` that exist, by name, as bytes; ``stats``: the evaluation's
    :class:`~erag_dagster.stats.settings.Statistics`, whose ``alpha`` the stars mark and whose
    ``confidence`` the legends name) and the line shown when the report is missing or empty."""

    heading: str
    render: Callable[[pl.DataFrame, Mapping[str, bytes], Statistics], str]
    absent: str


#: The terminal text of a report frame: ``text(frame, full, stats)`` (``stats``: the
#: evaluation's :class:`~erag_dagster.stats.settings.Statistics`: the stars' alpha, the
#: intervals' level); ``None`` leaves the section out.
TextView = Callable[[pl.DataFrame, bool, Statistics], str | None]


@dataclass(frozen=True)
class Report:
    """One report table, declared once (module docstring).

    - ``key``: the asset's name (per dataset, or unprefixed across datasets);
    - ``title``: the heading in the terminal (and the page's, across datasets);
    - ``inputs``: the upstream assets it reads (within its dataset; across datasets, the same
      assets of every dataset that has them);
    - ``compute``: ``DatasetInputs -> Computed`` (``scope="dataset"``) or
      ``AcrossInputs -> Computed`` (``scope="across"``): a function of this layer or below
      (never a ``"module:function"`` string: an import the layer contracts could not see);
    - ``text``: its terminal text (:data:`TextView`; ``None``: never printed);
    - ``page``: its block on the HTML page (``None``: not on the page);
    - ``scope``: ``"dataset"`` or ``"across"`` (built only with two datasets that have its
      inputs); ``needs_reader``: only for datasets with reader labels;
    - ``printed``: one of the reports ``erag-dagster run`` prints by default;
    - ``checks``: ``not_empty`` (blocking) and, with ``figures`` / ``regression``, the README
      figures and no-regression checks (:mod:`erag_dagster.orchestration.assets.checks`);
    - ``group``: its Dagster asset group; ``automatic``: recomputed when stale (the
      automation condition of the reports); ``runs_reader``: it runs a reader itself (the GPU
      pool and the reader models' lineage, like the label assets);
    - ``side_files``: files it writes to its folder that the page shows (Figure 1's png).
    """

    key: str
    title: str
    inputs: tuple[ReportInput, ...]
    compute: Callable[[Any], Computed]
    text: TextView | None = None
    page: PageBlock | None = None
    scope: Literal["dataset", "across"] = "dataset"
    needs_reader: bool = True
    printed: bool = True
    checks: bool = True
    figures: bool = False
    regression: bool = False
    group: str = "reports"
    automatic: bool = True
    runs_reader: bool = False
    side_files: tuple[str, ...] = ()
    description: str = ""

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs)

    def computation(self) -> Callable[[Any], Computed]:
        """:attr:`compute` (kept as a method: the assets and tests call it)."""
        return self.compute
