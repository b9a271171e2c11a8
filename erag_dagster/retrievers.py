"""Run a registry retriever over a dataset: build (or reuse) its index, search, return a run.

This is the one code path the CLI and the Dagster assets share. It sits above the registry
(:mod:`erag_dagster.registry`) because a registry entry drives it: a fused or reranked
retriever names other entries, a ``reader:<name>`` rerank scorer names a registry reader
(:func:`scorer_from_config`, :func:`default_scorer`); the engines it calls
(:mod:`erag_dagster.retrieval`) know nothing of the registry. Indexes live under
``<storage root>/indexes`` and are named by the corpus content (and encoder), so they are built
once per corpus and reused by every later call.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.callbacks import Log
from erag_dagster.errors import InputError
from erag_dagster.paths import storage_dir
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.registry import READER_SCORER, Entry, Registry, load_registry
from erag_dagster.retrieval.ann import (
    IndexSpec,
    approximate_index,
    parse_index,
    recall_against_exact,
)
from erag_dagster.retrieval.bm25 import BM25Index, build_bm25_index
from erag_dagster.retrieval.dense import DenseIndex, build_dense_index, search_vectors
from erag_dagster.retrieval.encoder import TextEncoder, encoder_from_config
from erag_dagster.retrieval.hybrid import reciprocal_rank_fusion
from erag_dagster.retrieval.rerank import CrossEncoderScorer, ReaderScorer, Scorer, rerank
from erag_dagster.retrieval.run_file import load_run_file, load_run_value


def index_root() -> Path:
    """``<storage root>/indexes``."""
    return storage_dir("indexes")


@dataclass
class RetrievalTiming:
    """Seconds spent building the index and searching (index time 0 when reused), and what a
    retriever reports about its run (``details``: run-file coverage, rerank cost, recall of an
    approximate index), shown as the run's metadata."""

    index_seconds: float = 0.0
    search_seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


def bm25_index_for(corpus: pl.DataFrame, threads: int = 2, log: Log | None = None) -> BM25Index:
    return build_bm25_index(corpus, index_root(), threads=threads, log=log)


def dense_index_for(
    corpus: pl.DataFrame, encoder: TextEncoder, log: Log | None = None
) -> DenseIndex:
    return build_dense_index(corpus, encoder, index_root(), log=log)


def run_retriever(
    registry: Registry,
    retriever: str,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    k: int,
    log: Log | None = None,
    timing: RetrievalTiming | None = None,
    threads: int = 2,
    question_subset: bool = False,
    asset_runs: Mapping[str, object] | None = None,
) -> pl.DataFrame:
    """Top-``k`` run of the registry retriever ``retriever`` (name or partition key).

    ``question_subset``: ``queries`` are a subset of the dataset's questions (a run file's
    queries outside them are then dropped, not refused: :mod:`~erag_dagster.retrieval.run_file`).
    ``asset_runs``: the values of the upstream assets ``kind: asset`` retrievers read, by
    retriever name (the Dagster asset hands them over; outside Dagster there are none, and such
    a retriever is refused with one line).
    """
    if k < 1:
        raise InputError(f"cut-off k must be >= 1, got {k}")
    entry: Entry = registry.retriever(retriever)
    cfg = entry.config
    timing = timing if timing is not None else RetrievalTiming()
    kind = cfg["kind"]
    if kind == "bm25":
        started = time.perf_counter()
        index = bm25_index_for(corpus, threads=threads, log=log)
        timing.index_seconds += time.perf_counter() - started
        started = time.perf_counter()
        run = index.search(
            queries, k, k1=float(cfg.get("k1", 0.9)), b=float(cfg.get("b", 0.4)), threads=threads
        )
        timing.search_seconds += time.perf_counter() - started
        return run
    if kind == "dense":
        encoder = encoder_from_config(cfg)
        started = time.perf_counter()
        dense = dense_index_for(corpus, encoder, log=log)
        timing.index_seconds += time.perf_counter() - started
        spec = parse_index(cfg.get("index"))
        if not spec.approximate:
            started = time.perf_counter()
            run = dense.search(encoder, queries, k, log=log)
            timing.search_seconds += time.perf_counter() - started
            return run
        return _approximate_search(dense, spec, encoder, queries, k, log, timing)
    if kind == "run_file":
        started = time.perf_counter()
        loaded = load_run_file(
            cfg["path"], cfg["format"], cfg["sha256"], queries, corpus, k, question_subset
        )
        timing.search_seconds += time.perf_counter() - started
        timing.details.update(loaded.metadata())
        return loaded.run
    if kind == "asset":
        return _asset_run(entry, corpus, queries, k, timing, question_subset, asset_runs or {})
    if kind == "rerank":
        return _rerank(
            registry, cfg, corpus, queries, k, log, timing, threads, question_subset, asset_runs
        )
    depth = max(int(cfg.get("depth", 100)), k)
    parts = [
        run_retriever(
            registry, p, corpus, queries, depth, log, timing, threads, question_subset, asset_runs
        )
        for p in cfg["fuse"]
    ]
    started = time.perf_counter()
    fused = reciprocal_rank_fusion(parts, k=k, k_rrf=float(cfg.get("rrf_k", 60)))
    timing.search_seconds += time.perf_counter() - started
    return fused


def _rerank(
    registry: Registry,
    cfg: dict[str, Any],
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    k: int,
    log: Log | None,
    timing: RetrievalTiming,
    threads: int,
    question_subset: bool,
    asset_runs: Mapping[str, object] | None = None,
) -> pl.DataFrame:
    """A ``kind: rerank`` run: the first stage's top ``top_n``, reranked by the scorer, cut to
    ``min(k of the config, k)``; its cost goes to ``timing.details`` (model load excluded)."""
    top_n = int(cfg["top_n"])
    first_timing = RetrievalTiming()
    first = run_retriever(
        registry, cfg["first_stage"], corpus, queries, top_n, log, first_timing, threads,
        question_subset, asset_runs,
    )  # fmt: skip
    timing.index_seconds += first_timing.index_seconds
    result = rerank(
        first, queries, corpus, scorer_from_config(registry, cfg), top_n=top_n,
        k=min(int(cfg["k"]), k, top_n), log=log,
    )  # fmt: skip
    timing.search_seconds += first_timing.search_seconds + result.seconds
    timing.details.update(
        {
            "first_stage": registry.retriever(cfg["first_stage"]).partition_key,
            "first_stage_search_seconds": round(first_timing.search_seconds, 3),
            "rerank_pairs": result.pairs,
            "rerank_seconds_per_query": result.seconds_per_query,
            "rerank_docs_per_second": result.docs_per_second,
        }
    )
    return result.run


def _asset_run(
    entry: Entry,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    k: int,
    timing: RetrievalTiming,
    question_subset: bool,
    asset_runs: Mapping[str, object],
) -> pl.DataFrame:
    """A ``kind: asset`` run: the upstream asset's value, validated as a run file is
    (:func:`~erag_dagster.retrieval.run_file.load_run_value`); its coverage to ``timing``."""
    source = "asset " + "/".join(entry.config["asset_key"])
    if entry.name not in asset_runs:
        raise InputError(
            f"retriever {entry.name!r} reads the Dagster {source}: it runs in the Dagster "
            "project that has that asset (the eRAG component), not from the command line"
        )
    started = time.perf_counter()
    loaded = load_run_value(asset_runs[entry.name], source, queries, corpus, k, question_subset)
    timing.search_seconds += time.perf_counter() - started
    timing.details.update(loaded.metadata())
    return loaded.run


def _approximate_search(
    dense: DenseIndex,
    spec: IndexSpec,
    encoder: TextEncoder,
    queries: pl.DataFrame,
    k: int,
    log: Log | None,
    timing: RetrievalTiming,
) -> pl.DataFrame:
    """The run of an approximate index; the exact (flat) run of the same query vectors is
    searched too, to report recall@k against it and both search times in ``timing.details``."""
    started = time.perf_counter()
    index, build_seconds = approximate_index(dense.index, dense.path, spec)
    timing.index_seconds += time.perf_counter() - started
    started = time.perf_counter()
    vectors = encoder.encode_queries(queries.get_column("question").to_list(), progress=log)
    encode_seconds = time.perf_counter() - started
    query_ids = queries.get_column("query_id").to_list()
    started = time.perf_counter()
    run = search_vectors(index, dense.doc_ids, query_ids, vectors, k)
    approx_seconds = time.perf_counter() - started
    started = time.perf_counter()
    exact = search_vectors(dense.index, dense.doc_ids, query_ids, vectors, k)
    flat_seconds = time.perf_counter() - started
    timing.search_seconds += encode_seconds + approx_seconds
    timing.details.update(
        {
            "index": {"type": spec.type, **spec.params},
            "index_build_seconds": round(build_seconds, 3),
            f"recall_vs_flat@{k}": recall_against_exact(run, exact),
            "approximate_search_seconds": approx_seconds,
            "flat_search_seconds": flat_seconds,
        }
    )
    return run


def default_scorer(
    registry: Registry | None = None,
    reader: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ReaderScorer:
    """:class:`ReaderScorer` over a registry reader.

    ``reader`` is a name or partition key (the registry's first reader when None); ``registry``
    defaults to the packaged one; ``overrides`` replace keys of the reader's config (e.g.
    ``{"dtype": "float32", "device": "cpu"}``).
    """
    registry = registry or load_registry()
    entry = registry.reader(reader) if reader else next(iter(registry.readers.values()))
    return ReaderScorer(reader_from_config(entry.name, {**entry.config, **(overrides or {})}))


def scorer_from_config(registry: Registry, config: Mapping[str, Any]) -> Scorer:
    """The scorer of a registry ``kind: rerank`` config: ``scorer: reader:<name>`` gives a
    :class:`ReaderScorer` over that reader (the rerank's ``dtype``/``device``/``batch_size``/
    ``threads`` override the reader's), any other value a :class:`CrossEncoderScorer` over that
    folder (``dtype`` default float32, ``max_length`` default 512)."""
    scorer = str(config["scorer"])
    if scorer.startswith(READER_SCORER):
        overrides = {
            key: config[source]
            for key, source in (
                ("dtype", "dtype"), ("device", "device"), ("batch_size", "batch_size"),
                ("num_threads", "threads"), ("num_threads", "num_threads"),
            )
            if source in config
        }  # fmt: skip
        return default_scorer(registry, scorer.removeprefix(READER_SCORER), overrides)
    return CrossEncoderScorer(
        scorer,
        device=str(config.get("device", "auto")),
        dtype=str(config.get("dtype", "float32")),
        batch_size=int(config.get("batch_size", 32)),
        max_length=int(config.get("max_length") or 512),
    )
