"""The two nDCG ideals and the signed-label metrics, against values computed by hand.

Discounts used below: 1/log2(2) = 1, 1/log2(3) = 0.6309297535714575, 1/log2(4) = 0.5, so the
all-ones DCG@3 is 1 + 0.6309297535714575 + 0.5 = 2.1309297535714575.
"""

from __future__ import annotations

import random

import pytest

from erag_dagster.core.errors import InputError
from erag_dagster.metrics.human import evaluate_run
from erag_dagster.metrics.list_metrics import evaluate_labels, labels_from_frame
from erag_dagster.metrics.names import parse_metric_name

D3 = 0.6309297535714575  # 1 / log2(3)
ONES3 = 1 + D3 + 0.5  # DCG@3 of three labels 1


def _one(labels, metric, signed=False):
    return evaluate_labels({"q": labels}, [metric], signed=signed).per_query["q"][metric]


@pytest.mark.parametrize(
    ("labels", "list_ideal", "max_ideal"),
    [
        # best label 0.1, sorted: the list ideal says perfect, the max ideal says 0.1 / ONES3
        ([0.1, 0.0, 0.0], 1.0, 0.1 / ONES3),
        # DCG = 0.5 + 1*D3; list IDCG = 1 + 0.5*D3
        ([0.5, 1.0, 0.0], (0.5 + D3) / (1 + 0.5 * D3), (0.5 + D3) / ONES3),
        # binary, one relevant at rank 2: list IDCG = 1; max IDCG = ONES3
        ([0.0, 1.0, 0.0], D3, D3 / ONES3),
    ],
)
def test_the_two_ideals_by_hand(labels, list_ideal, max_ideal) -> None:
    assert _one(labels, "nDCG(ideal=list)@3") == pytest.approx(list_ideal, abs=1e-12)
    assert _one(labels, "nDCG(ideal=max)@3") == pytest.approx(max_ideal, abs=1e-12)


@pytest.mark.parametrize("labels", [[1, 1, 1, 0], [1, 0, 1, 1], [0, 1, 1, 1, 1], [1, 1, 1]])
def test_the_ideals_agree_on_binary_lists_whose_ideal_is_all_ones(labels) -> None:
    # at least k = 3 relevant documents: the sorted list's top 3 are all ones
    by_list = _one(labels, "nDCG(ideal=list)@3")
    assert by_list == pytest.approx(_one(labels, "nDCG(ideal=max)@3"), abs=1e-12)
    assert by_list == pytest.approx(_one(labels, "ndcg_cut_3"), abs=1e-12)  # trec_eval


def test_the_list_ideal_is_trec_eval_on_binary_lists() -> None:
    # [1, 0, 1]: DCG = 1 + 0.5; trec_eval's ideal from the qrels (two ones) = 1 + D3
    assert _one([1, 0, 1], "nDCG(ideal=list)@3") == pytest.approx(1.5 / (1 + D3), abs=1e-12)
    assert _one([1, 0, 1], "nDCG(ideal=max)@3") == pytest.approx(1.5 / ONES3, abs=1e-12)


def test_the_max_ideal_counts_cut_off_positions_past_the_list() -> None:
    # one document labelled 1, nDCG@3: a full list of three ones would reach ONES3
    assert _one([1.0], "nDCG(ideal=max)@3") == pytest.approx(1 / ONES3, abs=1e-12)
    # no cut-off: the ideal covers the list's own length
    assert _one([0.5, 0.5], "nDCG(ideal=max)") == pytest.approx(
        (0.5 + 0.5 * D3) / (1 + D3), abs=1e-12
    )


def test_udcg_by_hand() -> None:
    # (-0.5 * 1 + 1.0 * D3 + 0 * 0.5) / ONES3
    assert _one([-0.5, 1.0, 0.0], "UDCG@3", signed=True) == pytest.approx(
        (-0.5 + D3) / ONES3, abs=1e-12
    )
    assert _one([-1.0, -1.0, -1.0], "UDCG@3", signed=True) == pytest.approx(-1.0)
    assert _one([1.0, 1.0, 1.0], "UDCG@3", signed=True) == pytest.approx(1.0)


def test_signed_lists_use_the_positive_part_for_the_other_families() -> None:
    labels = [-0.5, 1.0, 0.25]
    assert _one(labels, "P@3", signed=True) == pytest.approx(1.25 / 3)
    assert _one(labels, "Success@3", signed=True) == 1.0
    assert _one(labels, "RR", signed=True) == pytest.approx(0.5)  # max(l_i / i) = 1/2
    assert _one([-0.5, -0.2], "Success@2", signed=True) == 0.0


def test_signed_metrics_reduce_to_the_unsigned_ones_on_labels_at_least_zero() -> None:
    rng = random.Random(7)
    lists = {f"q{i}": [rng.choice([0.0, 0.3, 0.5, 1.0]) for _ in range(4)] for i in range(30)}
    metrics = ["P@3", "Success@3", "RR", "AP", "nDCG(ideal=list)@3", "nDCG(ideal=max)@3", "R@3"]
    plain = evaluate_labels(lists, metrics)
    signed = evaluate_labels(lists, [*metrics, "UDCG@3"], signed=True)
    for qid in lists:
        for m in metrics:
            assert signed.per_query[qid][m] == pytest.approx(plain.per_query[qid][m], abs=1e-12)
        udcg = signed.per_query[qid]["UDCG@3"]
        assert udcg == pytest.approx(plain.per_query[qid]["nDCG(ideal=max)@3"], abs=1e-12)


def test_label_ranges_and_names_are_checked() -> None:
    with pytest.raises(InputError, match=r"query 'q' rank 1: label -0.5 is outside \[0, 1\]"):
        evaluate_labels({"q": [-0.5]}, ["P@1"])
    with pytest.raises(InputError, match=r"label -1.5 is outside \[-1, 1\]"):
        evaluate_labels({"q": [-1.5]}, ["P@1"], signed=True)
    with pytest.raises(InputError, match="the ideal is one of list, max"):
        parse_metric_name("nDCG(ideal=best)@3")
    with pytest.raises(InputError, match="only nDCG names an ideal"):
        parse_metric_name("P(ideal=max)@3")
    with pytest.raises(InputError, match="UDCG needs a cut-off"):
        parse_metric_name("UDCG")
    assert parse_metric_name("nDCG(ideal=max)@3").ideal == "max"


def test_judged_runs_refuse_label_list_only_metrics() -> None:
    import polars as pl

    qrels = pl.DataFrame({"query_id": ["q"], "doc_id": ["d"], "relevance": [1]})
    run = pl.DataFrame({"query_id": ["q"], "doc_id": ["d"], "rank": [1], "score": [1.0]})
    for name in ("nDCG(ideal=max)@3", "UDCG@3"):
        with pytest.raises(InputError, match="label lists only"):
            evaluate_run(qrels, run, [name], relevance_level=1)
    assert (
        evaluate_run(qrels, run, ["nDCG(ideal=list)@3"], relevance_level=1).aggregate[
            "nDCG(ideal=list)@3"
        ]
        == 1.0
    )


def test_signed_label_frames() -> None:
    import polars as pl

    frame = pl.DataFrame({"query_id": ["q", "q"], "rank": [1, 2], "label": [-0.25, 1.0]})
    assert labels_from_frame(frame, signed=True) == {"q": [-0.25, 1.0]}
    with pytest.raises(InputError, match="outside"):
        labels_from_frame(frame)


def test_unknown_label_methods_are_refused_in_one_line() -> None:
    from erag_dagster.meta.label_methods import check_label_methods

    assert check_label_methods(["signed", "likelihood", "signed"]) == ["signed", "likelihood"]
    with pytest.raises(InputError, match="unknown label method 'generation'; known: likelihood"):
        check_label_methods(["generation"])
    with pytest.raises(InputError, match="must be a list"):
        check_label_methods("likelihood")
