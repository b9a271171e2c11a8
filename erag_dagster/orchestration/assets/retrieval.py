"""Indexes (BM25, dense) and retrieval runs, one partition per registry retriever config."""

import time
from collections.abc import Iterator

import dagster as dg
import polars as pl

from erag_dagster.config.registry import Registry
from erag_dagster.core.credentials import mask_in
from erag_dagster.evaluation import checks
from erag_dagster.evaluation.retrievers import (
    RetrievalTiming,
    bm25_index_for,
    dense_index_for,
    encoder_from_config,
)
from erag_dagster.orchestration.assets import checks as asset_checks
from erag_dagster.orchestration.assets.adapter import adapt
from erag_dagster.orchestration.assets.automation import RECOMPUTE_WHEN_STALE
from erag_dagster.orchestration.assets.common import (
    CODE_VERSION,
    dataset_of,
    frame_version,
    retriever_partitions,
    session_of,
    table_md,
)
from erag_dagster.orchestration.resources import EvalSettings
from erag_dagster.orchestration.resources.keys import UNPREFIXED, ResourceKeys
from erag_dagster.retrieval.ann import approximate_index, parse_index
from erag_dagster.retrieval.rerank import LIFT_SCHEMA, lift_report


def build_indexes(keys: ResourceKeys = UNPREFIXED) -> list[dg.AssetsDefinition]:
    """``bm25_index`` and ``dense_index`` (resources under ``keys``)."""
    return [
        dg.asset(
            name=body.__name__,
            group_name="indexes",
            code_version=CODE_VERSION,
            automation_condition=RECOMPUTE_WHEN_STALE,
            io_manager_key=keys.io_manager,
        )(adapt(body, keys))
        for body in (bm25_index, dense_index)
    ]


def bm25_index(context: dg.AssetExecutionContext, corpus: pl.DataFrame) -> dg.Output[dict]:
    """Lucene index of the corpus (title + text as one field), under the storage dir."""
    started = time.perf_counter()
    index = bm25_index_for(corpus, log=context.log.info)
    seconds = time.perf_counter() - started
    value = {"path": str(index.path), "num_docs": index.num_docs}
    return dg.Output(
        value,
        data_version=dg.DataVersion(index.path.name),
        metadata={"path": str(index.path), "documents": index.num_docs, "seconds": seconds},
    )


def dense_index(
    context: dg.AssetExecutionContext, settings: EvalSettings, corpus: pl.DataFrame
) -> dg.Output[dict]:
    """Exact faiss index (IndexFlatIP, normalised vectors) for every dense retriever config,
    and the approximate index (HNSW, IVF-PQ) of a config that names one."""
    registry = settings.registry(dataset_of(context))
    built: dict[str, dict] = {}
    for entry in registry.retrievers.values():
        if entry.config["kind"] != "dense":
            continue
        encoder = encoder_from_config(entry.config)
        started = time.perf_counter()
        index = dense_index_for(corpus, encoder, log=context.log.info)
        built[entry.name] = {
            "path": str(index.path),
            "num_docs": len(index.doc_ids),
            "seconds": round(time.perf_counter() - started, 3),
            **encoder.identity(),
        }
        spec = parse_index(entry.config.get("index"))
        if spec.approximate:  # built here once; the run reports its recall against flat
            _, seconds = approximate_index(index.index, index.path, spec)
            built[entry.name]["approximate"] = spec.file_name()
            built[entry.name]["approximate_build_seconds"] = round(seconds, 3)
    names = [v["path"].rsplit("/", 1)[-1] + (f"/{v['approximate']}" if "approximate" in v else "")
             for v in built.values()]  # fmt: skip
    version = "-".join(sorted(names)) or "none"
    return dg.Output(
        built,
        data_version=dg.DataVersion(version),
        metadata={"indexes": dg.MetadataValue.json(built)},
    )


def _retrieval_run(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    **upstream: object,
) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
    """Top-k run ``(query_id, doc_id, rank, score)`` of one retriever config (the partition).
    ``upstream``: the values of the user's assets ``kind: asset`` retrievers read, by input
    name (:func:`asset_run_inputs`)."""
    registry = settings.registry(dataset_of(context))
    params = settings.resolve(dataset_of(context))
    k = params.k
    entry = registry.retriever(context.partition_key)
    timing = RetrievalTiming()
    session = session_of(context, settings, corpus=corpus, queries=queries)
    run = session.retrieve(  # the retrieve step the API and the gate call
        entry.name, timing=timing,
        asset_runs={
            e.name: upstream[asset_input_name(e.config["asset_key"])]
            for e in registry.retrievers.values() if e.config["kind"] == "asset"
        },
    )  # fmt: skip
    exhaustive = checks.scores_every_document(
        {e.name: e.config for e in registry.retrievers.values()}, entry.name, k
    )
    depth = checks.check_retrieval_run(
        run, queries.get_column("query_id").to_list(), k, corpus.height, exhaustive
    )
    output = dg.Output(
        run,
        data_version=frame_version(run),
        metadata={
            "retriever": entry.name,
            "config": dg.MetadataValue.json(mask_in(entry.config)),
            "k": k,
            "queries": run.get_column("query_id").n_unique(),
            "rows": run.height,
            "search_seconds": round(timing.search_seconds, 3),
            **timing.details,
        },
    )
    yield from asset_checks.checked(output, [asset_checks.result(asset_checks.RUN_DEPTH, depth)])


def asset_input_name(asset_key: list[str]) -> str:
    """The input of ``retrieval_run`` that receives the user's asset ``asset_key``."""
    return "upstream__" + "__".join(asset_key)


def asset_run_inputs(registry: Registry) -> dict[str, dg.AssetIn]:
    """One input of ``retrieval_run`` per asset the registry's ``kind: asset`` retrievers read
    (the eRAG component: an asset of the user's project), so lineage runs from that asset into
    the runs, the labels and the reports. Unpartitioned, such an asset is an input of every
    partition of ``retrieval_run``: Dagster loads it for each (materialise it first)."""
    keys = {
        tuple(e.config["asset_key"]) for e in registry.retrievers.values()
        if e.config["kind"] == "asset"
    }  # fmt: skip
    return {asset_input_name(list(k)): dg.AssetIn(key=dg.AssetKey(list(k))) for k in sorted(keys)}


def build_retrieval_run(registry: Registry, keys: ResourceKeys = UNPREFIXED) -> dg.AssetsDefinition:
    """``retrieval_run`` partitioned by the registry's retriever configs; the assets its
    ``kind: asset`` retrievers read are its inputs (:func:`asset_run_inputs`)."""
    partitions = retriever_partitions(registry)
    return dg.asset(
        name="retrieval_run",
        group_name="retrieval",
        partitions_def=partitions,
        code_version=CODE_VERSION,
        automation_condition=RECOMPUTE_WHEN_STALE,
        deps=[dg.AssetKey("bm25_index"), dg.AssetKey("dense_index")],
        ins=asset_run_inputs(registry) or None,
        check_specs=asset_checks.run_check_specs("retrieval_run", partitions),
        io_manager_key=keys.io_manager,
    )(adapt(_retrieval_run, keys))


def _rerank_lift(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    qrels: pl.DataFrame,
    retrieval_run: dict[str, pl.DataFrame],
) -> dg.Output[pl.DataFrame]:
    """Lift of one rerank retriever over its first stage on the human judgments
    (:func:`~erag_dagster.retrieval.rerank.lift_report`: before/after at the same depth, paired
    randomisation and t-test p-values, bootstrap CI of the difference) with the added seconds
    per query its run measured (model load excluded)."""
    registry = settings.registry(dataset_of(context))
    params = settings.resolve(dataset_of(context))
    entry = registry.retriever(context.partition_key)
    first = registry.retriever(entry.config["first_stage"]).partition_key
    cost = _latest_run_metadata(context, entry.partition_key)
    meta = {"retriever": entry.name, "first_stage": first, "metrics": list(params.human_metrics)}
    if qrels.height == 0:
        context.log.warning("the dataset has no judgments: no lift report")
        return dg.Output(pl.DataFrame(schema=LIFT_SCHEMA), metadata=meta)
    report = lift_report(
        qrels, retrieval_run[first], retrieval_run[entry.partition_key], params.human_metrics,
        params.statistics, relevance_level=params.relevance_level,
    ).with_columns(
        added_seconds_per_query=pl.lit(cost.get("rerank_seconds_per_query"), pl.Float64),
        docs_per_second=pl.lit(cost.get("rerank_docs_per_second"), pl.Float64),
    )  # fmt: skip
    return dg.Output(
        report, data_version=frame_version(report), metadata={"report": table_md(report), **meta}
    )


def _latest_run_metadata(context: dg.AssetExecutionContext, partition: str) -> dict:
    """The metadata values of ``retrieval_run[partition]``'s latest materialisation."""
    run_key = context.asset_key_for_input("retrieval_run")
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=run_key, asset_partitions=[partition]),
        limit=1,
    ).records
    if not records or records[0].asset_materialization is None:
        return {}
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def build_rerank_lift(
    registry: Registry, keys: ResourceKeys = UNPREFIXED
) -> dg.AssetsDefinition | None:
    """``rerank_lift``, one partition per ``kind: rerank`` retriever, reading that retriever's
    run and its first stage's (None when the registry has no rerank retriever)."""
    reranks = [e for e in registry.retrievers.values() if e.config["kind"] == "rerank"]
    if not reranks:
        return None
    upstream: dict[str, set[str]] = {}
    for entry in reranks:
        first = registry.retriever(entry.config["first_stage"]).partition_key
        for key in (entry.partition_key, first):
            upstream.setdefault(key, set()).add(entry.partition_key)
    return dg.asset(
        name="rerank_lift",
        group_name="reports",
        partitions_def=dg.StaticPartitionsDefinition([e.partition_key for e in reranks]),
        code_version=CODE_VERSION,
        automation_condition=RECOMPUTE_WHEN_STALE,
        ins={
            "retrieval_run": dg.AssetIn(partition_mapping=dg.StaticPartitionMapping(upstream)),
        },
        io_manager_key=keys.io_manager,
    )(adapt(_rerank_lift, keys))
