"""eRAG labels (paper §2, eq. 1) per reader x retriever (the list-metric tables on them are
report declarations: :mod:`erag_dagster.reports.dataset_reports`)."""

from collections.abc import Iterator

import dagster as dg
import polars as pl

from erag_dagster.config.registry import Registry
from erag_dagster.core.code_versions import asset_code_version
from erag_dagster.core.credentials import mask_in
from erag_dagster.evaluation import checks
from erag_dagster.evaluation.references import make_references
from erag_dagster.labels.labeller import erag_code_versions
from erag_dagster.labels.reference import REFERENCE_TASK, References
from erag_dagster.orchestration.assets import checks as asset_checks
from erag_dagster.orchestration.assets.adapter import adapt
from erag_dagster.orchestration.assets.automation import (
    READER_MODELS,
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
    yield from _labelled(context, settings, reader, label_store, retrieval_run, corpus, queries)


def _doc_labels_against_reference(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    reader: ReaderResource,
    label_store: LabelStoreResource,
    retrieval_run: pl.DataFrame,
    reference_answers: pl.DataFrame,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
    """Per-document eRAG labels for the top ``label_k`` of one run, judged by one reader and
    scored against its reader's ``reference_answers`` (``evaluation.reference``) instead of
    gold answers; otherwise as with gold (the same label step)."""
    params = settings.resolve(dataset_of(context))
    refs = References.of_frame(reference_answers, params.reference, params.label_k)
    yield from _labelled(
        context, settings, reader, label_store, retrieval_run, corpus, queries, refs
    )


def _labelled(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    reader: ReaderResource,
    label_store: LabelStoreResource,
    retrieval_run: pl.DataFrame,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    references: References | None = None,
) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
    """The body of both ``doc_labels`` variants (gold answers, or ``references``)."""
    reader_key, retriever_key = system_of(context.partition_key)
    registry = settings.registry(dataset_of(context))
    session = session_of(
        context, settings, corpus=corpus, queries=queries, store=label_store.open(),
        executor=reader.executor_spec(registry),
        references=references,
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
            **({"reference": references.spec} if references is not None else {}),
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


REFERENCE_BY_READER = dg.AssetIn(
    "reference_answers",
    partition_mapping=dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="reader"),
)
"""A reader x retriever partition reads its own reader's reference answers."""


def build_doc_labels(
    registry: Registry, settings: EvalSettings | None = None, keys: ResourceKeys = UNPREFIXED
) -> dg.AssetsDefinition:
    """``doc_labels`` partitioned by reader x retriever (registry configs); its
    ``code_version`` is derived from the versions of the metric in force (``settings``,
    default the registry's), the prompt builder and the post-processing
    (:func:`~erag_dagster.labels.labeller.erag_code_versions`). With ``evaluation.reference``
    (:attr:`Registry.has_reference`) it reads its reader's ``reference_answers`` too and scores
    against them; its code version then includes the reference task's."""
    partitions = reader_retriever_partitions(registry)
    metric = evaluation_of(registry, settings).metric
    against = registry.has_reference
    versions = erag_code_versions(metric) + ((REFERENCE_TASK,) if against else ())
    ins = {"retrieval_run": RUN_BY_RETRIEVER}
    if against:
        ins["reference_answers"] = REFERENCE_BY_READER
    return dg.asset(
        name="doc_labels",
        group_name="labels",
        partitions_def=partitions,
        code_version=asset_code_version(versions),
        automation_condition=RECOMPUTE_WHEN_STALE,
        pool=GPU_POOL,
        deps=[READER_MODELS_BY_READER],
        op_tags=GPU_OP_TAGS,
        ins=ins,
        check_specs=asset_checks.labels_check_specs("doc_labels", partitions),
        io_manager_key=keys.io_manager,
    )(adapt(_doc_labels_against_reference if against else _doc_labels, keys))


def _reference_answers(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    reader: ReaderResource,
    label_store: LabelStoreResource,
    retrieval_run: dict[str, pl.DataFrame],
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """The reference answer of every question for one reader (``evaluation.reference``):
    the reader's own, or a teacher's, answer from the top documents of a reference retriever
    or of the union of every retriever's runs — the reference step the API and the gate call
    (:func:`erag_dagster.evaluation.references.make_references`), stored like any answer."""
    dataset = dataset_of(context)
    params = settings.resolve(dataset)
    registry = settings.registry(dataset)
    model = reader.get(registry, context.partition_key)
    found = make_references(
        params, registry, queries, corpus, model, retrieval_run, label_store.open(),
        reader_for=lambda name: reader.get(registry, name),
        executor=reader.executor_spec(registry), producer=context.run.run_id,
        log=context.log.info,
    )  # fmt: skip
    assert found is not None  # the asset exists only with a reference
    frame = found.frame
    return dg.Output(
        frame,
        data_version=frame_version(frame),
        tags=reader_lineage_tags(
            context.instance, context.partition_key, reader_models_key(context)
        ),
        metadata={
            "reference": found.spec,
            "meaning": found.description,
            "questions": frame.height,
            "answers_generated_now": found.generated,
            "answers_from_store": found.from_store,
            "empty_answers": found.empty,
        },
    )


def build_reference_answers(
    registry: Registry, keys: ResourceKeys = UNPREFIXED
) -> dg.AssetsDefinition:
    """``reference_answers``: one partition per registry reader (the reader whose labels
    score against them), reading every partition of ``retrieval_run`` (the union, or the
    reference retriever's); only in a graph whose ``evaluation.reference`` is not ``gold``."""
    partitions = dg.StaticPartitionsDefinition(registry.reader_partitions)
    return dg.asset(
        name="reference_answers",
        group_name="labels",
        partitions_def=partitions,
        code_version=asset_code_version((REFERENCE_TASK,)),
        automation_condition=RECOMPUTE_WHEN_STALE,
        pool=GPU_POOL,
        deps=[READER_MODELS],
        op_tags=GPU_OP_TAGS,
        ins={"retrieval_run": dg.AssetIn(partition_mapping=dg.AllPartitionMapping())},
        io_manager_key=keys.io_manager,
    )(adapt(_reference_answers, keys))
