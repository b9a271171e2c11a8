"""Dagster resources: evaluation settings, the reader (GPU/CPU), the label store.

Each resource is a thin configurable wrapper over a plain-Python object from the evaluation
modules; per-deployment choices (device, storage paths) live here, not in the assets.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, get_type_hints

import dagster as dg
from pydantic import Field, PrivateAttr, create_model

from erag_dagster.config.evaluation import FIELDS, EvaluationConfig
from erag_dagster.config.registry import Registry, load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.orchestration.resources.bound_registry import RegistryBound

Evaluation = EvaluationConfig
"""The settings in force for one evaluation (:meth:`EvalSettings.resolve`): the one typed
configuration every front door uses (:mod:`erag_dagster.config.evaluation`)."""


def _run_config_fields() -> dict[str, Any]:
    """The run-config fields of :class:`EvalSettings`, derived from the configuration's own
    (:data:`~erag_dagster.config.evaluation.FIELDS`: name, type, help): each one ``None`` —
    the registry's value — unless run config sets it. Not re-declared here, so a new
    evaluation setting is a run-config field without an edit (the schedule is the
    definitions', not a run's: ``run_config=False``)."""
    hints = get_type_hints(EvaluationConfig)
    return {
        name: (
            hints[name] | None,
            Field(default=None, description=f"{rule.help} (empty: the registry's)"),
        )
        for name, rule in FIELDS.items()
        if rule.run_config and name != "dataset"
    }


class _Settings(RegistryBound):
    """The fields :class:`EvalSettings` holds besides the evaluation settings, and its
    behaviour (its evaluation fields are added by :func:`pydantic.create_model`)."""

    dataset: str = Field(default="", description="dataset spec, e.g. sample, beir:DIR, squad:PATH")
    registry_path: str = Field(default="", description="registry YAML; default: packaged")

    _registry: Registry | None = PrivateAttr(default=None)

    def bound_to(self, registry: Registry) -> _Settings:
        """A copy bound to an already parsed ``registry`` (the one the Definitions' partitions
        came from): it, and every copy Dagster makes from it for a run (``parsed_registry``,
        :mod:`erag_dagster.orchestration.resources.bound_registry`), uses that object, never a new
        parse of the file; refuses a ``registry_path`` naming another file."""
        # a new object, not model_copy: Dagster builds a run's copy from the constructor's
        # arguments
        given = {field: getattr(self, field) for field in self.model_fields_set}
        copy = self.__class__(**{**given, "parsed_registry": registry})
        copy._registry = registry
        copy._check_registry_path()
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
        bound = self.parsed_registry
        if bound is None or not self.registry_path:
            return
        bound_path = bound.path
        if Path(self.registry_path).resolve() != Path(bound_path).resolve():
            raise InputError(
                f"settings.registry_path {self.registry_path} is not the registry these "
                f"definitions were built from ({bound_path}); set ERAG_REGISTRY to it instead"
            )

    def registry(self, dataset: str | None = None) -> Registry:
        """The registry (parsed at most once per settings object, and once per Definitions for
        a bound one); with ``dataset``, the view of that registry dataset
        (:meth:`Registry.for_dataset`)."""
        if self._registry is None:
            self._registry = self.parsed_registry or load_registry(self.registry_path or None)
        self._check_registry_path()
        return self._registry.for_dataset(dataset)

    def resolve(self, dataset: str | None = None) -> EvaluationConfig:
        """The settings in force: explicit values, else the registry's ``evaluation`` section
        (with ``dataset``: that registry dataset's overrides first), else its defaults —
        checked by the registry's rules; ``label_k`` and ``e2e_ks`` are capped at ``k``.

        A registry dataset's spec is its own: ``dataset``/``$ERAG_DATASET`` replace the spec of
        a registry without a ``datasets`` section only (:meth:`check_dataset_override`)."""
        config = self.registry(dataset).evaluation
        spec = None
        if dataset is None:
            spec = self.dataset or os.environ.get("ERAG_DATASET") or None
        explicit = {name: getattr(self, name) for name in _run_config_fields()}
        return config.with_overrides("settings", dataset=spec, **explicit)


EvalSettings = create_model(
    "EvalSettings",
    __base__=_Settings,
    __module__=__name__,
    __doc__="""What to evaluate: the dataset spec, the registry file, and every evaluation
    setting of :class:`~erag_dagster.config.evaluation.EvaluationConfig` Dagster run config
    may set (its fields, derived from the configuration's: :func:`_run_config_fields`).

    A field left empty (``None``) takes the registry's ``evaluation`` section, which holds
    the one set of defaults; :meth:`resolve` gives the values in force, checked by the
    configuration's rules. The registry is parsed once per Definitions (:meth:`bound_to`) and
    handed on to every copy Dagster makes of this resource for a run; run config that points
    ``registry_path`` at another file than the one the partitions came from is refused.
    """,
    **_run_config_fields(),
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
