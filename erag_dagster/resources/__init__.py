"""Dagster resources: evaluation settings, the reader (GPU/CPU), the label store.

Each resource is a thin configurable wrapper over a plain-Python object from the evaluation
modules; per-deployment choices (device, storage paths) live here, not in the assets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr

from erag_dagster.errors import InputError
from erag_dagster.metrics.downstream import DEFAULT_METRIC
from erag_dagster.registry import Registry, load_registry


@dataclass(frozen=True)
class Evaluation:
    """The resolved settings of one evaluation: each name is the registry ``evaluation`` key,
    the :class:`EvalSettings` field and the ``erag-dagster run`` flag of the same setting."""

    dataset: str
    k: int  # retrieval depth per query
    label_k: int  # eRAG labels for the top label_k documents (<= k)
    metric: str  # downstream metric of the reader's answers
    list_metrics: list[str]
    human_metrics: list[str]
    relevance_level: int  # binary human metrics count a judgment >= this (trec_eval -l)
    e2e_ks: list[int]  # end-to-end depths (sorted, unique, each <= k)
    bootstrap_resamples: int
    efficiency_ks: list[int]
    efficiency_queries: int
    efficiency_rounds: int  # alternating timing rounds per Table 2 cell (median, range)
    label_methods: list[str]  # extra Table-1 labellings: likelihood, signed (meta/label_methods)


class EvalSettings(dg.ConfigurableResource):
    """What to evaluate: dataset spec, registry file, cut-offs, downstream and list metrics.

    Empty values fall back to the registry's ``evaluation`` section; :meth:`resolve` gives the
    values in force. The registry is parsed once per Definitions (:meth:`bound_to`) and handed
    on to every copy Dagster makes of this resource for a run; run config that points
    ``registry_path`` at another file than the one the partitions came from is refused.
    """

    dataset: str = Field(default="", description="dataset spec, e.g. sample, beir:DIR, squad:PATH")
    registry_path: str = Field(default="", description="registry YAML; default: packaged")
    k: int = Field(default=0, description="retrieval depth per query (0 = registry default)")
    label_k: int = Field(default=0, description="label the top label_k documents (0 = default)")
    metric: str = Field(default="", description="downstream metric: em|f1|rougel|accuracy|contains")
    list_metrics: list[str] = Field(default_factory=list)
    human_metrics: list[str] = Field(default_factory=list)
    relevance_level: int = Field(
        default=0, description="binary human metrics: relevant when judged >= this (0 = default)"
    )
    e2e_ks: list[int] = Field(default_factory=list, description="end-to-end depths (Figure 1)")
    bootstrap_resamples: int = Field(default=1000, description="bootstrap resamples for CIs")
    efficiency_ks: list[int] = Field(default_factory=list, description="Table 2 depths")
    efficiency_queries: int = Field(default=0, description="queries timed for Table 2")
    efficiency_rounds: int = Field(default=0, description="timing rounds per Table 2 cell")
    label_methods: list[str] = Field(
        default_factory=list, description="extra Table-1 labellings: likelihood, signed"
    )

    _registry: Registry | None = PrivateAttr(default=None)

    def bound_to(self, registry: Registry) -> EvalSettings:
        """A copy holding an already parsed ``registry`` (the one the Definitions' partitions
        came from); refuses a ``registry_path`` naming another file."""
        copy = self.model_copy()
        copy._registry = registry
        copy._check_registry_path()
        return copy

    def _with_updated_values(self, values):  # Dagster's per-run copy: keep the parsed registry
        copy = super()._with_updated_values(values)
        copy._registry = self._registry
        return copy

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._check_registry_path()

    def check_dataset_override(self) -> None:
        """Refuse a dataset given in settings (or ``$ERAG_DATASET``) for a registry with a
        ``datasets`` section: each of its datasets has its own spec and assets."""
        given = self.dataset or os.environ.get("ERAG_DATASET")
        registry = self.registry()
        if given and registry.datasets:
            raise InputError(
                f"dataset {given!r} given, but {registry.path} has a datasets section "
                f"({', '.join(registry.datasets)}): edit it there, or unset ERAG_DATASET"
            )

    def _check_registry_path(self) -> None:
        bound = self._registry
        if bound is None or not self.registry_path:
            return
        if Path(self.registry_path).resolve() != Path(bound.path).resolve():
            raise InputError(
                f"settings.registry_path {self.registry_path} is not the registry these "
                f"definitions were built from ({bound.path}); set ERAG_REGISTRY to it instead"
            )

    def registry(self, dataset: str | None = None) -> Registry:
        """The registry (parsed at most once per settings object); with ``dataset``, the view
        of that registry dataset (:meth:`Registry.for_dataset`)."""
        if self._registry is None:
            self._registry = load_registry(self.registry_path or None)
        self._check_registry_path()
        return self._registry.for_dataset(dataset)

    def resolve(self, dataset: str | None = None) -> Evaluation:
        """The settings in force: explicit values, else the registry's ``evaluation`` section
        (with ``dataset``: that registry dataset's overrides first), else the built-in defaults;
        ``label_k`` and ``e2e_ks`` are capped at ``k``.

        A registry dataset's spec is its own: ``dataset``/``$ERAG_DATASET`` replace the spec of
        a registry without a ``datasets`` section only (:meth:`check_dataset_override`)."""
        defaults = self.registry(dataset).evaluation
        k = self.k or int(defaults.get("k", 50))
        label_k = min(self.label_k or int(defaults.get("label_k", 10)), k)
        e2e_ks = self.e2e_ks or defaults.get("e2e_ks", [label_k])
        return Evaluation(
            dataset=str(defaults["dataset"])
            if dataset is not None
            else self.dataset
            or os.environ.get("ERAG_DATASET")
            or str(defaults.get("dataset", "sample")),
            k=k,
            label_k=label_k,
            metric=self.metric or str(defaults.get("metric", DEFAULT_METRIC)),
            list_metrics=list(self.list_metrics or defaults.get("list_metrics", ["P@5", "nDCG@5"])),
            human_metrics=list(
                self.human_metrics or defaults.get("human_metrics", ["nDCG@10", "R@10"])
            ),
            relevance_level=self.relevance_level or int(defaults.get("relevance_level", 1)),
            e2e_ks=sorted({min(int(x), k) for x in e2e_ks}),
            bootstrap_resamples=self.bootstrap_resamples,
            efficiency_ks=[
                int(x) for x in (self.efficiency_ks or defaults.get("efficiency_ks", [10, 50]))
            ],
            efficiency_queries=self.efficiency_queries
            or int(defaults.get("efficiency_queries", 10)),
            efficiency_rounds=self.efficiency_rounds or int(defaults.get("efficiency_rounds", 3)),
            label_methods=list(self.label_methods or defaults.get("label_methods", [])),
        )


class ReaderResource(dg.ConfigurableResource):
    """The reader model as a resource. ``device`` overrides the registry (auto|cpu|cuda:N).

    The resource owns the readers it hands out: one per registry entry for the run, closed at
    teardown; readers created elsewhere in the process (other resources, tests, the CLI) keep
    their models.
    """

    device: str = Field(default="", description="override the registry's device")
    num_threads: int = Field(default=0, description="torch CPU threads (0 = reader default)")
    executor: str = Field(
        default="", description="inprocess | ray (empty = the registry's generation.executor)"
    )
    ray_address: str = Field(default="", description="local | auto | ray://HOST:PORT")
    ray_actors: int | None = Field(default=None, description="reader replicas on Ray")
    ray_num_cpus: float | None = Field(default=None, description="CPUs per Ray actor")
    ray_num_gpus: float | None = Field(default=None, description="GPUs per Ray actor")

    _readers: dict[str, Any] = PrivateAttr(default_factory=dict)

    def get(self, registry: Registry, reader: str):  # -> TransformersReader
        """The reader for a registry entry (name or partition key), loaded lazily, cached."""
        from erag_dagster.readers.factory import reader_from_config

        entry = registry.reader(reader)
        if entry.partition_key not in self._readers:
            overrides: dict[str, Any] = {}
            if self.device:
                overrides["device"] = self.device
            if self.num_threads:
                overrides["num_threads"] = self.num_threads
            self._readers[entry.partition_key] = reader_from_config(
                entry.name, {**entry.config, **overrides}
            )
        return self._readers[entry.partition_key]

    def executor_spec(self, registry: Registry):  # -> ExecutorSpec
        """Where readers generate: the registry's ``generation`` section with this resource's
        non-empty fields applied (``erag_dagster.labels.executor``)."""
        return registry.generation.replace(
            "resource reader",
            executor=self.executor,
            address=self.ray_address,
            actors=self.ray_actors,
            num_cpus=self.ray_num_cpus,
            num_gpus=self.ray_num_gpus,
        )

    def close(self) -> None:
        """Free the models of the readers this resource created (and only those)."""
        readers, self._readers = list(self._readers.values()), {}
        for model in readers:
            model.close()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.close()


class LabelStoreResource(dg.ConfigurableResource):
    """The content-addressed label store: an SQLite file or a PostgreSQL database.

    ``path`` is a path or URL (``sqlite:///FILE``, ``postgresql://user@host/db``; forms and the
    password rule: :mod:`erag_dagster.labels.store_url`); empty means ``$ERAG_LABEL_STORE``,
    else ``<storage root>/labels.sqlite``. Give a server's URL as ``dg.EnvVar`` (the production
    deployment does) so the UI shows the variable's name, not its value.
    """

    path: str = Field(
        default="",
        description="label store: SQLite file, sqlite:///FILE or postgresql://USER@HOST/DB "
        "(password from PGPASSWORD); default $ERAG_LABEL_STORE or <storage>/labels.sqlite",
    )

    def open(self):  # -> LabelStoreBase
        from erag_dagster.labels.store import open_store

        return open_store(self.path or None)
