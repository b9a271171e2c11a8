"""Second-stage reranking with the real packaged reader (SmolLM2-135M) as the relevance scorer.

The reader comes from the packaged registry's reader config (set ``ERAG_TORCH_THREADS=1`` to
keep to one CPU thread), run in float32 on the CPU: in bf16 the 135M model's P("yes") moves by
up to ~0.03 with what shares its padded batch, as much as its margin between an answering and an
off-topic passage (float32 results do not depend on the batch). Each case is a question whose
answer one passage plainly states, among off-topic passages.
"""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest

from erag_dagster.core.errors import InputError
from erag_dagster.evaluation.retrievers import default_scorer
from erag_dagster.readers.prompts import reader_passage
from erag_dagster.retrieval.rerank import (
    LIFT_SCHEMA,
    ReaderScorer,
    RerankResult,
    lift_report,
    rerank,
    separate_ties,
)
from erag_dagster.retrieval.runs import rank_by_score
from tests.stats_fixture import STATS

CORPUS = pl.DataFrame(
    {
        "doc_id": ["banana", "everest", "ocean", "photo", "wall", "sky"],
        "title": ["", "", "", "", "Berlin Wall", ""],
        "text": [
            "Bananas are rich in potassium and grow in tropical climates.",
            "Mount Everest is the highest mountain on Earth.",
            "The Pacific Ocean is the largest and deepest ocean.",
            "Photosynthesis converts light energy into chemical energy.",
            "The Berlin Wall fell in 1989, after which Germany was reunified in 1990.",
            "On a clear day the sky is blue because air scatters blue light more than red light.",
        ],
    }
)
QUERIES = pl.DataFrame(
    {
        "query_id": ["wall", "sky"],
        "question": [
            "In what year did the Berlin Wall fall?",
            "What color is the sky on a clear day?",
        ],
        "answers": [["1989"], ["blue"]],
    }
)
# First stage: the answering passage is at rank 4 (wall) and rank 2 (sky).
FIRST_STAGE = rank_by_score(
    pl.DataFrame(
        {
            "query_id": ["wall"] * 5 + ["sky"] * 3,
            "doc_id": ["banana", "everest", "ocean", "wall", "photo", "ocean", "sky", "banana"],
            "score": [9.0, 8.0, 7.0, 6.0, 5.0, 3.0, 2.0, 1.0],
        }
    )
)
ANSWERING = {"wall": "wall", "sky": "sky"}
QRELS = pl.DataFrame({"query_id": ["wall", "sky"], "doc_id": ["wall", "sky"], "relevance": [1, 1]})


@pytest.fixture(scope="module")
def scorer() -> ReaderScorer:
    """The packaged registry's default reader in float32, P("yes") as the score."""
    scorer = default_scorer(overrides={"dtype": "float32", "device": "cpu"})
    scorer.load()
    return scorer


def _docs(run: pl.DataFrame, qid: str) -> list[str]:
    return run.filter(pl.col("query_id") == qid).sort("rank")["doc_id"].to_list()


def test_answering_passage_comes_first_and_order_follows_the_scorer(scorer) -> None:
    result = rerank(FIRST_STAGE, QUERIES, CORPUS, scorer, top_n=5, k=3)
    assert isinstance(result, RerankResult)
    run = result.run
    assert run.columns == ["query_id", "doc_id", "rank", "score"]
    # The scorer's own P("yes") for every candidate, asked in the order rerank asks (query id,
    # then first-stage rank).
    candidates = FIRST_STAGE.sort("query_id", "rank")
    questions = dict(QUERIES.select("query_id", "question").rows())
    passages = {d: reader_passage(t, x) for d, t, x in CORPUS.rows()}
    probs = scorer(
        [(questions[q], passages[d]) for q, d in candidates.select("query_id", "doc_id").rows()]
    )
    assert all(0.0 <= p <= 1.0 for p in probs)
    scored = candidates.with_columns(prob=pl.Series(probs))
    for qid, answer in ANSWERING.items():
        got = run.filter(pl.col("query_id") == qid).sort("rank")
        assert got["doc_id"][0] == answer, qid
        assert got["rank"].to_list() == [1, 2, 3]
        mine = scored.filter(pl.col("query_id") == qid)  # in first-stage order
        order = np.argsort(-mine["prob"].to_numpy(), kind="stable")  # stable: ties by rank
        assert got["doc_id"].to_list() == [mine["doc_id"][int(i)] for i in order[:3]]
        expected = [mine["prob"][int(i)] for i in order[:3]]
        assert got["score"].to_list() == pytest.approx(expected, rel=1e-12, abs=1e-15)
    # the written order is the order trec_eval will read
    assert rank_by_score(run).equals(run.sort("query_id", "rank"))
    assert result.queries == 2
    assert result.pairs == 8
    assert result.seconds_per_query > 0
    assert result.docs_per_second == pytest.approx(8 / result.seconds)


def test_top_n_truncates_before_scoring(scorer) -> None:
    """With top_n=3 the Berlin Wall passage (first-stage rank 4) never reaches the reranker."""
    result = rerank(FIRST_STAGE, QUERIES, CORPUS, scorer, top_n=3, k=3)
    assert sorted(_docs(result.run, "wall")) == ["banana", "everest", "ocean"]
    assert result.pairs == 6  # 3 + 3 candidates
    assert _docs(result.run, "sky")[0] == "sky"


def test_lift_report_before_after(scorer) -> None:
    result = rerank(FIRST_STAGE, QUERIES, CORPUS, scorer, top_n=5, k=3)
    report = lift_report(
        QRELS, FIRST_STAGE, result, ("nDCG@3", "RR", "R@3"), STATS, relevance_level=1
    )
    assert report.schema == pl.Schema(LIFT_SCHEMA)
    rows = {r["metric"]: r for r in report.iter_rows(named=True)}
    # before, cut to the reranker's depth 3: "wall" misses its passage (rank 4), "sky" has it at 2
    assert rows["R@3"]["before"] == pytest.approx(0.5)
    assert rows["RR"]["before"] == pytest.approx((0 + 1 / 2) / 2)
    # after: both answering passages at rank 1
    assert rows["RR"]["after"] == pytest.approx(1.0)
    assert rows["nDCG@3"]["after"] == pytest.approx(1.0)
    for row in rows.values():
        assert row["difference"] == pytest.approx(row["after"] - row["before"])
        assert row["queries"] == 2 and row["depth"] == 3
        assert row["added_seconds_per_query"] == result.seconds_per_query
        assert row["docs_per_second"] == result.docs_per_second
        assert 0.0 < row["p_perm"] <= 1.0
    # a plain run as "after": no cost columns
    plain = lift_report(QRELS, FIRST_STAGE, result.run, ("RR",), STATS, relevance_level=1)
    assert plain["added_seconds_per_query"][0] is None
    assert plain["after"][0] == pytest.approx(1.0)


def test_ties_keep_first_stage_order_and_survive_trec_eval() -> None:
    """A scorer with equal scores: first-stage order wins, scores separated by ulps."""

    def constant(pairs):
        return [0.5] * len(pairs)

    result = rerank(FIRST_STAGE, QUERIES, CORPUS, constant, top_n=5, k=4)
    assert _docs(result.run, "wall") == ["banana", "everest", "ocean", "wall"]
    scores = result.run.filter(pl.col("query_id") == "wall")["score"].to_list()
    assert all(a > b for a, b in itertools.pairwise(scores))
    assert scores == pytest.approx([0.5] * 4, abs=1e-15)
    assert rank_by_score(result.run).equals(result.run.sort("query_id", "rank"))
    assert separate_ties(np.array([0.0, 0.0]), np.array([0, 1]))[1] < 0.0


def test_rerank_errors() -> None:
    def constant(pairs):
        return [0.5] * len(pairs)

    with pytest.raises(InputError, match="k=5 is larger than top_n=3"):
        rerank(FIRST_STAGE, QUERIES, CORPUS, constant, top_n=3, k=5)
    unknown = r"doc_id 'photo' \(query '[^']+'; \d+ such rows\), which is not in the corpus"
    with pytest.raises(InputError, match=unknown):
        rerank(FIRST_STAGE, QUERIES, CORPUS.filter(pl.col("doc_id") != "photo"), constant)
    with pytest.raises(InputError, match="the scorer returned 1 scores for 8 pairs"):
        rerank(FIRST_STAGE, QUERIES, CORPUS, lambda pairs: [0.1], top_n=5, k=3)
    empty = rerank(FIRST_STAGE.head(0), QUERIES, CORPUS, constant)
    assert empty.run.height == 0 and empty.queries == 0


def test_cross_encoder_path_runs_on_local_weights() -> None:
    """The cross-encoder code path on real local weights: the packaged MiniLM encoder loaded as
    a sequence classifier (its 2-way head is freshly initialised, so the scores mean nothing;
    this checks tokenising pairs, batching and the softmax, not relevance)."""
    from erag_dagster.retrieval.encoder import packaged_encoder_path
    from erag_dagster.retrieval.rerank import CrossEncoderScorer

    scorer = CrossEncoderScorer(str(packaged_encoder_path()), device="cpu", batch_size=2)
    pairs = [(QUERIES["question"][0], text) for text in CORPUS["text"].to_list()]
    scores = scorer(pairs)
    assert len(scores) == len(pairs)
    assert all(0.0 <= s <= 1.0 for s in scores)
    scorer.batch_size = 6  # float32: batching does not change the scores
    assert scorer(pairs) == pytest.approx(scores, abs=1e-5)
    result = rerank(FIRST_STAGE, QUERIES, CORPUS, scorer, top_n=5, k=2)
    assert result.run.height == 4
    with pytest.raises(InputError, match="cross-encoder '/nonexistent/model' not found locally"):
        CrossEncoderScorer("/nonexistent/model", device="cpu").load()
