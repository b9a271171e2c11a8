"""Dense retrieval: encode the corpus once, exact inner-product search with faiss.

``faiss.IndexFlatIP`` over L2-normalised vectors = exact cosine-similarity search (no
approximation; over unnormalised vectors, exact inner-product search). Approximate indexes built
from the same vectors live in :mod:`erag_dagster.retrieval.ann`. The index is saved with
``faiss.write_index`` (faiss's own binary format, no pickling) beside a parquet file of the doc
ids in row order, under a folder named by the corpus hash and the encoder identity; written to a
temporary folder and renamed into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import polars as pl

from erag_dagster.core.callbacks import Log
from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_text
from erag_dagster.retrieval.bm25 import corpus_fingerprint
from erag_dagster.retrieval.encoder import TextEncoder
from erag_dagster.retrieval.runs import RUN_SCHEMA, rank_by_score


def passage_texts(corpus: pl.DataFrame) -> list[str]:
    """What the encoder sees for each document: ``title + " " + text`` (title may be empty)."""
    return (
        corpus.select(
            pl.concat_str(
                [pl.col("title").fill_null(""), pl.col("text").fill_null("")], separator=" "
            ).str.strip_chars()
        )
        .to_series()
        .to_list()
    )


@dataclass(frozen=True)
class DenseIndex:
    """A faiss flat inner-product index and the doc id of each row."""

    path: Path
    index: faiss.Index
    doc_ids: list[str]

    def search(
        self, encoder: TextEncoder, queries: pl.DataFrame, k: int, log: Log | None = None
    ) -> pl.DataFrame:
        """Top-``k`` run for ``queries(query_id, question)`` by inner product (cosine
        similarity for a normalising encoder)."""
        if k < 1:
            raise InputError(f"cut-off k must be >= 1, got {k}")
        vectors = encoder.encode_queries(queries.get_column("question").to_list(), progress=log)
        return search_vectors(self.index, self.doc_ids, queries["query_id"].to_list(), vectors, k)


def search_vectors(
    index: faiss.Index, doc_ids: list[str], query_ids: list[str], vectors: np.ndarray, k: int
) -> pl.DataFrame:
    """Search ``index`` (exact or approximate) with ``vectors`` (one row per query id); returns
    a ranked run (an approximate index may return fewer than ``k`` rows: ``-1`` rows dropped)."""
    k_eff = min(k, index.ntotal)
    scores, rows = index.search(np.ascontiguousarray(vectors, dtype=np.float32), k_eff)
    ids = np.asarray(doc_ids, dtype=object)
    valid = rows >= 0
    frame = pl.DataFrame(
        {
            "query_id": np.repeat(np.asarray(query_ids, dtype=object), k_eff)[valid.ravel()],
            "doc_id": ids[rows[valid]],
            "score": scores[valid].astype(np.float64),
        },
        schema={"query_id": pl.String, "doc_id": pl.String, "score": pl.Float64},
    )
    return rank_by_score(frame) if frame.height else pl.DataFrame(schema=RUN_SCHEMA)


def dense_index_key(corpus: pl.DataFrame, encoder: TextEncoder) -> str:
    """Folder name: hash of the corpus content and the encoder identity."""
    # json.dumps' default spacing, not canonical_json: the folder names of existing indexes.
    blob = json.dumps(
        {"corpus": corpus_fingerprint(corpus), "encoder": encoder.identity()}, sort_keys=True
    )
    return "dense-" + sha256_text(blob)[:16]


def build_dense_index(
    corpus: pl.DataFrame, encoder: TextEncoder, root: Path, log: Log | None = None
) -> DenseIndex:
    """Encode ``corpus`` and build (or reuse) the exact faiss index under ``root``."""
    if corpus.height == 0:
        raise InputError("cannot build a dense index over an empty corpus")
    target = Path(root) / dense_index_key(corpus, encoder)
    if (target / "COMPLETE").is_file():
        if log:
            log(f"dense index for this corpus and encoder exists at {target}; reusing it")
        return load_dense_index(target)
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".dense-build-", dir=root))
    try:
        started = time.perf_counter()
        if log:
            log(f"encoding {corpus.height} documents with {encoder.model_name}")
        vectors = encoder.encode_passages(passage_texts(corpus), progress=log)
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        faiss.write_index(index, str(work / "index.faiss"))
        corpus.select("doc_id").write_parquet(work / "doc_ids.parquet")
        meta = {"num_docs": corpus.height, "dim": int(vectors.shape[1]), **encoder.identity()}
        meta["build_seconds"] = round(time.perf_counter() - started, 3)
        (work / "COMPLETE").write_text(json.dumps(meta), encoding="utf-8")
        if not target.exists():
            os.replace(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return load_dense_index(target)


def load_dense_index(path: Path) -> DenseIndex:
    """Read an index written by :func:`build_dense_index`."""
    if not (path / "COMPLETE").is_file():
        raise InputError(f"{path}: not a complete dense index")
    index = faiss.read_index(str(path / "index.faiss"))
    doc_ids = pl.read_parquet(path / "doc_ids.parquet").get_column("doc_id").to_list()
    return DenseIndex(path, index, doc_ids)
