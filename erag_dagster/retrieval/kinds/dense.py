"""``kind: dense``: faiss over an encoder's vectors (:mod:`..dense`, :mod:`..ann`).

Its keys configure the encoder (:func:`~erag_dagster.retrieval.encoder.encoder_from_config`,
whose defaults are :class:`~erag_dagster.retrieval.encoder.TextEncoder`'s signature) and the
index (``index``: flat, exact, when absent; :func:`~erag_dagster.retrieval.ann.parse_index`),
so this kind has no defaults of its own. faiss and the encoder's libraries are imported only
when a run starts, so the registry can read this kind without them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import polars as pl

from erag_dagster.core.callbacks import Log
from erag_dagster.core.errors import InputError
from erag_dagster.retrieval.kinds.base import (
    DTYPE,
    MAX_LENGTH,
    RetrievalTiming,
    RetrieverKind,
    Rule,
    RunRequest,
    index_root,
    is_text,
)

if TYPE_CHECKING:
    from erag_dagster.retrieval.ann import IndexSpec
    from erag_dagster.retrieval.dense import DenseIndex
    from erag_dagster.retrieval.encoder import TextEncoder


def dense_index_for(
    corpus: pl.DataFrame, encoder: TextEncoder, log: Log | None = None
) -> DenseIndex:
    """The corpus's flat index for ``encoder`` under :func:`~.base.index_root` (built unless
    it exists)."""
    from erag_dagster.retrieval.dense import build_dense_index

    return build_dense_index(corpus, encoder, index_root(), log=log)


def run_dense(request: RunRequest) -> pl.DataFrame:
    """Top-``k`` run over the flat index, or over the approximate index the config names
    (then with its recall against the flat one: :func:`approximate_search`)."""
    from erag_dagster.retrieval.ann import parse_index
    from erag_dagster.retrieval.encoder import encoder_from_config

    encoder = encoder_from_config(dict(request.config))
    started = time.perf_counter()
    dense = dense_index_for(request.corpus, encoder, log=request.log)
    request.timing.index_seconds += time.perf_counter() - started
    spec = parse_index(request.config.get("index"))
    if spec.approximate:
        return approximate_search(
            dense, spec, encoder, request.queries, request.k, request.log, request.timing
        )
    started = time.perf_counter()
    run = dense.search(encoder, request.queries, request.k, log=request.log)
    request.timing.search_seconds += time.perf_counter() - started
    return run


def approximate_search(
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
    from erag_dagster.retrieval.ann import approximate_index, recall_against_exact
    from erag_dagster.retrieval.dense import search_vectors

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


def _index_ok(value: Any) -> bool:
    from erag_dagster.retrieval.ann import parse_index  # light: faiss is imported only to build

    try:
        parse_index(value)
    except InputError:
        return False
    return True


KIND = RetrieverKind(
    name="dense",
    keys={
        "encoder": Rule(is_text, "a model name or path"),
        "dtype": DTYPE,
        "max_length": MAX_LENGTH,
        "pooling": Rule(lambda v: v in ("mean", "cls"), "mean or cls"),
        "normalize": Rule(lambda v: isinstance(v, bool), "true or false"),
        "query_prefix": Rule(lambda v: isinstance(v, str), "a string such as 'query: '"),
        "passage_prefix": Rule(lambda v: isinstance(v, str), "a string such as 'passage: '"),
        "index": Rule(
            _index_ok,
            "flat, {type: hnsw, m, ef_construction, ef_search} or "
            "{type: ivfpq, nlist, m, nbits, nprobe} (integers >= 1)",
        ),
    },
    run=run_dense,
)
