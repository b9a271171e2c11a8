"""Downstream metrics: KILT's own expected values, hand-computed cases, and the error policy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from erag_dagster.core.errors import InputError
from erag_dagster.metrics.downstream import (
    DOWNSTREAM_METRICS,
    accuracy,
    answer_containment,
    exact_match,
    get_downstream_metric,
    normalize_answer,
    rouge_l,
    token_f1,
)
from tests.reproductions import kilt_gold_answers, kilt_records, load_reproductions

KILT_GOLD3 = "kilt-gold3-guess3_1-"

# --- KILT conformance (facebookresearch/KILT tests/test_eval_downstream.py) --------------------
# KILT's expected averages (gold1/guess1_1, gold1/gold1, gold3/guess3_1) are data in
# reproductions/kilt.yaml, checked by tests/test_reproductions.py.


def test_kilt_gold3_multi_sentence_rouge_per_record(shared_data: Path) -> None:
    """gold3/guess3_1 are multi-sentence: the summary-level union LCS matters; both records
    score KILT's average (reproductions/kilt.yaml) on their own."""
    expected = {e.metric: e.expected for e in load_reproductions() if e.id.startswith(KILT_GOLD3)}
    folder = shared_data / "kilt-test-fixtures"
    gold = kilt_gold_answers(kilt_records(folder / "gold3.jsonl")[0])
    guess = str(kilt_records(folder / "guess3_1.jsonl")[0]["output"][0]["answer"]).strip()
    assert rouge_l(guess, gold) == pytest.approx(expected["rougel"], abs=1e-15)
    assert token_f1(guess, gold) == pytest.approx(expected["f1"], abs=1e-15)


# --- normalisation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Cat!", "cat"),
        ("  an  apple, a pear ", "apple pear"),
        ("Theatre of the absurd", "theatre of absurd"),  # only whole-word articles
        ("U.S.A.", "usa"),
        ("", ""),
        ("A", ""),
    ],
)
def test_normalize_answer(text: str, normalised: str) -> None:
    assert normalize_answer(text) == normalised


# --- hand-computed cases ------------------------------------------------------------------------


def test_exact_match() -> None:
    assert exact_match("The Beatles.", ["beatles"]) == 1.0
    assert exact_match("Beatles", ["Rolling Stones", "the beatles"]) == 1.0
    assert exact_match("Beatles band", ["beatles"]) == 0.0
    assert exact_match("the", ["a"]) == 1.0  # both normalise to "" (as SQuAD's script)


def test_token_f1() -> None:
    # pred {cat, sat}, gold {cat, sat, on, mat}: P = 1, R = 1/2, F1 = 2/3
    assert token_f1("the cat sat", ["a cat sat on the mat"]) == pytest.approx(2 / 3, abs=1e-15)
    # multiset overlap: pred [a1 x3] vs gold [a1 x1] -> c = 1, P = 1/3, R = 1 -> F1 = 1/2
    assert token_f1("paris paris paris", ["Paris"]) == pytest.approx(0.5, abs=1e-15)
    # max over golds
    assert token_f1("new york city", ["boston", "new york"]) == pytest.approx(0.8, abs=1e-15)
    assert token_f1("", ["x"]) == 0.0
    assert token_f1("the", ["a"]) == 0.0  # no tokens -> 0, as SQuAD's script


def test_rouge_l_hand_computed() -> None:
    # LCS("a c d e", "a b c d") = {a, c, d}: P = R = 3/4, F = 2PR / (P + R + 1e-8)
    p = r = 0.75
    assert rouge_l("a b c d", ["a c d e"]) == pytest.approx(2 * p * r / (p + r + 1e-8), abs=1e-15)
    # case-sensitive, no normalisation (as KILT)
    assert rouge_l("Paris", ["paris"]) == 0.0
    # summary level: the LCS union over sentences recovers every word
    assert rouge_l("a b. c d", ["c d. a b"]) == pytest.approx(2 / (2 + 1e-8), abs=1e-15)
    # the package counts distinct words: repeated words do not lower precision
    assert rouge_l("the the the", ["the"]) == pytest.approx(2 / (2 + 1e-8), abs=1e-15)
    # no sentence on one side: 0 (the package raises there)
    assert rouge_l(".", ["x"]) == 0.0
    assert rouge_l("", ["x"]) == 0.0
    # max over golds: 1/2 precision, full recall against "b"
    assert rouge_l("a b", ["z", "b"]) == pytest.approx(2 * 0.5 / (1.5 + 1e-8), abs=1e-15)


def test_accuracy_first_label_token() -> None:
    assert accuracy("Yes, it is.", ["yes"]) == 1.0
    assert accuracy("no", ["yes"]) == 0.0
    assert accuracy("I think yes", ["yes"]) == 0.0
    assert accuracy("SUPPORTS", ["SUPPORTS"]) == 1.0
    assert accuracy("refutes.", ["REFUTES"]) == 1.0
    assert accuracy("Maybe", ["yes", "maybe"]) == 1.0
    assert accuracy("Not enough info.", ["NOT ENOUGH INFO"]) == 1.0
    assert accuracy("Not sure", ["NOT ENOUGH INFO"]) == 0.0
    assert accuracy("anything", ["the"]) == 0.0  # a gold with no tokens never matches


def test_answer_containment() -> None:
    assert answer_containment("The answer is Barack Obama.", ["barack obama"]) == 1.0
    assert answer_containment("He studied martial arts", ["art"]) == 0.0  # tokens, not chars
    assert answer_containment("Obama Barack", ["barack obama"]) == 0.0  # order matters
    assert answer_containment("in 1984, in London", ["Paris", "london"]) == 1.0
    assert answer_containment("whatever", ["the"]) == 0.0


def test_nq_open_gold_answers_score_one_against_themselves(shared_data: Path) -> None:
    lines = (shared_data / "nq-open" / "NQ-open.dev.jsonl").read_text(encoding="utf-8")
    records = [json.loads(line) for line in lines.splitlines()[:300]]
    checked = 0
    for record in records:
        answers = record["answer"]
        first = answers[0]
        if not normalize_answer(first):
            continue
        assert exact_match(first, answers) == 1.0
        assert token_f1(first, answers) == 1.0
        assert answer_containment(f"I believe it is {first}.", answers) == 1.0
        checked += 1
    assert checked >= 290


def test_values_lie_in_unit_interval() -> None:
    texts = ["", "a", "The cat sat.", "cat cat. dog", "Yes!", "1984", "a b c d e f g"]
    for metric in DOWNSTREAM_METRICS.values():
        for pred in texts:
            for gold in texts[1:]:
                value = metric(pred, [gold])
                assert isinstance(value, float)
                assert 0.0 <= value <= 1.0 and not math.isnan(value)


# --- registry and errors ----------------------------------------------------------------------


def test_registry_names() -> None:
    assert set(DOWNSTREAM_METRICS) == {"em", "f1", "rougel", "accuracy", "contains"}
    # each a declared measure (name, version, function) that computes its function
    f1, rougel = get_downstream_metric("f1"), get_downstream_metric("rougel")
    assert (f1.name, f1.version, f1.function) == ("f1", "1", token_f1)
    assert (rougel.name, rougel.version, rougel.function) == ("rougel", "1", rouge_l)
    assert f1("the Denver Broncos", ["Denver Broncos"]) == token_f1(
        "the Denver Broncos", ["Denver Broncos"]
    )


def test_unknown_metric_lists_known_names() -> None:
    with pytest.raises(InputError, match="accuracy, contains, em, f1, rougel"):
        get_downstream_metric("bleu")


@pytest.mark.parametrize("name", sorted(DOWNSTREAM_METRICS))
def test_empty_golds_is_an_input_error(name: str) -> None:
    metric = DOWNSTREAM_METRICS[name]
    with pytest.raises(InputError, match="no gold answers"):
        metric("paris", [])
    with pytest.raises(InputError, match="single string"):
        metric("paris", "paris")  # type: ignore[arg-type]
