"""Retrieval with the real pyserini and faiss: BM25 reproduction, dense exactness, fusion, runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.retrieval.bm25 import build_bm25_index
from erag_dagster.retrieval.dense import build_dense_index, passage_texts
from erag_dagster.retrieval.encoder import TextEncoder
from erag_dagster.retrieval.hybrid import reciprocal_rank_fusion
from erag_dagster.retrieval.runs import read_trec_run, write_trec_run


@pytest.fixture(scope="module")
def scifact(shared_data: Path):
    return load_dataset(f"beir:{shared_data / 'scifact' / 'beir'}")


def test_bm25_index_is_reused_for_the_same_corpus(small_corpus, scifact, tmp_path: Path) -> None:
    """The second build of the same corpus reuses the index folder. (Anserini's SciFact BM25
    figures are checked in reproductions/scifact.yaml by tests/test_reproductions.py.)"""
    index = build_bm25_index(small_corpus, tmp_path, threads=2)
    assert index.search(scifact.queries.head(3), k=5).height == 15
    assert build_bm25_index(small_corpus, tmp_path).path == index.path


@pytest.fixture(scope="module")
def small_corpus(scifact) -> pl.DataFrame:
    return scifact.corpus.head(300)


@pytest.fixture(scope="module")
def encoder() -> TextEncoder:
    return TextEncoder(dtype="float32", batch_size=32)


@pytest.mark.slow
def test_dense_search_is_exact_cosine(small_corpus, encoder, tmp_path: Path, scifact) -> None:
    """faiss IndexFlatIP on normalised vectors = brute-force cosine ranking with numpy."""
    index = build_dense_index(small_corpus, encoder, tmp_path)
    queries = scifact.queries.head(12)
    run = index.search(encoder, queries, k=5)
    docs = encoder.encode(passage_texts(small_corpus))
    qv = encoder.encode(queries.get_column("question").to_list())
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    sims = qv @ docs.T
    ids = small_corpus.get_column("doc_id").to_list()
    for i, qid in enumerate(queries.get_column("query_id").to_list()):
        expected = [ids[j] for j in np.argsort(-sims[i], kind="stable")[:5]]
        got = run.filter(pl.col("query_id") == qid).sort("rank")
        assert got.get_column("rank").to_list() == [1, 2, 3, 4, 5]
        assert np.allclose(
            got.get_column("score").to_numpy(), np.sort(sims[i])[::-1][:5], atol=1e-5
        )
        assert set(got.get_column("doc_id").to_list()[:3]) == set(expected[:3])
    # reopening the stored index gives identical results (no pickling: faiss's own format)
    again = build_dense_index(small_corpus, encoder, tmp_path).search(encoder, queries, k=5)
    assert again.equals(run)


def test_reciprocal_rank_fusion_by_hand() -> None:
    a = pl.DataFrame(
        {
            "query_id": ["q"] * 3,
            "doc_id": ["d1", "d2", "d3"],
            "rank": [1, 2, 3],
            "score": [3.0, 2, 1],
        }
    )
    b = pl.DataFrame(
        {"query_id": ["q"] * 2, "doc_id": ["d3", "d4"], "rank": [1, 3], "score": [0.9, 0.8]}
    )
    fused = reciprocal_rank_fusion([a, b], k=3, k_rrf=60)
    scores = dict(zip(fused["doc_id"], fused["score"], strict=True))
    assert fused.get_column("doc_id").to_list() == ["d3", "d1", "d2"]
    assert scores["d3"] == pytest.approx(1 / 63 + 1 / 61)
    assert scores["d1"] == pytest.approx(1 / 61)
    assert fused.get_column("rank").to_list() == [1, 2, 3]


def test_trec_run_round_trip_and_trec_eval_order(tmp_path: Path) -> None:
    run = pl.DataFrame(
        {
            "query_id": ["1", "1", "1", "2"],
            "doc_id": ["a", "b", "c", "a"],
            "rank": [1, 2, 3, 1],
            "score": [2.5, 2.5, 1.0, 0.125],
        }
    )
    path = write_trec_run(run, tmp_path / "run.trec", tag="t")
    back = read_trec_run(path)
    # trec_eval breaks the 2.5 tie by docid descending: b before a
    assert back.filter(pl.col("query_id") == "1").get_column("doc_id").to_list() == ["b", "a", "c"]
    assert back.get_column("score").to_list() == [2.5, 2.5, 1.0, 0.125]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1 Q0 a 1 2.0\n", "run.trec:1: expected 6 fields"),
        ("1 Q0 a 1 x t\n", "run.trec:1: score 'x' is not a number"),
        ("1 Q0 a 1 1 t\n1 Q0 a 2 0.5 t\n", "document 'a' appears twice for query '1'"),
        ("\n", "the run file is empty"),
    ],
)
def test_bad_run_files_name_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "run.trec"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        read_trec_run(path)


def test_registry_partition_keys_follow_content(tmp_path: Path) -> None:
    base = load_registry()
    text = Path(base.path).read_text()
    edited = tmp_path / "registry.yaml"
    edited.write_text(text.replace("k1: 0.9", "k1: 1.2"))
    changed = load_registry(edited)
    assert changed.retriever("bm25").partition_key != base.retriever("bm25").partition_key
    assert changed.retriever("dense").partition_key == base.retriever("dense").partition_key
    # a hybrid's key covers the configs it fuses
    assert changed.retriever("hybrid").partition_key != base.retriever("hybrid").partition_key
    # operational keys do not change results, so they do not change the partition
    edited.write_text(text.replace("batch_size: 64", "batch_size: 8"))
    assert load_registry(edited).retriever("dense").partition_key == (
        base.retriever("dense").partition_key
    )
    assert base.retriever(base.retriever("bm25").partition_key).name == "bm25"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("retrievers: {x: {kind: nope}}\nreaders: {r: {model: m}}\n", "kind 'nope'"),
        ("retrievers: {h: {kind: hybrid, fuse: [a, b]}}\nreaders: {r: {}}\n", "fuses 'a'"),
        ("retrievers: [1]\n", "'retrievers' must be a non-empty mapping"),
        ("retrievers: {a: {kind: bm25}\n", "invalid YAML"),
    ],
)
def test_bad_registry(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "registry.yaml"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        load_registry(path)


def test_unknown_retriever_lists_known(scifact) -> None:
    with pytest.raises(InputError, match="unknown retriever 'nope'; known: bm25, dense, hybrid"):
        run_retriever(load_registry(), "nope", scifact.corpus, scifact.queries, 10)
