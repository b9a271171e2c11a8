"""Meta-evaluation assets: end-to-end RAG and the baseline labels, per reader x retriever.

The tables built on them (correlation: Table 1 and Figure 1, label agreement, efficiency:
Table 2) are report declarations (:mod:`erag_dagster.reports.dataset_reports`), built as assets
by :mod:`erag_dagster.orchestration.assets.reports`."""

import dagster as dg
import polars as pl

from erag_dagster.config.registry import Registry
from erag_dagster.core.code_versions import asset_code_version
from erag_dagster.meta.end_to_end import end_to_end_code_versions
from erag_dagster.meta.system_outputs import (
    baseline_code_versions,
    baseline_label_set,
    end_to_end_at_depths,
)
from erag_dagster.orchestration.assets.adapter import adapt
from erag_dagster.orchestration.assets.automation import (
    READER_MODELS_BY_READER,
    RECOMPUTE_WHEN_STALE,
    reader_lineage_tags,
    reader_models_key,
)
from erag_dagster.orchestration.assets.common import (
    dataset_of,
    evaluation_of,
    frame_version,
    reader_retriever_partitions,
    session_of,
    table_md,
)
from erag_dagster.orchestration.assets.labels import GPU_OP_TAGS, GPU_POOL, RUN_BY_RETRIEVER
from erag_dagster.orchestration.resources import EvalSettings, LabelStoreResource, ReaderResource
from erag_dagster.orchestration.resources.keys import UNPREFIXED, ResourceKeys
from erag_dagster.retrieval.encoder import encoder_from_config


def _end_to_end(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    reader: ReaderResource,
    label_store: LabelStoreResource,
    retrieval_run: pl.DataFrame,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """The reader answers from the top-k documents together, for every k in ``e2e_ks``."""
    params = settings.resolve(dataset_of(context))
    model = reader.get(settings.registry(), context.partition_key.keys_by_dimension["reader"])
    result = end_to_end_at_depths(
        retrieval_run, queries, corpus, model, params.metric, params.e2e_ks, context.log.info,
        store=label_store.open(), run_id=context.run.run_id,
        executor=reader.executor_spec(settings.registry(dataset_of(context))),
    )  # fmt: skip
    scores = result.scores
    means = scores.group_by("k").agg(pl.col("score").mean().alias("mean_score")).sort("k")
    return dg.Output(
        scores,
        data_version=frame_version(scores),
        tags=reader_lineage_tags(
            context.instance,
            context.partition_key.keys_by_dimension["reader"],
            reader_models_key(context),
        ),
        metadata={
            "reader_fingerprint": model.fingerprint,
            "metric": params.metric,
            "ks": list(params.e2e_ks),
            "seconds": round(result.seconds, 2),
            "mean_score_by_k": table_md(means),
        },
    )


def _baseline_labels(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    reader: ReaderResource,
    label_store: LabelStoreResource,
    retrieval_run: pl.DataFrame,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """Provenance, containment, semantic and LLM-annotation labels for the same top-k lists."""
    registry = settings.registry(dataset_of(context))
    session = session_of(context, settings)
    params = session.config
    labels = baseline_label_set(
        session.labelled_run(retrieval_run), queries, corpus, qrels,  # the eRAG labels' cut
        encoder_from_config(registry.first_config("dense")),
        reader.get(registry, context.partition_key.keys_by_dimension["reader"]),
        store=label_store.open(), run_id=context.run.run_id, log=context.log.info,
        metric=params.metric, relevance_level=params.relevance_level,
        methods=params.label_methods,
        executor=reader.executor_spec(registry),
    )  # fmt: skip
    summary = (
        labels.group_by("method").agg(pl.col("label").mean().alias("mean_label")).sort("method")
    )
    return dg.Output(
        labels,
        data_version=frame_version(labels),
        tags=reader_lineage_tags(
            context.instance,
            context.partition_key.keys_by_dimension["reader"],
            reader_models_key(context),
        ),
        metadata={
            "methods": labels["method"].unique(maintain_order=True).to_list(),
            "mean_label": table_md(summary),
        },
    )


def build_meta_partitioned(
    registry: Registry, settings: EvalSettings | None = None, keys: ResourceKeys = UNPREFIXED
) -> list[dg.AssetsDefinition]:
    """``end_to_end`` and ``baseline_labels``, partitioned by reader x retriever; each one's
    ``code_version`` is derived from the versions of the code it runs under the metric and
    label methods in force (``settings``, default the registry's):
    :func:`~erag_dagster.meta.end_to_end.end_to_end_code_versions`,
    :func:`~erag_dagster.meta.system_outputs.baseline_code_versions`."""
    params = evaluation_of(registry, settings)
    e2e_version = asset_code_version(end_to_end_code_versions(params.metric))
    baseline_version = asset_code_version(
        baseline_code_versions(params.metric, params.label_methods)
    )
    common = {
        "group_name": "meta_evaluation",
        "automation_condition": RECOMPUTE_WHEN_STALE,
        "pool": GPU_POOL,
        "deps": [READER_MODELS_BY_READER],
        "op_tags": GPU_OP_TAGS,
        "ins": {"retrieval_run": RUN_BY_RETRIEVER},
        "io_manager_key": keys.io_manager,
    }
    return [
        dg.asset(
            name="end_to_end",
            partitions_def=reader_retriever_partitions(registry),
            code_version=e2e_version,
            **common,
        )(adapt(_end_to_end, keys)),
        dg.asset(
            name="baseline_labels",
            partitions_def=reader_retriever_partitions(registry),
            code_version=baseline_version,
            **common,
        )(adapt(_baseline_labels, keys)),
    ]
