"""``kind: bm25``: pyserini Lucene over title + text as one field (:mod:`..bm25`).

Keys ``k1`` (>= 0) and ``b`` (0 to 1), each defaulting to the engine's constant. The index is
built once per corpus under :func:`~.base.index_root` and reused.
"""

from __future__ import annotations

import time

import polars as pl

from erag_dagster.core.callbacks import Log
from erag_dagster.retrieval.bm25 import DEFAULT_B, DEFAULT_K1, BM25Index, build_bm25_index
from erag_dagster.retrieval.kinds.base import NUMBER, RetrieverKind, Rule, RunRequest, index_root


def bm25_index_for(corpus: pl.DataFrame, threads: int = 2, log: Log | None = None) -> BM25Index:
    """The corpus's BM25 index under :func:`~.base.index_root` (built unless it exists)."""
    return build_bm25_index(corpus, index_root(), threads=threads, log=log)


def run_bm25(request: RunRequest) -> pl.DataFrame:
    """Top-``k`` BM25 run; index time (0 when reused) and search time go to the timing."""
    started = time.perf_counter()
    index = bm25_index_for(request.corpus, threads=request.threads, log=request.log)
    request.timing.index_seconds += time.perf_counter() - started
    started = time.perf_counter()
    run = index.search(
        request.queries,
        request.k,
        k1=float(request.setting("k1")),
        b=float(request.setting("b")),
        threads=request.threads,
    )
    request.timing.search_seconds += time.perf_counter() - started
    return run


KIND = RetrieverKind(
    name="bm25",
    keys={"k1": NUMBER, "b": Rule(lambda v: NUMBER.check(v) and v <= 1, "a number from 0 to 1")},
    defaults={"k1": DEFAULT_K1, "b": DEFAULT_B},
    run=run_bm25,
)
