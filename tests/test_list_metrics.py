"""Metric names, label-list metrics and their edge-case policy, checked against real pytrec_eval."""

from __future__ import annotations

import math
import random

import numpy as np
import polars as pl
import pytest
import pytrec_eval

from erag_dagster.core.errors import InputError
from erag_dagster.metrics.list_metrics import (
    DEFAULT_NDCG_IDEAL,
    ListMetricReport,
    average_precision,
    evaluate_labels,
    labels_from_frame,
    ndcg_at,
    precision_at,
    recall_at,
    reciprocal_rank,
    success_at,
)
from erag_dagster.metrics.names import MetricName, parse_metric_name, parse_metric_names

# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "family", "cutoff", "rel", "measure"),
    [
        ("P@5", "P", 5, None, "P_5"),
        ("P(rel=2)@10", "P", 10, 2, "P_10"),
        ("Success@5", "Success", 5, None, "success_5"),
        ("RR", "RR", None, None, "recip_rank"),
        ("RR@10", "RR", 10, None, "recip_rank"),
        ("AP", "AP", None, None, "map"),
        ("AP@100", "AP", 100, None, "map_cut_100"),
        ("nDCG@10", "nDCG", 10, None, "ndcg_cut_10"),
        ("nDCG", "nDCG", None, None, "ndcg"),
        ("R@10", "R", 10, None, "recall_10"),
        ("P_5", "P", 5, None, "P_5"),
        ("success_5", "Success", 5, None, "success_5"),
        ("recip_rank", "RR", None, None, "recip_rank"),
        ("map", "AP", None, None, "map"),
        ("map_cut_10", "AP", 10, None, "map_cut_10"),
        ("ndcg_cut_10", "nDCG", 10, None, "ndcg_cut_10"),
        ("ndcg", "nDCG", None, None, "ndcg"),
        ("recall_10", "R", 10, None, "recall_10"),
        ("bpref", "bpref", None, None, "bpref"),
        ("relative_P_5", "relative_P", 5, None, "relative_P_5"),
        ("iprec_at_recall_0.10", "iprec_at_recall", None, None, "iprec_at_recall_0.10"),
    ],
)
def test_parse_metric_name(
    name: str, family: str, cutoff: int | None, rel: int | None, measure: str
) -> None:
    parsed = parse_metric_name(name)
    # a trec_eval spelling of nDCG means trec_eval's computation: the list ideal
    ideal = "list" if family == "nDCG" and name.startswith("ndcg") else None
    assert parsed == MetricName(name, family, cutoff, rel, measure, ideal)
    with pytest.raises(AttributeError):
        parsed.cutoff = 3  # type: ignore[misc]  # frozen


def test_parsed_properties() -> None:
    assert parse_metric_name("RR@10").truncate_at == 10
    assert parse_metric_name("P@10").truncate_at is None
    assert parse_metric_name("num_rel_ret").aggregation == "sum"
    assert parse_metric_name("gm_map").aggregation == "geometric"
    assert parse_metric_name("nDCG@10").aggregation == "mean"
    assert parse_metric_name("nDCG@10").is_list_metric
    assert not parse_metric_name("bpref").is_list_metric


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("Judged@10", "unknown metric name"),
        ("ndcg@10", "unknown metric name"),
        ("P", "needs a cut-off"),
        ("R", "needs a cut-off"),
        ("Success", "needs a cut-off"),
        ("P@0", "cut-off must be between 1"),
        ("P_0", "cut-off must be between 1"),
        ("P_05", "without leading zeros"),
        ("P.5", "unknown metric name"),
        ("iprec_at_recall_0.1", "prints it as iprec_at_recall_0.10"),
        ("nDCG(rel=2)@10", "takes no relevance level"),
        ("P(rel=0)@10", "must be between 1 and 2147483647"),
        ("runid", "unknown metric name"),
        ("success", "unknown metric name"),
        ("P@5\n", "unknown metric name"),
        ("P_5\n", "unknown metric name"),
    ],
)
def test_unknown_names_list_the_grammar(name: str, why: str) -> None:
    with pytest.raises(InputError, match=why) as err:
        parse_metric_name(name)
    assert "P@k, Success@k, RR, RR@k, AP, AP@k, nDCG, nDCG@k, R@k" in str(err.value)
    assert "\n" not in str(err.value)


def test_parse_metric_names_rejects_a_bare_string_and_dedupes() -> None:
    with pytest.raises(InputError, match="list of names"):
        parse_metric_names("P@5")
    with pytest.raises(InputError, match="no metrics requested"):
        parse_metric_names([])
    assert [m.name for m in parse_metric_names(["P@5", "AP", "P@5"])] == ["P@5", "AP"]


# --- binary lists: exactly pytrec_eval --------------------------------------------------------

LIST_METRICS = ["P@1", "P@3", "P@10", "Success@1", "Success@3", "RR", "AP", "AP@3",
                "nDCG(ideal=list)", "nDCG(ideal=list)@3", "nDCG(ideal=list)@10", "R@1", "R@5",
                "ndcg", "ndcg_cut_5", "map_cut_2", "recall_3", "recip_rank", "P_5",
                "success_10"]  # fmt: skip


def _trec_eval_on_labels(labels: list[int], measures: set[str]) -> dict[str, float]:
    """pytrec_eval with the list's labels as qrels and scores descending by rank."""
    qrels = {"q": {f"doc{i}": label for i, label in enumerate(labels)}}
    run = {"q": {f"doc{i}": 100.0 - i for i in range(len(labels))}}
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)["q"]


def _random_binary_lists(seed: int, count: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    return {
        f"q{i}": [float(rng.random() < 0.35) for _ in range(rng.randint(1, 15))]
        for i in range(count)
    }


def test_binary_labels_equal_pytrec_eval_exactly() -> None:
    lists = _random_binary_lists(seed=7, count=200)
    report = evaluate_labels(lists, LIST_METRICS)
    for qid, labels in lists.items():
        parsed = [parse_metric_name(m) for m in LIST_METRICS if not m.startswith("RR@")]
        expected = _trec_eval_on_labels(
            [int(x) for x in labels], {m.pytrec_measure for m in parsed}
        )
        for metric in parsed:
            assert report.per_query[qid][metric.name] == expected[metric.pytrec_measure], (
                qid,
                metric.name,
            )


def test_plain_ndcg_is_the_max_ideal_not_trec_eval() -> None:
    """Plain nDCG@k takes DEFAULT_NDCG_IDEAL ("max"): on a binary list with fewer than k ones it
    is below trec_eval's ndcg_cut_k, which nDCG(ideal=list)@k and ndcg_cut_k still give."""
    names = ["nDCG@3", "nDCG(ideal=max)@3", "nDCG(ideal=list)@3", "ndcg_cut_3", "nDCG", "ndcg"]
    values = evaluate_labels({"q": [1, 0, 0]}, names).per_query["q"]
    trec = _trec_eval_on_labels([1, 0, 0], {"ndcg_cut_3", "ndcg"})
    assert DEFAULT_NDCG_IDEAL == "max"
    assert (
        values["nDCG@3"]
        == values["nDCG(ideal=max)@3"]
        == pytest.approx(1 / (1 + 1 / math.log2(3) + 1 / 2), abs=1e-15)
    )
    assert values["nDCG(ideal=list)@3"] == values["ndcg_cut_3"] == trec["ndcg_cut_3"] == 1.0
    assert values["ndcg"] == trec["ndcg"] == 1.0
    assert values["nDCG"] == values["nDCG@3"]  # no cut-off: the list's 3 positions


def test_rr_at_k_is_recip_rank_on_the_top_k() -> None:
    lists = _random_binary_lists(seed=11, count=100)
    report = evaluate_labels(lists, ["RR@1", "RR@3", "RR@10"])
    for qid, labels in lists.items():
        for k in (1, 3, 10):
            top = [int(x) for x in labels[:k]]
            expected = _trec_eval_on_labels(top, {"recip_rank"})["recip_rank"] if any(top) else 0
            assert report.per_query[qid][f"RR@{k}"] == expected


# --- graded kernels reduce to trec_eval on binary lists -----------------------------------------


def test_graded_kernels_reduce_to_pytrec_eval_on_binary_lists() -> None:
    rng = random.Random(2024)
    cutoffs = (1, 2, 3, 5, 10, 20)
    measures = {"recip_rank", "map", "ndcg"} | {
        f"{m}_{k}" for m in ("P", "success", "map_cut", "ndcg_cut", "recall") for k in cutoffs
    }
    checked = 0
    for _ in range(300):
        labels = [int(rng.random() < 0.4) for _ in range(rng.randint(1, 16))]
        expected = _trec_eval_on_labels(labels, measures)
        floats = [float(x) for x in labels]
        approx = {"rel": 1e-12, "abs": 1e-12}
        assert reciprocal_rank(floats) == pytest.approx(expected["recip_rank"], **approx)
        assert average_precision(floats) == pytest.approx(expected["map"], **approx)
        assert ndcg_at(floats, ideal="list") == pytest.approx(expected["ndcg"], **approx)
        for k in cutoffs:
            assert precision_at(floats, k) == pytest.approx(expected[f"P_{k}"], **approx)
            assert success_at(floats, k) == pytest.approx(expected[f"success_{k}"], **approx)
            assert average_precision(floats, k) == pytest.approx(expected[f"map_cut_{k}"], **approx)
            assert ndcg_at(floats, k, "list") == pytest.approx(expected[f"ndcg_cut_{k}"], **approx)
            assert recall_at(floats, k) == pytest.approx(expected[f"recall_{k}"], **approx)
        checked += 1
    assert checked == 300


def test_graded_ndcg_equals_trec_eval_on_scaled_integer_gains() -> None:
    """nDCG uses linear gains, so labels k/10 scored as integer grades k give the same
    list-ideal nDCG."""
    rng = random.Random(5)
    for _ in range(100):
        grades = [rng.randint(0, 10) for _ in range(rng.randint(1, 12))]
        expected = _trec_eval_on_labels(grades, {"ndcg", "ndcg_cut_3"})
        labels = [g / 10 for g in grades]
        tol = {"rel": 1e-12, "abs": 1e-12}
        assert ndcg_at(labels, None, "list") == pytest.approx(expected["ndcg"], **tol)
        assert ndcg_at(labels, 3, "list") == pytest.approx(expected["ndcg_cut_3"], **tol)


def test_graded_hand_computed() -> None:
    labels = {"q": [0.5, 0.0, 1.0]}
    names = ["P@2", "P@5", "Success@2", "RR", "RR@1", "AP", "AP@2", "nDCG(ideal=list)",
             "nDCG(ideal=list)@2", "nDCG", "nDCG@2", "R@2"]  # fmt: skip
    values = evaluate_labels(labels, names).per_query["q"]
    idcg = 1.0 + 0.5 / math.log2(3)  # the list's labels sorted: 1.0, 0.5, 0.0
    max2 = 1.0 + 1.0 / math.log2(3)  # every label 1 (the default ideal, "max")
    expected = {
        "P@2": 0.25,
        "P@5": 1.5 / 5,
        "Success@2": 0.5,
        "RR": 0.5,  # max(0.5/1, 0/2, 1/3)
        "RR@1": 0.5,
        "AP": (0.5 * 0.5 / 1 + 1.0 * 1.5 / 3) / 1.5,
        "AP@2": (0.5 * 0.5 / 1) / 1.5,
        "nDCG(ideal=list)": (0.5 + 1.0 / 2.0) / idcg,  # log2(4) = 2
        "nDCG(ideal=list)@2": 0.5 / idcg,
        "nDCG": (0.5 + 1.0 / 2.0) / (max2 + 0.5),
        "nDCG@2": 0.5 / max2,
        "R@2": 0.5 / 1.5,
    }
    for name, value in expected.items():
        assert values[name] == pytest.approx(value, abs=1e-15), name


# --- policy -------------------------------------------------------------------------------------


def test_report_keys_are_names_as_given_and_aggregate_is_the_mean() -> None:
    report = evaluate_labels({"a": [1, 0], "b": [0.5, 0.5], "c": [0, 0]}, ["P@1", "P_1", "AP"])
    assert isinstance(report, ListMetricReport)
    assert list(report.per_query["a"]) == ["P@1", "P_1", "AP"]
    assert list(report.per_query["b"]) == ["P@1", "P_1", "AP"]
    assert report.aggregate["P@1"] == pytest.approx((1.0 + 0.5 + 0.0) / 3, abs=1e-15)
    assert report.aggregate["P_1"] == report.aggregate["P@1"]
    assert report.dropped_queries == ()


def test_empty_list_scores_zero_and_stays_in_the_mean() -> None:
    report = evaluate_labels({"a": [1.0], "empty": []}, ["P@1", "nDCG@5", "RR", "AP", "R@3"])
    assert report.per_query["empty"] == {
        "P@1": 0.0,
        "nDCG@5": 0.0,
        "RR": 0.0,
        "AP": 0.0,
        "R@3": 0.0,
    }
    assert report.aggregate["P@1"] == 0.5


def test_no_relevant_document_scores_zero() -> None:
    names = ["P@3", "Success@3", "RR", "AP", "nDCG", "R@2"]
    for labels in ([0, 0, 0], [0.0, 0.0]):
        report = evaluate_labels({"q": labels}, names)
        assert report.per_query["q"] == dict.fromkeys(names, 0.0)


def test_cutoff_past_the_list_counts_missing_positions_as_non_relevant() -> None:
    report = evaluate_labels({"b": [1, 1], "g": [0.5, 1.0]}, ["P@10", "R@10", "Success@10"])
    assert report.per_query["b"]["P@10"] == 0.2
    assert report.per_query["g"]["P@10"] == pytest.approx(0.15, abs=1e-15)
    assert report.per_query["g"]["R@10"] == 1.0
    assert report.per_query["g"]["Success@10"] == 1.0


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({"q7": [1.0, float("nan")]}, "query 'q7' rank 2: label is NaN"),
        ({"q7": [0.2, 0.3, 1.5]}, "query 'q7' rank 3: label 1.5 is outside"),
        ({"q7": [-0.1]}, "query 'q7' rank 1: label -0.1 is outside"),
        ({"q7": ["0.5"]}, "query 'q7' rank 1: label '0.5' is not a number"),
        ({"q7": [None]}, "query 'q7' rank 1: label None is not a number"),
        ({"q7": [0, 10**400]}, "query 'q7' rank 2: label 1000"),
        ({"q7": "101"}, "query 'q7': labels must be a list"),
        ({}, "no queries"),
    ],
)
def test_bad_labels_are_input_errors(labels: dict, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        evaluate_labels(labels, ["P@1"])


def test_numpy_labels_are_accepted() -> None:
    labels = {"q": np.array([0.0, 1.0, 0.5]), "b": np.array([1, 0])}
    report = evaluate_labels(labels, ["P@2", "RR"])
    assert report.per_query["q"] == {"P@2": 0.5, "RR": 0.5}
    assert report.per_query["b"] == {"P@2": 0.5, "RR": 1.0}


def test_metrics_not_defined_on_label_lists_are_refused() -> None:
    with pytest.raises(InputError, match="not defined on label lists"):
        evaluate_labels({"q": [1]}, ["bpref"])
    with pytest.raises(InputError, match="only rel=1"):
        evaluate_labels({"q": [1]}, ["P(rel=2)@5"])
    assert evaluate_labels({"q": [1]}, ["P(rel=1)@5"]).per_query["q"]["P(rel=1)@5"] == 0.2
    with pytest.raises(InputError, match="unknown compat mode"):
        evaluate_labels({"q": [1]}, ["P_1"], compat="ragas")


def test_binary_and_graded_queries_in_one_call() -> None:
    """Each query takes its own path; a binary query's value does not depend on the others."""
    alone = evaluate_labels({"b": [0, 1, 1]}, ["AP", "nDCG@2"]).per_query["b"]
    mixed = evaluate_labels({"b": [0, 1, 1], "g": [0.3]}, ["AP", "nDCG@2"]).per_query["b"]
    assert alone == mixed


# --- labels_from_frame --------------------------------------------------------------------------


def test_labels_from_frame_sorts_by_query_and_rank() -> None:
    frame = pl.DataFrame(
        {
            "query_id": ["b", "a", "a", "b", "a"],
            "doc_id": ["x", "y", "z", "w", "v"],
            "rank": [2, 3, 1, 1, 2],
            "label": [1.0, 0.0, 0.5, 0.0, 1.0],
        }
    )
    assert labels_from_frame(frame) == {"a": [0.5, 1.0, 0.0], "b": [0.0, 1.0]}
    renamed = frame.rename({"label": "em"})
    assert labels_from_frame(renamed, label_col="em") == {"a": [0.5, 1.0, 0.0], "b": [0.0, 1.0]}


def test_labels_from_frame_errors() -> None:
    gap = pl.DataFrame({"query_id": ["a", "a"], "rank": [1, 3], "label": [1.0, 0.0]})
    with pytest.raises(InputError, match="query 'a': expected rank 2, found rank 3"):
        labels_from_frame(gap)
    null = pl.DataFrame({"query_id": ["a", "a"], "rank": [1, 2], "label": [1.0, None]})
    with pytest.raises(InputError, match="query 'a' rank 2: label is missing"):
        labels_from_frame(null)
    with pytest.raises(InputError, match="lacks column"):
        labels_from_frame(pl.DataFrame({"query_id": ["a"], "rank": [1]}))
    high = pl.DataFrame({"query_id": ["a"], "rank": [1], "label": [2.0]})
    with pytest.raises(InputError, match=r"query 'a' rank 1: label 2\.0 is outside"):
        labels_from_frame(high)
