"""Helpers shared by the asset modules: partitions from the registry, data versions, metadata."""

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import dagster as dg
import polars as pl

from erag_dagster.config.registry import Registry
from erag_dagster.core.code_versions import BASE_CODE_VERSION
from erag_dagster.core.hashing import sha256_frame
from erag_dagster.core.paths import storage_dir
from erag_dagster.meta.per_query import System
from erag_dagster.orchestration.resources import EvalSettings, Evaluation
from erag_dagster.reports.tables import to_markdown

CODE_VERSION = BASE_CODE_VERSION
"""The ``code_version`` of the assets whose computation has no versioned code of its own; the
assets that run a downstream metric, the prompt builder or a label method derive theirs
(:func:`erag_dagster.core.code_versions.asset_code_version`)."""
T = TypeVar("T")


DATASET_TAG = "erag/dataset"
"""The tag naming the registry dataset an asset belongs to (set by :func:`prefixed`)."""


def dataset_of(context: dg.AssetExecutionContext) -> str | None:
    """The registry dataset whose asset is running (its :data:`DATASET_TAG`: ``scifact`` for
    ``scifact/corpus``, also under a key prefix such as ``team/erag/scifact/corpus``); ``None``
    for an asset of no dataset (a registry without ``datasets``, the reports across them)."""
    key = next(iter(context.assets_def.keys))
    return context.assets_def.tags_by_key.get(key, {}).get(DATASET_TAG)


def key_prefix_of(context: dg.AssetExecutionContext) -> list[str]:
    """The eRAG component's ``key_prefix`` of the running asset (``[]`` in the packaged
    project): its key less its own name and its dataset (``[team, erag]`` for
    ``team/erag/scifact/corpus``)."""
    key = next(iter(context.assets_def.keys))
    return list(key.path[: -2 if dataset_of(context) else -1])


def report_folder(dataset: str | None, key_prefix: Sequence[str] = ()) -> Path:
    """The folder of a dataset's report side files (Figure 1's png, Table 1 as parquet) and of
    the HTML page: ``reports/`` under the storage root, ``reports/<dataset>/`` for a registry
    dataset (two datasets' figures must not overwrite each other), both under the component's
    ``key_prefix`` (``reports/team/erag/…``: two instances' pages neither). Created if
    missing."""
    return storage_dir("reports", *key_prefix, *([dataset] if dataset else []))


def prefixed(assets: list[dg.AssetsDefinition], dataset: str | None) -> list[dg.AssetsDefinition]:
    """``assets`` with every key among them, and every dependency on one of them or on
    ``dataset_files``, prefixed by ``dataset`` (unchanged when ``None``), tagged with it
    (:data:`DATASET_TAG`); their checks follow. Dependencies on other keys (``reader_models``,
    a user's asset) stay as they are: shared by every dataset."""
    if dataset is None:
        return assets
    from erag_dagster.orchestration.assets.automation import DATASET_FILES

    own = {key for a in assets for key in a.keys}
    tags = {
        key.with_prefix(dataset): {**a.tags_by_key.get(key, {}), DATASET_TAG: dataset}
        for a in assets
        for key in a.keys
    }
    return with_key_prefix(assets, [dataset], own | {DATASET_FILES}, tags)


def with_key_prefix(
    assets: list[dg.AssetsDefinition],
    prefix: list[str],
    keys: set[dg.AssetKey],
    tags_by_key: Mapping[dg.AssetKey, Mapping[str, str]] | None = None,
) -> list[dg.AssetsDefinition]:
    """``assets`` with each of ``keys`` (their own keys and those of dependencies to rename
    with them) prefixed by ``prefix`` and each op named ``<prefix parts>__<op>`` (what
    ``key_prefix`` gives a decorated asset); ``tags_by_key``: tags by *new* key. Dependencies
    outside ``keys`` (a user's asset) are left as they are. An empty ``prefix``: unchanged."""
    if not prefix:
        return assets
    replacements = {key: key.with_prefix(prefix) for key in keys}
    renamed = []
    for a in assets:
        a = a.with_attributes(asset_key_replacements=replacements)
        if tags_by_key:
            a = a.with_attributes(
                tags_by_key={k: tags_by_key[k] for k in a.keys if k in tags_by_key}
            )
        renamed.append(_renamed_node(a, "__".join(prefix)))
    return renamed


def _renamed_node(assets_def: dg.AssetsDefinition, dataset: str) -> dg.AssetsDefinition:
    """``assets_def`` with its op named ``<dataset>__<op>`` (what ``key_prefix`` gives an
    asset decorated with it): a job holding two datasets' copies needs distinct op names, and
    ``with_attributes`` renames keys only. Built with the public ``AssetsDefinition``
    constructor from the definition's own attributes (``get_attributes_dict``: what
    ``with_attributes`` copies too), the renamed op in place of the old one."""
    node = assets_def.node_def
    renamed = node.with_replaced_properties(name=f"{dataset}__{node.name}")
    attributes = {**assets_def.get_attributes_dict(), "node_def": renamed}
    with warnings.catch_warnings():  # the constructor's beta/preview notices are not for users
        warnings.simplefilter("ignore", dg.BetaWarning)
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetsDefinition(**attributes)


def evaluation_of(registry: Registry, settings: EvalSettings | None = None) -> Evaluation:
    """The settings the assets built from ``registry`` (a dataset's view) run with:
    ``settings`` (default: the registry's own) resolved against it. Their downstream metric and
    label methods decide the derived ``code_version`` of the label assets."""
    return (settings or EvalSettings()).bound_to(registry).resolve()


def session_of(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    *,
    corpus: pl.DataFrame | None = None,
    queries: pl.DataFrame | None = None,
    qrels: pl.DataFrame | None = None,
    store: object = None,
    executor: object = None,
):  # -> EvaluationSession
    """The evaluation session of the running asset (its partition's step is one of the
    session's: :class:`~erag_dagster.evaluation.session.EvaluationSession`): the settings in
    force for its dataset, that dataset's view of the registry, the tables the asset holds,
    the label store (when it labels) and the Dagster run as the producer of every new row."""
    from erag_dagster.evaluation.session import EvaluationSession, partial_dataset

    dataset = dataset_of(context)
    config = settings.resolve(dataset)
    return EvaluationSession(
        config, settings.registry(dataset),
        partial_dataset(config.dataset, corpus=corpus, queries=queries, qrels=qrels),
        store, producer=context.run.run_id, executor=executor, log=context.log.info,
    )  # fmt: skip


def retriever_partitions(registry: Registry) -> dg.StaticPartitionsDefinition:
    return dg.StaticPartitionsDefinition(registry.retriever_partitions)


def reader_retriever_partitions(registry: Registry) -> dg.MultiPartitionsDefinition:
    return dg.MultiPartitionsDefinition(
        {
            "reader": dg.StaticPartitionsDefinition(registry.reader_partitions),
            "retriever": dg.StaticPartitionsDefinition(registry.retriever_partitions),
        }
    )


def system_of(key: dg.MultiPartitionKey) -> System:
    """``(reader, retriever)`` of a reader x retriever partition key."""
    dims = key.keys_by_dimension
    return dims["reader"], dims["retriever"]


def by_system(partitions: Mapping[dg.MultiPartitionKey, T]) -> dict[System, T]:
    """Every partition of a reader x retriever input, keyed by ``(reader, retriever)``."""
    return {system_of(key): value for key, value in partitions.items()}


def frame_version(frame: pl.DataFrame) -> dg.DataVersion:
    """A content hash of a frame (its rows as JSON lines): equal data → equal version."""
    digest = sha256_frame(frame)
    return dg.DataVersion(digest[:16])


def table_md(frame: pl.DataFrame, max_rows: int = 50) -> dg.MetadataValue:
    return dg.MetadataValue.md(to_markdown(frame.head(max_rows)))
