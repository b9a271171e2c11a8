"""Semantic-similarity labels with the packaged encoder, and their agreement with human qrels."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import cohen_kappa_score

from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.meta.semantic import (
    DEFAULT_THRESHOLDS,
    agreement,
    bertscore,
    semantic_labels,
)
from erag_dagster.retrieval.encoder import TextEncoder


@pytest.fixture(scope="module")
def encoder() -> TextEncoder:
    return TextEncoder(dtype="float32", batch_size=32, num_threads=1)


def _labels(pairs: list[tuple[str, str, float]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "query_id": [q for q, _, _ in pairs],
            "doc_id": [d for _, d, _ in pairs],
            "label": [x for _, _, x in pairs],
        }
    )


def test_kappa_by_hand_and_with_sklearn() -> None:
    qrels = pl.DataFrame(
        {
            "query_id": ["a", "a", "a", "b", "b"],
            "doc_id": ["1", "2", "3", "1", "4"],
            "relevance": [2, 1, 0, 1, 3],
        }
    )
    # ours vs humans (level 1; b/5 and b/6 are unjudged -> human 0):
    # a1 1/1, a2 0/1, a3 1/0, b1 1/1, b4 0/1, b5 0/0, b6 0/0
    labels = _labels(
        [("a", "1", 1.0), ("a", "2", 0.0), ("a", "3", 1.0), ("b", "1", 1.0), ("b", "4", 0.0),
         ("b", "5", 0.0), ("b", "6", 0.0)]
    )  # fmt: skip
    got = agreement(labels, qrels, relevance_level=1)
    # p_o = 4/7; ours positive 3/7, humans 4/7: p_e = 3/7*4/7 + 4/7*3/7 = 24/49
    # kappa = (28/49 - 24/49) / (1 - 24/49) = 4/25
    assert got["n"] == 7
    assert got["agreement"] == pytest.approx(4 / 7)
    assert got["kappa"] == pytest.approx(4 / 25, abs=1e-12)
    assert (got["both"], got["only_labels"], got["only_humans"], got["neither"]) == (2, 1, 2, 2)
    ours = [1, 0, 1, 1, 0, 0, 0]
    assert got["kappa"] == pytest.approx(cohen_kappa_score(ours, [1, 1, 0, 1, 1, 0, 0]))
    # relevance level 2: humans positive only a1 and b4; p_o = 4/7, p_e = 6/49 + 20/49
    high = agreement(labels, qrels, relevance_level=2)
    assert high["kappa"] == pytest.approx(2 / 23, abs=1e-12)
    assert high["kappa"] == pytest.approx(cohen_kappa_score(ours, [1, 0, 0, 0, 1, 0, 0]))
    assert high["human_positive_rate"] == pytest.approx(2 / 7)


def test_identical_labels_give_kappa_one() -> None:
    qrels = pl.DataFrame(
        {"query_id": ["q", "q", "q"], "doc_id": ["x", "y", "z"], "relevance": [1, 0, 1]}
    )
    same = _labels([("q", "x", 1.0), ("q", "y", 0.0), ("q", "z", 1.0), ("q", "w", 0.0)])
    got = agreement(same, qrels, relevance_level=1)
    assert got["kappa"] == 1.0
    assert got["agreement"] == 1.0
    # both sides constant and equal: kappa is undefined (p_e = 1) -> nan, agreement 1
    constant = agreement(_labels([("q", "x", 1.0), ("q", "z", 1.0)]), qrels, relevance_level=1)
    assert math.isnan(constant["kappa"])
    assert constant["agreement"] == 1.0
    with pytest.raises(InputError, match="at least one labelled"):
        agreement(same.head(0), qrels, relevance_level=1)


def test_bertscore_formula_on_texts(encoder) -> None:
    """Identical texts score 1; recall of a short reference inside a passage is high."""
    passage = "The Denver Broncos won Super Bowl 50 against the Carolina Panthers."
    scores = bertscore(
        [passage, "Denver Broncos", "Denver Broncos", ""],
        [passage, passage, "Photosynthesis happens in chloroplasts.", passage],
        encoder,
    )
    assert scores.columns == ["precision", "recall", "f1"]
    p, r, f = (scores[c].to_numpy() for c in scores.columns)
    assert p[0] == pytest.approx(1.0, abs=1e-5) and r[0] == pytest.approx(1.0, abs=1e-5)
    assert r[1] > 0.7  # every answer token has a close (contextual) match in the passage
    assert r[1] > p[1]  # ... while most passage tokens are not in the answer
    assert r[1] - r[2] > 0.2
    assert f[1] == pytest.approx(2 * p[1] * r[1] / (p[1] + r[1]))
    assert (p[3], r[3], f[3]) == (0.0, 0.0, 0.0)  # empty reference


def test_answer_labels_take_the_max_over_answers(encoder) -> None:
    corpus = pl.DataFrame(
        {
            "doc_id": ["gold", "other"],
            "title": ["Super Bowl 50", "Cell biology"],
            "text": [
                "The Denver Broncos defeated the Carolina Panthers 24-10 to win Super Bowl 50.",
                "Mitochondria produce most of the cell's supply of ATP.",
            ],
        }
    )
    queries = pl.DataFrame(
        {
            "query_id": ["q"],
            "question": ["Which team won Super Bowl 50?"],
            "answers": [["Broncos", "the Denver Broncos", "zebra crossing"]],
        }
    )
    run = pl.DataFrame(
        {"query_id": ["q", "q"], "doc_id": ["other", "gold"], "rank": [1, 2], "score": [2.0, 1.0]}
    )
    for method in ("cosine", "bertscore"):
        got = semantic_labels(run, corpus, queries, encoder, method=method, against="answer")
        assert got.columns == ["query_id", "doc_id", "rank", "similarity", "label"]
        assert got["doc_id"].to_list() == ["other", "gold"]  # run order kept
        sims = dict(zip(got["doc_id"], got["similarity"], strict=True))
        assert sims["gold"] > sims["other"] + 0.2, method
        assert got["label"].to_list() == [0.0, 1.0], method
        # the max over answers: the best single answer gives the same similarity
        single = queries.with_columns(answers=pl.Series([["the Denver Broncos"]]))
        alone = semantic_labels(run, corpus, single, encoder, method=method, against="answer")
        best = max(sims["gold"], alone["similarity"][1])
        assert sims["gold"] == pytest.approx(best, abs=1e-6)
    # a custom threshold decides the label
    strict = semantic_labels(run, corpus, queries, encoder, method="cosine", threshold=0.99)
    assert strict["label"].to_list() == [0.0, 0.0]
    no_answers = queries.with_columns(answers=pl.Series([[]], dtype=pl.List(pl.String)))
    with pytest.raises(InputError, match="no gold answers"):
        semantic_labels(run, corpus, no_answers, encoder)
    with pytest.raises(InputError, match="unknown similarity method 'idf'"):
        semantic_labels(run, corpus, queries, encoder, method="idf")  # type: ignore[arg-type]
    unknown = r"doc_id 'other' \(query 'q'; 1 such rows\), which is not in the corpus"
    with pytest.raises(InputError, match=unknown):
        semantic_labels(run, corpus.head(1), queries, encoder)


@pytest.fixture(scope="module")
def scifact_top10(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    """SciFact test: BM25 top-10 of the first 20 queries (temporary storage root)."""
    ds = load_dataset(f"beir:{shared_data / 'scifact' / 'beir'}?max_questions=20")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ERAG_STORAGE", str(tmp_path_factory.mktemp("storage")))
        run = run_retriever(load_registry(), "bm25", ds.corpus, ds.queries, 10)
    return ds, run


@pytest.mark.slow
@pytest.mark.parametrize("method", ["cosine", "bertscore"])
def test_scifact_relevant_documents_are_more_similar(scifact_top10, encoder, method) -> None:
    ds, run = scifact_top10
    labels = semantic_labels(run, ds.corpus, ds.queries, encoder, method=method, against="question")
    assert labels.height == run.height == 200
    assert labels["query_id"].n_unique() == 20
    judged = labels.join(
        ds.qrels.select("query_id", "doc_id", "relevance"), on=["query_id", "doc_id"], how="left"
    ).with_columns(relevant=pl.col("relevance").fill_null(0) >= 1)
    rel = judged.filter(pl.col("relevant"))["similarity"].to_numpy()
    non = judged.filter(~pl.col("relevant"))["similarity"].to_numpy()
    assert rel.size >= 15 and non.size >= 150
    assert rel.mean() - non.mean() > 0.1
    assert np.all((labels["similarity"].to_numpy() > -1) & (labels["similarity"].to_numpy() <= 1))
    threshold = DEFAULT_THRESHOLDS[(method, "question")]
    assert labels["label"].to_list() == (labels["similarity"] >= threshold).cast(float).to_list()
    stats = agreement(labels, ds.qrels, relevance_level=1)
    assert stats["n"] == 200
    assert stats["kappa"] > 0.2  # clearly better than chance agreement with the humans


def test_pairs_scored_once_per_process_and_per_encoder(encoder: TextEncoder) -> None:
    """The reader x retriever partitions of a run share their (question, document) pairs: a
    second labelling of the same pairs takes every similarity from this process's cache (and
    gives the same labels); another encoder identity scores them anew."""
    from erag_dagster.meta import semantic

    ds = load_dataset("sample?max_questions=2")
    docs = ds.corpus.get_column("doc_id").to_list()[:3]
    run = pl.DataFrame(
        {
            "query_id": [q for q in ds.queries["query_id"] for _ in docs],
            "doc_id": docs * ds.queries.height,
            "rank": [r for _ in range(ds.queries.height) for r in (1, 2, 3)],
        }
    )
    semantic._SIMILARITIES.clear()
    first = semantic_labels(run, ds.corpus, ds.queries, encoder, method="bertscore")
    cached = len(semantic._SIMILARITIES)
    assert cached >= run.height  # one entry per (gold answer, passage) pair
    again = semantic_labels(run, ds.corpus, ds.queries, encoder, method="bertscore")
    assert again.equals(first) and len(semantic._SIMILARITIES) == cached
    shorter = TextEncoder(dtype="float32", batch_size=32, num_threads=1, max_length=64)
    semantic_labels(run, ds.corpus, ds.queries, shorter, method="bertscore")
    assert len(semantic._SIMILARITIES) == 2 * cached
