"""eRAG labels (paper §2, eq. 1) per reader x retriever (the list-metric tables on them are
report declarations: :mod:`erag_dagster.reports.dataset_reports`)."""

from collections.abc import Iterator

import dagster as dg
import polars as pl

from erag_dagster.config.registry import Registry
from erag_dagster.core.code_versions import asset_code_version
from erag_dagster.core.credentials import mask_in
from erag_dagster.evaluation import checks
from erag_dagster.labels.labeller import erag_code_versions
from erag_dagster.orchestration.assets import checks as asset_checks
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
    system_of,
    table_md,
)
from erag_dagster.orchestration.resources import EvalSettings, LabelStoreResource, ReaderResource
from erag_dagster.orchestration.resources.keys import UNPREFIXED, ResourceKeys

GPU_POOL = "gpu"
"""Reader-bound steps share this pool: its limit is the number of accelerators (op-level
concurrency; ``concurrency.pools`` in the instance's ``dagster.yaml``)."""
#: On Kubernetes (deploy/production) each step is a pod built from its op tags by
#: ``k8s_job_executor`` (:mod:`erag_dagster.orchestration.deployment`): reader-bound steps ask for
#: one GPU.
GPU_OP_TAGS = {
    "dagster-k8s/config": {
        "container_config": {"resources": {"limits": {"nvidia.com/gpu": "1"}}},
    },
}


def _doc_labels(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    reader: ReaderResource,
    label_store: LabelStoreResource,
    retrieval_run: pl.DataFrame,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
    """Per-document eRAG labels for the top ``label_k`` of one run, judged by one reader: the
    evaluation session's label step, which the API and the gate call too
    (:meth:`erag_dagster.evaluation.session.EvaluationSession.label`); its fit diagnostics are
    the ``fit`` asset's, computed once over every partition.

    Pairs already in the label store (same reader fingerprint, question, document text, gold
    answers and metric) are taken from it; only unseen pairs run the reader.
    """
    reader_key, retriever_key = system_of(context.partition_key)
    registry = settings.registry(dataset_of(context))
    session = session_of(
        context, settings, corpus=corpus, queries=queries, store=label_store.open(),
        executor=reader.executor_spec(registry),
    )  # fmt: skip
    params = session.config
    model = reader.get(registry, reader_key)
    top_run = session.labelled_run(retrieval_run)
    result = session.label(retrieval_run, model)
    labels = result.labels
    distribution = (
        labels.group_by(pl.col("label").round(2)).len().sort("label").rename({"len": "count"})
    )
    complete = checks.check_doc_labels(labels, top_run, model.fingerprint)
    output = dg.Output(
        labels,
        data_version=frame_version(labels.drop("answer", strict=False)),
        tags=reader_lineage_tags(context.instance, reader_key, reader_models_key(context)),
        metadata={
            "reader": reader_key,
            "retriever": retriever_key,
            "reader_fingerprint": model.fingerprint,
            "reader_spec": dg.MetadataValue.json(mask_in(model.identity())),
            "metric": params.metric,
            "label_k": params.label_k,
            "pairs_judged_now": result.judged_now,
            "pairs_from_store": result.from_store,
            "generation_seconds": round(result.generation_seconds, 3),  # reader wall time, s
            "mean_label": float(labels.get_column("label").mean() or 0.0),
            "label_distribution": table_md(distribution),
            # tokens as the reader reported them (server `usage` for backend: openai)
            "tokens_in": result.usage.get("prompt_tokens", 0),
            "tokens_out": result.usage.get("completion_tokens", 0),
            "reader_requests": result.usage.get("requests", 0),
            "reader_retries": result.usage.get("retries", 0),
            "estimate_before_run": dg.MetadataValue.json(result.estimate),
        },
    )
    yield from asset_checks.checked(
        output, [asset_checks.result(asset_checks.LABELS_COMPLETE, complete)]
    )


RUN_BY_RETRIEVER = dg.AssetIn(
    "retrieval_run",
    partition_mapping=dg.MultiToSingleDimensionPartitionMapping(
        partition_dimension_name="retriever"
    ),
)


def build_doc_labels(
    registry: Registry, settings: EvalSettings | None = None, keys: ResourceKeys = UNPREFIXED
) -> dg.AssetsDefinition:
    """``doc_labels`` partitioned by reader x retriever (registry configs); its
    ``code_version`` is derived from the versions of the metric in force (``settings``,
    default the registry's), the prompt builder and the post-processing
    (:func:`~erag_dagster.labels.labeller.erag_code_versions`)."""
    partitions = reader_retriever_partitions(registry)
    metric = evaluation_of(registry, settings).metric
    return dg.asset(
        name="doc_labels",
        group_name="labels",
        partitions_def=partitions,
        code_version=asset_code_version(erag_code_versions(metric)),
        automation_condition=RECOMPUTE_WHEN_STALE,
        pool=GPU_POOL,
        deps=[READER_MODELS_BY_READER],
        op_tags=GPU_OP_TAGS,
        ins={"retrieval_run": RUN_BY_RETRIEVER},
        check_specs=asset_checks.labels_check_specs("doc_labels", partitions),
        io_manager_key=keys.io_manager,
    )(adapt(_doc_labels, keys))
