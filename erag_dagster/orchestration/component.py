"""The eRAG Dagster Component: eRAG as a ``defs.yaml`` in a team's own Dagster project.

``dg scaffold defs erag_dagster.ERagEvaluation my_eval`` (or a ``defs.yaml``
written by hand, ``type: erag_dagster.ERagEvaluation``) adds the whole eRAG
graph to a project's ``defs/`` folder: the datasets, retrievers, readers and ``evaluation`` settings
of a registry (inline in the YAML's ``attributes``, or a ``registry:`` file), validated by the
registry's own parser (:func:`erag_dagster.config.registry.parse_registry`: the same keys, values,
defaults and error lines as ``registry.yaml``), under an asset key prefix the user picks, with the
label store, the reader and the settings as resources, and the schedule, sensors and asset checks of
the packaged project. The graph is built by
:func:`erag_dagster.orchestration.definitions.build_defs`, the one engine the packaged project
(``erag_dagster/defs/defs.yaml``, an instance of this component with default attributes) and the
command line use too.

A retriever may be an asset of the user's project: ``kind: asset`` with ``asset_key`` (a list of
names or ``a/b``). Its value, a polars/pandas frame (``query_id, doc_id`` and ``rank`` and/or
``score``) or the path of a TREC/parquet run file, becomes the retriever's run, validated as a
``run_file`` is (:func:`erag_dagster.retrieval.run_file.load_run_value`); the asset is an input
of ``retrieval_run``, so lineage runs from it into ``doc_labels`` and the reports.

Edge cases: ``registry`` together with an inline section, a key prefix part that is not a
Dagster name, or any registry error is an :class:`~erag_dagster.core.errors.InputError` naming the
``defs.yaml`` (and, for an ``evaluation`` key, its line). One instance per code location: the
resources (``settings``, ``reader``, ``label_store``, ``io_manager``) have fixed keys.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

import dagster as dg

from erag_dagster.config.registry import (
    ASSET_KEY_PART,
    TOP_LEVEL_KEYS,
    Registry,
    default_registry_path,
    parse_registry,
)
from erag_dagster.core.errors import InputError
from erag_dagster.core.input_files import load_yaml

COMPONENT_FILE = "defs.yaml"
"""The file that declares a component instance (``dg``'s convention)."""


class ERagEvaluation(dg.Component, dg.Model, dg.Resolvable):
    """eRAG retrieval evaluation (Salemi & Zamani, SIGIR 2024) as Dagster assets: per-document
    labels from your RAG reader, eRAG and human-judgment reports, schedule, sensors and checks.

    Give the registry inline (``retrievers``, ``readers`` and optionally ``evaluation``,
    ``generation``, ``datasets``: the sections of erag-dagster's registry.yaml, same keys and
    defaults) or as a file (``registry``); with neither, the packaged registry (or
    ``$ERAG_REGISTRY``). A retriever of ``kind: asset`` reads its run from an asset of your
    project (``asset_key``).
    """

    registry: Annotated[
        str | None,
        dg.Resolver.default(
            description="a registry YAML file (relative to this defs.yaml's folder); not "
            "together with the inline sections"
        ),
    ] = None
    retrievers: Annotated[
        dict[str, dict[str, Any]] | None,
        dg.Resolver.default(
            description="name -> retriever config (kind: bm25 | dense | hybrid | run_file | "
            "rerank | asset; asset: asset_key [a, b], an asset of your project that yields a run)"
        ),
    ] = None
    readers: Annotated[
        dict[str, dict[str, Any]] | None,
        dg.Resolver.default(description="name -> reader config (model, backend, device, ...)"),
    ] = None
    evaluation: Annotated[
        dict[str, Any] | None,
        dg.Resolver.default(
            description="the registry's evaluation section (dataset, k, label_k, metric, ...)"
        ),
    ] = None
    generation: Annotated[
        dict[str, Any] | None,
        dg.Resolver.default(description="where readers generate (executor: inprocess | ray)"),
    ] = None
    datasets: Annotated[
        dict[str, Any] | None,
        dg.Resolver.default(description="name -> dataset (spec, evaluation overrides)"),
    ] = None
    key_prefix: Annotated[
        list[str] | None,
        dg.Resolver.default(
            description="asset key prefix of every eRAG asset (and of its ops, jobs, schedule "
            "and sensors); parts of letters, digits and _; default: none"
        ),
    ] = None
    label_store: Annotated[
        str | None,
        dg.Resolver.default(
            description="label store: a path, sqlite:///PATH or postgresql://... (no "
            "password); default: labels.sqlite under the storage root"
        ),
    ] = None
    deployment: Annotated[
        Literal["local", "production"] | None,
        dg.Resolver.default(description="resource set (default: $DAGSTER_DEPLOYMENT or local)"),
    ] = None
    io_manager: Annotated[
        bool,
        dg.Resolver.default(
            description="bind erag-dagster's parquet/JSON io_manager (false: your project "
            "binds one)"
        ),
    ] = True

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The eRAG Definitions of this instance (:func:`build_registry`, then
        :func:`erag_dagster.orchestration.definitions.build_defs`)."""
        where = Path(context.path) / COMPONENT_FILE
        with warnings.catch_warnings():  # Dagster's beta notices for erag's own decorators only
            warnings.simplefilter("ignore", dg.BetaWarning)
            warnings.simplefilter("ignore", dg.PreviewWarning)
            return self._defs(where)

    def _defs(self, where: Path) -> dg.Definitions:
        # imported here, under the notice filter: the asset modules' decorators warn on import
        from erag_dagster.orchestration.definitions import build_defs
        from erag_dagster.orchestration.resources import LabelStoreResource

        registry = build_registry(self, where)
        prefix = self.key_prefix or []
        for part in prefix:
            if not ASSET_KEY_PART.match(part):
                raise InputError(
                    f"{where}: key_prefix part {part!r} must be letters, digits and '_'"
                )
        overrides: dict[str, object] = {}
        if self.label_store:
            overrides["label_store"] = LabelStoreResource(path=self.label_store)
        if not self.io_manager:
            overrides["io_manager"] = None
        return build_defs(
            registry=registry,
            key_prefix=prefix,
            resources=overrides,
            deployment=self.deployment,
        )


def build_registry(component: ERagEvaluation, where: Path) -> Registry:
    """The registry of a component instance declared in ``where`` (its ``defs.yaml``): its
    inline sections, its ``registry`` file, or (neither) the packaged/``$ERAG_REGISTRY`` one.
    ``kind: asset`` retrievers are allowed in all three."""
    inline = {
        key: copy.deepcopy(value)
        for key in TOP_LEVEL_KEYS
        if (value := getattr(component, key)) is not None
    }
    if component.registry is not None:
        if inline:
            raise InputError(
                f"{where}: give either registry: (a file) or the inline sections "
                f"({', '.join(inline)}), not both"
            )
        path = (where.parent / Path(component.registry).expanduser()).resolve()
        return _registry_file(str(path))
    if not inline:
        return _registry_file(default_registry_path())
    return parse_registry(inline, str(where), ("attributes",), asset_retrievers=True)


def _registry_file(path: str) -> Registry:
    if not Path(path).exists():
        raise InputError(f"{path}: registry file not found")
    return parse_registry(load_yaml(path) or {}, path, asset_retrievers=True)
