"""Meta-evaluation assets: end-to-end RAG, baseline labels, correlation (Table 1, Figure 1),
efficiency (Table 2)."""

import dagster as dg
import polars as pl

from erag_dagster.assets.automation import RECOMPUTE_WHEN_STALE, reader_models
from erag_dagster.assets.common import (
    CODE_VERSION,
    frame_version,
    reader_retriever_partitions,
    table_md,
)
from erag_dagster.assets.labels import GPU_OP_TAGS, GPU_POOL, RUN_BY_RETRIEVER, _split_multi_key
from erag_dagster.meta.baselines import (
    containment_labels,
    llm_annotation_labels,
    provenance_labels,
    semantic_labels,
)
from erag_dagster.meta.correlation import correlation_table, correlation_vs_k, table1
from erag_dagster.meta.efficiency import measure_efficiency
from erag_dagster.meta.end_to_end import context_lists, evaluate_end_to_end
from erag_dagster.meta.plots import plot_correlation_vs_k
from erag_dagster.metrics.list_metrics import evaluate_labels, labels_from_frame
from erag_dagster.paths import storage_dir
from erag_dagster.registry import Registry
from erag_dagster.resources import EvalSettings, LabelStoreResource, ReaderResource
from erag_dagster.retrieval.runs import top_k
from erag_dagster.retrieval.service import encoder_from_config


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
    keys = context.partition_key.keys_by_dimension
    model = reader.get(settings.registry(), keys["reader"])
    store = label_store.open()
    frames, seconds = [], 0.0
    for k in settings.end_to_end_ks:
        result = evaluate_end_to_end(
            retrieval_run, queries, corpus, model, settings.downstream_metric, k,
            context.log.info, store=store, dagster_run_id=context.run.run_id,
        )  # fmt: skip
        frames.append(result.scores)
        seconds += result.seconds
    scores = pl.concat(frames)
    means = scores.group_by("k").agg(pl.col("score").mean().alias("mean_score")).sort("k")
    return dg.Output(
        scores,
        data_version=frame_version(scores),
        metadata={
            "reader_fingerprint": model.fingerprint,
            "downstream_metric": settings.downstream_metric,
            "ks": settings.end_to_end_ks,
            "seconds": round(seconds, 2),
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
    keys = context.partition_key.keys_by_dimension
    registry = settings.registry()
    run = top_k(retrieval_run, settings.labelling_k)
    encoder = encoder_from_config(_dense_config(registry))
    parts = {
        "provenance": provenance_labels(run, qrels),
        "containment": containment_labels(run, queries, corpus),
        "semantic_answer": semantic_labels(run, queries, corpus, encoder, against="answer"),
        "semantic_question": semantic_labels(run, queries, corpus, encoder, against="question"),
    }
    model = reader.get(registry, keys["reader"])
    context.log.info(f"LLM annotation of {run.height} (question, document) pairs")
    parts["llm_annotation"] = llm_annotation_labels(
        run, queries, corpus, model, store=label_store.open(), dagster_run_id=context.run.run_id
    )
    labels = pl.concat(
        [
            frame.select("query_id", "doc_id", "rank", "label").with_columns(method=pl.lit(name))
            for name, frame in parts.items()
        ]
    )
    summary = (
        labels.group_by("method").agg(pl.col("label").mean().alias("mean_label")).sort("method")
    )
    return dg.Output(
        labels,
        data_version=frame_version(labels),
        metadata={"methods": list(parts), "mean_label": table_md(summary)},
    )


def _dense_config(registry) -> dict:
    for entry in registry.retrievers.values():
        if entry.config.get("kind") == "dense":
            return entry.config
    return {}


def _per_query(
    labels: pl.DataFrame, metrics: list[str], retriever: str, method: str, dataset: str
) -> pl.DataFrame:
    report = evaluate_labels(labels_from_frame(labels), metrics)
    return pl.DataFrame(
        [
            {
                "dataset": dataset,
                "retriever": retriever,
                "method": method,
                "metric": m,
                "query_id": qid,
                "value": values[m],
            }
            for qid, values in report.per_query.items()
            for m in metrics
        ],
        schema={
            "dataset": pl.String,
            "retriever": pl.String,
            "method": pl.String,
            "metric": pl.String,
            "query_id": pl.String,
            "value": pl.Float64,
        },
    )


def correlation_inputs(
    doc_labels: dict[str, pl.DataFrame],
    baseline_labels: dict[str, pl.DataFrame],
    end_to_end: dict[str, pl.DataFrame],
    metrics: list[str],
    dataset: str,
    k: int,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-query retrieval scores of every method, and end-to-end scores at ``k``."""
    per_query, e2e = [], []
    for partition, labels in sorted(doc_labels.items()):
        reader_key, retriever = _split_multi_key(partition)
        system = f"{retriever} / {reader_key}"
        top = labels.filter(pl.col("rank") <= k)
        per_query.append(_per_query(top, metrics, system, "eRAG", dataset))
        baselines = baseline_labels.get(partition)
        if baselines is not None:
            for (method,), frame in baselines.group_by("method", maintain_order=True):
                top_b = frame.filter(pl.col("rank") <= k)
                per_query.append(_per_query(top_b, metrics, system, str(method), dataset))
        if partition in end_to_end:
            scores = end_to_end[partition].filter(pl.col("k") == k)
            e2e.append(
                scores.select(
                    dataset=pl.lit(dataset),
                    retriever=pl.lit(system),
                    query_id="query_id",
                    value="score",
                )
            )
    return pl.concat(per_query), pl.concat(e2e) if e2e else pl.DataFrame()


@dg.asset(
    group_name="reports", code_version=CODE_VERSION, automation_condition=RECOMPUTE_WHEN_STALE
)
def correlation_report(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    doc_labels: dict[str, pl.DataFrame],
    baseline_labels: dict[str, pl.DataFrame],
    end_to_end: dict[str, pl.DataFrame],
) -> dg.Output[pl.DataFrame]:
    """Kendall tau-b / Spearman rho (bootstrap 95% CIs) of every labelling method with
    end-to-end quality, per retriever (paper Table 1), and correlation vs k (Figure 1)."""
    dataset = settings.dataset_spec
    metrics = settings.eval_list_metrics
    k_main = settings.labelling_k
    per_query, e2e = correlation_inputs(
        doc_labels, baseline_labels, end_to_end, metrics, dataset, k_main
    )
    table = correlation_table(per_query, e2e, n_resamples=settings.bootstrap_resamples)
    per_k = {}
    for k in settings.end_to_end_ks:
        k_metrics = [f"P@{k}", f"Success@{k}", f"nDCG@{k}"]
        per_k[k] = correlation_inputs(
            doc_labels, baseline_labels, end_to_end, k_metrics, dataset, k
        )
    by_k = correlation_vs_k(per_k, n_resamples=settings.bootstrap_resamples)
    folder = storage_dir("reports")
    plot = plot_correlation_vs_k(by_k, folder / "correlation_vs_k.png")
    table.write_parquet(folder / "correlation_table.parquet")
    by_k.write_parquet(folder / "correlation_vs_k.parquet")
    import base64

    image = base64.b64encode(plot.read_bytes()).decode()
    return dg.Output(
        table,
        data_version=frame_version(table),
        metadata={
            "table1_kendall": table_md(table1(table, "kendall_tau"), max_rows=100),
            "correlation_vs_k": table_md(by_k, max_rows=100),
            "plot": dg.MetadataValue.md(f"![correlation vs k](data:image/png;base64,{image})"),
            "plot_path": dg.MetadataValue.path(str(plot)),
        },
    )


@dg.asset(
    group_name="reports",
    code_version=CODE_VERSION,
    pool=GPU_POOL,
    deps=[reader_models],
    op_tags=GPU_OP_TAGS,
)
def efficiency_report(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    retrieval_run: dict[str, pl.DataFrame],
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """Wall time and peak memory: end-to-end vs eRAG (query- and document-level batching)."""
    registry = settings.registry()
    reader_entry = next(iter(registry.readers.values()))
    ks = settings.eff_ks
    first = sorted(retrieval_run)[0]
    run = retrieval_run[first]
    deep = run.group_by("query_id").agg(pl.len().alias("n")).filter(pl.col("n") >= max(ks))
    chosen = deep.sort("query_id").head(settings.eff_queries).get_column("query_id")
    if chosen.is_empty():
        context.log.warning(f"no query has {max(ks)} retrieved documents; raise k to measure")
        table = pl.DataFrame()
    else:
        contexts = context_lists(
            run.filter(pl.col("query_id").is_in(chosen.to_list())),
            queries.filter(pl.col("query_id").is_in(chosen.to_list())),
            corpus,
            max(ks),
        )
        items = list(
            zip(contexts["question"].to_list(), contexts["passages"].to_list(), strict=True)
        )
        table = measure_efficiency(reader_entry.name, reader_entry.config, items, ks=ks)
    return dg.Output(
        table,
        data_version=frame_version(table),
        metadata={"report": table_md(table), "retriever": first, "ks": ks},
    )


def build_meta_partitioned(registry: Registry) -> list[dg.AssetsDefinition]:
    """``end_to_end`` and ``baseline_labels``, partitioned by reader x retriever."""
    common = {
        "group_name": "meta_evaluation",
        "code_version": CODE_VERSION,
        "automation_condition": RECOMPUTE_WHEN_STALE,
        "pool": GPU_POOL,
        "deps": [reader_models],
        "op_tags": GPU_OP_TAGS,
        "ins": {"retrieval_run": RUN_BY_RETRIEVER},
    }
    return [
        dg.asset(name="end_to_end", partitions_def=reader_retriever_partitions(registry), **common)(
            _end_to_end
        ),
        dg.asset(
            name="baseline_labels", partitions_def=reader_retriever_partitions(registry), **common
        )(_baseline_labels),
    ]


@dg.asset(
    group_name="reports", code_version=CODE_VERSION, automation_condition=RECOMPUTE_WHEN_STALE
)
def label_agreement(
    context: dg.AssetExecutionContext,
    doc_labels: dict[str, pl.DataFrame],
    baseline_labels: dict[str, pl.DataFrame],
    qrels: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    """How each automatic labelling (eRAG, containment, semantic, LLM annotation) agrees with
    the human/provenance judgments on the same retrieved documents: raw agreement and Cohen's
    kappa per reader x retriever (unjudged documents count as non-relevant)."""
    from erag_dagster.meta.semantic import agreement

    rows = []
    if qrels.height:
        for partition in sorted(doc_labels):
            reader_key, retriever = _split_multi_key(partition)
            methods = {"eRAG": doc_labels[partition]}
            if partition in baseline_labels:
                for (method,), frame in baseline_labels[partition].group_by("method"):
                    if method != "provenance":  # the judgments themselves
                        methods[str(method)] = frame
            for method, frame in sorted(methods.items()):
                stats = agreement(frame.select("query_id", "doc_id", "label"), qrels)
                rows.append({"reader": reader_key, "retriever": retriever, "method": method,
                             **{k: stats[k] for k in ("n", "agreement", "kappa")}})  # fmt: skip
    table = pl.DataFrame(rows)
    return dg.Output(table, data_version=frame_version(table), metadata={"report": table_md(table)})
