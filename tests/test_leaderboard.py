"""Human-judgment leaderboard: hand-computed values, evaluate_run agreement, paired tests, DL19."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.metrics.human import evaluate_run
from erag_dagster.reports.leaderboard import (
    format_leaderboard,
    leaderboard,
    leaderboard_metrics,
)
from tests.stats_fixture import STATS, stats

HAND_METRICS = ["R@5", "P@5", "Success@1", "RR", "AP", "nDCG@5"]


@pytest.fixture()
def hand_case() -> tuple[pl.DataFrame, pl.DataFrame]:
    """q1 judges d1=2, d2=0, d3=1, d7=1 (d7 never retrieved); q2 judges d4=1; q3 is unjudged.

    Run: q1 → d1 d2 d3 d4 d5; q2 → d5 d6 d4; q3 → d1.
    """
    qrels = pl.DataFrame(
        {
            "query_id": ["q1", "q1", "q1", "q1", "q2"],
            "doc_id": ["d1", "d2", "d3", "d7", "d4"],
            "relevance": [2, 0, 1, 1, 1],
        }
    )
    run = pl.DataFrame(
        {
            "query_id": ["q1"] * 5 + ["q2"] * 3 + ["q3"],
            "doc_id": ["d1", "d2", "d3", "d4", "d5", "d5", "d6", "d4", "d1"],
            "rank": [1, 2, 3, 4, 5, 1, 2, 3, 1],
            "score": [0.9, 0.8, 0.7, 0.6, 0.5, 0.9, 0.8, 0.7, 0.5],
        }
    )
    return qrels, run


# nDCG@5 of q1: DCG = 2/log2(2) + 1/log2(4) = 2.5; ideal gains (2, 1, 1):
# IDCG = 2 + 1/log2(3) + 1/log2(4).
NDCG_Q1 = 2.5 / (2 + 1 / math.log2(3) + 0.5)

# By hand, relevance level 1: q1 relevant {d1, d3, d7}, retrieved at ranks 1 and 3;
# q2 relevant {d4} at rank 3.
HAND_LEVEL_1 = {
    "R@5": (2 / 3 + 1) / 2,
    "P@5": (2 / 5 + 1 / 5) / 2,  # P@5 divides by 5 even though q2 has 3 documents
    "Success@1": (1 + 0) / 2,
    "RR": (1 + 1 / 3) / 2,
    "AP": ((1 / 1 + 2 / 3) / 3 + (1 / 3) / 1) / 2,
    "nDCG@5": (NDCG_Q1 + 1 / math.log2(4)) / 2,
}
# Relevance level 2: only q1/d1 is relevant; q2 has no relevant document (0 on binary measures)
# but nDCG keeps the graded gains, so it does not change.
HAND_LEVEL_2 = {
    "R@5": (1 + 0) / 2,
    "P@5": (1 / 5 + 0) / 2,
    "Success@1": (1 + 0) / 2,
    "RR": (1 + 0) / 2,
    "AP": (1 + 0) / 2,
    "nDCG@5": HAND_LEVEL_1["nDCG@5"],
}


@pytest.mark.parametrize(("level", "expected"), [(1, HAND_LEVEL_1), (2, HAND_LEVEL_2)])
def test_hand_computed_values(hand_case, level: int, expected: dict[str, float]) -> None:
    qrels, run = hand_case
    board = leaderboard(qrels, {"system": run}, HAND_METRICS, STATS, relevance_level=level)
    row = board.row(0, named=True)
    assert row["retriever"] == "system"
    assert row["baseline"] is True
    assert row["queries"] == 2  # q1, q2
    assert row["dropped"] == 1  # q3 has no judgments: dropped as trec_eval does
    for metric, value in expected.items():
        assert row[metric] == pytest.approx(value, abs=1e-12), metric
        assert row[f"{metric}_low"] <= row[metric] <= row[f"{metric}_high"]
    assert leaderboard_metrics(board) == HAND_METRICS


def test_ties_follow_trec_eval(hand_case) -> None:
    """Equal scores: doc id descending decides, whatever the rank column says."""
    qrels, _ = hand_case
    tied = pl.DataFrame(
        {"query_id": ["q2", "q2"], "doc_id": ["d4", "d5"], "rank": [1, 2], "score": [1.0, 1.0]}
    )
    board = leaderboard(qrels, {"tied": tied}, ["RR", "Success@1"], STATS, relevance_level=1)
    # d5 > d4 as strings, so d5 is ranked first and the relevant d4 second
    assert board["RR"][0] == pytest.approx(0.5)
    assert board["Success@1"][0] == 0.0


def test_baseline_choice_and_errors(hand_case) -> None:
    qrels, run = hand_case
    worse = run.with_columns(
        score=pl.when(pl.col("doc_id") == "d1").then(0.0).otherwise(pl.col("score"))
    )
    board = leaderboard(
        qrels, {"a": run, "b": worse}, ["RR"], STATS, baseline="b", relevance_level=1
    )
    assert board["baseline"].to_list() == [False, True]
    # in "b" q1 reads d2 d3 d4 d5 d1: the first relevant document (d3) is at rank 2
    assert board["RR"].to_list() == pytest.approx([(1 + 1 / 3) / 2, (1 / 2 + 1 / 3) / 2])
    assert board["RR_diff"].to_list() == pytest.approx([0.25, 0.0])
    # two queries: exact sign-flip test over 2**2 assignments; only q1 differs, so every
    # assignment is as extreme as the observed one
    assert board["RR_p_perm"][0] == 1.0
    with pytest.raises(InputError, match="baseline 'c' is not one of the runs: a, b"):
        leaderboard(qrels, {"a": run, "b": worse}, ["RR"], STATS, baseline="c", relevance_level=1)
    with pytest.raises(InputError, match="at least one run"):
        leaderboard(qrels, {}, ["RR"], STATS, relevance_level=1)
    with pytest.raises(InputError, match="at least one metric"):
        leaderboard(qrels, {"a": run}, [], STATS, relevance_level=1)


def test_format_leaderboard(hand_case) -> None:
    qrels, run = hand_case
    board = leaderboard(qrels, {"base": run, "same": run}, ["RR"], STATS, relevance_level=1)
    text = format_leaderboard(board, STATS)
    assert text.columns == ["retriever", "queries", "RR"]
    assert text["retriever"].to_list() == ["base (baseline)", "same"]
    assert text["RR"][0] == "0.6667 [0.333, 1.000]"
    assert text["RR"][1] == "0.6667 [0.333, 1.000] +0.0000 p=1.000"


@pytest.fixture(scope="module")
def dl19(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    """TREC DL 2019 subset (graded 1–3) with a BM25 top-100 run, built in a temporary storage."""
    ds = load_dataset(f"beir:{shared_data / 'beir-msmarco-dl19-subset'}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ERAG_STORAGE", str(tmp_path_factory.mktemp("storage")))
        run = run_retriever(load_registry(), "bm25", ds.corpus, ds.queries, 100)
    return ds, run


DL19_METRICS = ["nDCG@10", "R@100", "P@10", "Success@10", "RR", "AP"]


def test_dl19_graded_matches_evaluate_run(dl19) -> None:
    ds, bm25 = dl19
    # A deliberately worse system: BM25's top 20 in reverse order.
    reversed_top = bm25.filter(pl.col("rank") <= 20).with_columns(score=pl.col("rank") * 1.0)
    runs = {"bm25": bm25, "bm25-copy": bm25.clone(), "reversed": reversed_top}
    board = leaderboard(ds.qrels, runs, DL19_METRICS, stats(resamples=500), relevance_level=2)
    assert board["retriever"].to_list() == ["bm25", "bm25-copy", "reversed"]
    for name, run in runs.items():
        expected = evaluate_run(ds.qrels, run, DL19_METRICS, relevance_level=2)
        row = board.filter(pl.col("retriever") == name).row(0, named=True)
        assert row["queries"] == len(expected.per_query) == 43
        assert row["dropped"] == 0
        for m in DL19_METRICS:
            assert row[m] == expected.aggregate[m]  # the same numbers, not just close
            assert row[f"{m}_low"] <= row[m] <= row[f"{m}_high"]
        assert row["nDCG@10_high"] - row["nDCG@10_low"] > 0.02
    copy = board.row(1, named=True)
    for m in DL19_METRICS:
        assert copy[f"{m}_diff"] == 0.0
        assert copy[f"{m}_p_perm"] == 1.0
        assert copy[f"{m}_p_t"] == 1.0
    worse = board.row(2, named=True)
    assert worse["nDCG@10_diff"] < -0.05
    assert worse["nDCG@10_p_perm"] < 0.01
    assert worse["RR_p_t"] < 0.05
    # level 2 really applies to the binary measures: level 1 counts "related" (1) documents too
    # (a superset of relevant documents, so P@10 can only grow)
    level_1 = evaluate_run(ds.qrels, bm25, ["P@10", "nDCG@10"], relevance_level=1).aggregate
    assert level_1["P@10"] > board["P@10"][0]
    assert level_1["nDCG@10"] == board["nDCG@10"][0]
