"""BM25 with pyserini's Lucene (Anserini): index a corpus, search a query set.

Indexing follows Anserini's BEIR "flat" regressions: ``title + " " + text`` is one field
(``contents``) of a ``JsonCollection``, default analyzer (Porter stemmer, English stopwords),
``DefaultLuceneDocumentGenerator``. Search uses BM25 with ``k1``/``b`` (Anserini defaults
0.9/0.4: :data:`DEFAULT_K1`, :data:`DEFAULT_B`). With these settings BEIR SciFact reproduces
Anserini's published nDCG@10 0.6789.

The index folder is named by a hash of the corpus content, so the same corpus is indexed once;
it is built in a temporary folder and renamed into place (atomic: a crash leaves no half index).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from erag_dagster.core.callbacks import Log
from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_frame
from erag_dagster.core.java import ensure_jvm
from erag_dagster.retrieval.runs import RUN_SCHEMA, rank_by_score

DEFAULT_K1 = 0.9
"""BM25 ``k1`` (term-frequency saturation) when a config gives none: Anserini's default."""
DEFAULT_B = 0.4
"""BM25 ``b`` (document-length normalisation, 0 to 1) when a config gives none: Anserini's."""


def corpus_fingerprint(corpus: pl.DataFrame) -> str:
    """sha256 (hex) over the corpus rows ``doc_id, title, text`` (as JSON lines) in their order."""
    return sha256_frame(corpus.select("doc_id", "title", "text"))


def lucene_contents(corpus: pl.DataFrame) -> pl.DataFrame:
    """``id, contents`` rows as indexed: contents = title + " " + text (title may be empty)."""
    return corpus.select(
        pl.col("doc_id").alias("id"),
        pl.concat_str([pl.col("title").fill_null(""), pl.col("text").fill_null("")], separator=" ")
        .str.strip_chars()
        .alias("contents"),
    )


def write_json_collection(corpus: pl.DataFrame, folder: Path, shards: int) -> None:
    """Write the corpus as ``shards`` JSONL files (Anserini parallelises per file)."""
    docs = lucene_contents(corpus)
    shards = max(1, min(shards, docs.height))
    size = -(-docs.height // shards)
    for i, chunk in enumerate(docs.iter_slices(size)):
        chunk.write_ndjson(folder / f"docs{i:02d}.jsonl")


def index_collection(input_dir: Path, index_dir: Path, threads: int) -> None:
    """Run Anserini's ``IndexCollection`` in process (the JVM started by :func:`ensure_jvm`)."""
    ensure_jvm()
    from jnius import autoclass

    args = [
        "-collection", "JsonCollection",
        "-generator", "DefaultLuceneDocumentGenerator",
        "-input", str(input_dir),
        "-index", str(index_dir),
        "-threads", str(threads),
        "-storeRaw",
        "-quiet",
    ]  # fmt: skip
    autoclass("io.anserini.index.IndexCollection").main(args)


@dataclass(frozen=True)
class BM25Index:
    """A built Lucene index and the parameters to search it with."""

    path: Path
    num_docs: int

    def search(
        self,
        queries: pl.DataFrame,
        k: int,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        threads: int = 2,
    ) -> pl.DataFrame:
        """Top-``k`` BM25 run for ``queries(query_id, question)``; see :func:`bm25_search`."""
        return bm25_search(self.path, queries, k=k, k1=k1, b=b, threads=threads)


def build_bm25_index(
    corpus: pl.DataFrame,
    root: Path,
    threads: int = 2,
    log: Log | None = None,
) -> BM25Index:
    """Index ``corpus`` under ``root/bm25-<corpus hash>`` unless that index already exists."""
    if corpus.height == 0:
        raise InputError("cannot build a BM25 index over an empty corpus")
    target = Path(root) / f"bm25-{corpus_fingerprint(corpus)[:16]}"
    if (target / "COMPLETE").is_file():
        if log:
            log(f"BM25 index for this corpus exists at {target}; reusing it")
        return BM25Index(target, corpus.height)
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".bm25-build-", dir=root))
    try:
        docs_dir, index_dir = work / "docs", work / "index"
        docs_dir.mkdir()
        write_json_collection(corpus, docs_dir, shards=threads)
        if log:
            log(f"indexing {corpus.height} documents with Lucene ({threads} threads)")
        index_collection(docs_dir, index_dir, threads)
        (index_dir / "COMPLETE").write_text(
            json.dumps({"num_docs": corpus.height}), encoding="utf-8"
        )
        if target.exists():  # a concurrent builder finished first: keep theirs
            return BM25Index(target, corpus.height)
        os.replace(index_dir, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return BM25Index(target, corpus.height)


MAX_QUERY_TERMS = 1024
"""Lucene's ``IndexSearcher.maxClauseCount``: a BM25 query is one clause per distinct analysed
term, and a query with more fails inside Java (``TooManyClauses``; in a batch only as
"queryCount = N is not equal to completedTaskCount = N-1")."""


def check_query_terms(qids: list[str], texts: list[str]) -> None:
    """Refuse (naming the query id and the limit) a query with more than
    :data:`MAX_QUERY_TERMS` distinct terms after Lucene's analysis (the searcher's default
    analyzer: English stopwords, Porter stemmer).

    Only a query of more than :data:`MAX_QUERY_TERMS` characters can have that many terms (a
    term is at least one character), so only such rare queries are analysed. Needs the JVM.
    """
    long = [
        (qid, text) for qid, text in zip(qids, texts, strict=True) if len(text) > MAX_QUERY_TERMS
    ]
    if not long:
        return
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    analyzer = Analyzer(get_lucene_analyzer())
    for qid, text in long:
        terms = len(set(analyzer.analyze(text)))
        if terms > MAX_QUERY_TERMS:
            raise InputError(
                f"query {qid!r}: {terms} distinct terms ({len(text)} characters), more than the "
                f"{MAX_QUERY_TERMS} a Lucene BM25 query can hold; shorten the question"
            )


def bm25_search(
    index_path: Path,
    queries: pl.DataFrame,
    k: int,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
    threads: int = 2,
) -> pl.DataFrame:
    """Search every query; return a run ``(query_id, doc_id, rank, score)`` with ``k`` hits max.

    A query whose analysed text is empty (e.g. only stopwords) gets no rows; callers that need
    every query present should check. Ranks follow trec_eval's order (see ``runs``). A query
    with more distinct terms than Lucene accepts is refused first (:func:`check_query_terms`).
    """
    if k < 1:
        raise InputError(f"cut-off k must be >= 1, got {k}")
    ensure_jvm()
    from pyserini.search.lucene import LuceneSearcher

    qids = queries.get_column("query_id").to_list()
    texts = queries.get_column("question").to_list()
    check_query_terms(qids, texts)
    searcher = LuceneSearcher(str(index_path))
    try:
        searcher.set_bm25(k1, b)
        hits = searcher.batch_search(texts, qids, k=k, threads=threads)
        out_q: list[str] = []
        out_d: list[str] = []
        out_s: list[float] = []
        for qid in qids:
            for hit in hits.get(qid, []):
                out_q.append(qid)
                out_d.append(hit.docid)
                out_s.append(hit.score)
    finally:
        searcher.close()
    if not out_q:
        return pl.DataFrame(schema=RUN_SCHEMA)
    return rank_by_score(pl.DataFrame({"query_id": out_q, "doc_id": out_d, "score": out_s}))
