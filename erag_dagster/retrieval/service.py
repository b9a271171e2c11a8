"""Run a registry retriever over a dataset: build (or reuse) its index, search, return a run.

This is the one code path the CLI and the Dagster assets share. Indexes live under
``<storage root>/indexes`` and are named by the corpus content (and encoder), so they are built
once per corpus and reused by every later call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.callbacks import Log
from erag_dagster.errors import InputError
from erag_dagster.paths import storage_dir
from erag_dagster.registry import Entry, Registry
from erag_dagster.retrieval.bm25 import BM25Index, build_bm25_index
from erag_dagster.retrieval.dense import DenseIndex, build_dense_index
from erag_dagster.retrieval.encoder import TextEncoder
from erag_dagster.retrieval.hybrid import reciprocal_rank_fusion


def index_root() -> Path:
    """``<storage root>/indexes``."""
    return storage_dir("indexes")


def encoder_from_config(config: dict[str, Any], device: str | None = None) -> TextEncoder:
    """A :class:`TextEncoder` from a dense retriever's config."""
    return TextEncoder(
        model=config.get("encoder"),
        device=device or config.get("device", "auto"),
        dtype=config.get("dtype", "auto"),
        batch_size=int(config.get("batch_size", 64)),
        max_length=config.get("max_length"),
    )


@dataclass
class RetrievalTiming:
    """Seconds spent building the index and searching (index time 0 when reused)."""

    index_seconds: float = 0.0
    search_seconds: float = 0.0


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
) -> pl.DataFrame:
    """Top-``k`` run of the registry retriever ``retriever`` (name or partition key)."""
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
        started = time.perf_counter()
        run = dense.search(encoder, queries, k, log=log)
        timing.search_seconds += time.perf_counter() - started
        return run
    depth = max(int(cfg.get("depth", 100)), k)
    parts = [
        run_retriever(registry, p, corpus, queries, depth, log, timing, threads)
        for p in cfg["fuse"]
    ]
    started = time.perf_counter()
    fused = reciprocal_rank_fusion(parts, k=k, k_rrf=float(cfg.get("rrf_k", 60)))
    timing.search_seconds += time.perf_counter() - started
    return fused
