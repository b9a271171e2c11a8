"""Meta-evaluation assets: end-to-end RAG, baseline labels, correlation (Table 1, Figure 1),
label agreement, efficiency (Table 2)."""

import base64
from collections.abc import Iterator

import dagster as dg
import polars as pl

from erag_dagster.assets import checks as asset_checks
from erag_dagster.assets.automation import (
    READER_MODELS,
    READER_MODELS_BY_READER,
    RECOMPUTE_WHEN_STALE,
    reader_lineage_tags,
    reader_models_key,
)
from erag_dagster.assets.common import (
    CODE_VERSION,
    by_system,
    dataset_of,
    evaluation_of,
    frame_version,
    reader_retriever_partitions,
    report_folder,
    table_md,
)
from erag_dagster.assets.labels import GPU_OP_TAGS, GPU_POOL, RUN_BY_RETRIEVER
from erag_dagster.code_versions import asset_code_version
from erag_dagster.data.spec import parse_spec
from erag_dagster.meta.agreement import label_agreement_table
from erag_dagster.meta.correlation import table1
from erag_dagster.meta.correlation_report import correlation_report as build_correlation_report
from erag_dagster.meta.efficiency import efficiency_report as measure_efficiency_report
from erag_dagster.meta.end_to_end import end_to_end_code_versions
from erag_dagster.meta.system_outputs import (
    baseline_code_versions,
    baseline_label_set,
    end_to_end_at_depths,
)
from erag_dagster.registry import Registry
from erag_dagster.resources import EvalSettings, LabelStoreResource, ReaderResource
from erag_dagster.retrieval.encoder import encoder_from_config
from erag_dagster.retrieval.runs import top_k


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
    params = settings.resolve(dataset_of(context))
    labels = baseline_label_set(
        top_k(retrieval_run, params.label_k), queries, corpus, qrels,
        encoder_from_config(registry.first_config("dense")),
        reader.get(registry, context.partition_key.keys_by_dimension["reader"]),
        store=label_store.open(), run_id=context.run.run_id, log=context.log.info,
        metric=params.metric, methods=params.label_methods,
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


@dg.asset(
    group_name="reports",
    code_version=CODE_VERSION,
    automation_condition=RECOMPUTE_WHEN_STALE,
    check_specs=asset_checks.report_check_specs(
        "correlation_report", figures=True, regression=True
    ),
)
def correlation_report(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    doc_labels: dict[str, pl.DataFrame],
    baseline_labels: dict[str, pl.DataFrame],
    end_to_end: dict[str, pl.DataFrame],
) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
    """Kendall tau-b / Spearman rho (bootstrap 95% CIs) of every labelling method with
    end-to-end quality, per retriever (paper Table 1), and correlation vs k (Figure 1)."""
    registry, params = settings.registry(dataset_of(context)), settings.resolve(dataset_of(context))
    report = build_correlation_report(
        by_system(doc_labels), by_system(baseline_labels), by_system(end_to_end),
        dataset=dataset_of(context) or parse_spec(params.dataset).name, metrics=params.list_metrics,
        label_k=params.label_k,
        e2e_ks=params.e2e_ks, n_resamples=params.bootstrap_resamples,
        folder=report_folder(dataset_of(context)),
    )  # fmt: skip
    image = base64.b64encode(report.plot.read_bytes()).decode()
    results, extra = asset_checks.report_results(
        context, "correlation_report", report.table, None, (registry, params), True
    )
    output = dg.Output(
        report.table,
        data_version=frame_version(report.table),
        metadata={
            "dataset": params.dataset,
            "table1_kendall": table_md(table1(report.table, "kendall_tau"), max_rows=100),
            "correlation_vs_k": table_md(report.by_k, max_rows=100),
            "plot": dg.MetadataValue.md(f"![correlation vs k](data:image/png;base64,{image})"),
            "plot_path": dg.MetadataValue.path(str(report.plot)),
            **extra,
        },
    )
    yield from asset_checks.checked(output, results)


@dg.asset(
    group_name="efficiency",
    code_version=CODE_VERSION,
    pool=GPU_POOL,
    deps=[READER_MODELS],
    op_tags=GPU_OP_TAGS,
)
def efficiency_report(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    retrieval_run: dict[str, pl.DataFrame],
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """Wall time and peak memory: end-to-end vs eRAG (query- and document-level batching),
    on the first registry reader and the first retriever partition (sorted)."""
    params = settings.resolve(dataset_of(context))
    reader_entry = next(iter(settings.registry(dataset_of(context)).readers.values()))
    first = sorted(retrieval_run)[0]
    table = measure_efficiency_report(
        reader_entry.name, reader_entry.config, retrieval_run[first], queries, corpus,
        params.efficiency_ks, params.efficiency_queries, params.efficiency_rounds,
    )  # fmt: skip
    if table.is_empty():
        context.log.warning(
            f"no query has {max(params.efficiency_ks)} retrieved documents; raise k to measure"
        )
    return dg.Output(
        table,
        data_version=frame_version(table),
        metadata={
            "report": table_md(table),
            "retriever": first,
            "ks": list(params.efficiency_ks),
            "rounds": params.efficiency_rounds,
        },
    )


def build_meta_partitioned(
    registry: Registry, settings: EvalSettings | None = None
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
    }
    return [
        dg.asset(
            name="end_to_end",
            partitions_def=reader_retriever_partitions(registry),
            code_version=e2e_version,
            **common,
        )(_end_to_end),
        dg.asset(
            name="baseline_labels",
            partitions_def=reader_retriever_partitions(registry),
            code_version=baseline_version,
            **common,
        )(_baseline_labels),
    ]


@dg.asset(
    group_name="reports",
    code_version=CODE_VERSION,
    automation_condition=RECOMPUTE_WHEN_STALE,
    check_specs=asset_checks.report_check_specs("label_agreement"),
)
def label_agreement(
    context: dg.AssetExecutionContext,
    doc_labels: dict[str, pl.DataFrame],
    baseline_labels: dict[str, pl.DataFrame],
    qrels: pl.DataFrame,
) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
    """How each automatic labelling (eRAG, containment, semantic, LLM annotation) agrees with
    the human/provenance judgments on the same retrieved documents: raw agreement and Cohen's
    kappa per reader x retriever (unjudged documents count as non-relevant)."""
    table = label_agreement_table(by_system(doc_labels), by_system(baseline_labels), qrels)
    no_judgments = "the dataset has no judgments" if qrels.height == 0 else None
    results, _ = asset_checks.report_results(context, "label_agreement", table, no_judgments)
    output = dg.Output(
        table,
        data_version=frame_version(table),
        metadata={"report": table_md(table)},
    )
    yield from asset_checks.checked(output, results)
