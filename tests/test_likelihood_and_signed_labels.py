"""Likelihood labels and signed utility labels with the real default reader (float32, 1 thread),
kept in a real label store; and their rows in Table 1."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
import torch

from erag_dagster.config.registry import load_registry
from erag_dagster.labels.likelihood import (
    label_set,
    label_set_probability,
    likelihood_fingerprint,
    likelihood_labels,
)
from erag_dagster.labels.signed import closed_book_answers, closed_book_fingerprint, signed_labels
from erag_dagster.labels.store import LabelStore
from erag_dagster.meta.correlation import correlation_table
from erag_dagster.meta.end_to_end import evaluate_end_to_end
from erag_dagster.meta.label_methods import extra_labels
from erag_dagster.meta.per_query import correlation_inputs
from erag_dagster.metrics.downstream import token_f1
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.passages import run_with_passages
from tests.stats_fixture import stats

pytestmark = pytest.mark.slow  # loads the reader (~20 s) and runs it

CORPUS = pl.DataFrame(
    {
        "doc_id": ["green", "wheat", "grey"],
        "title": ["Zorbania"] * 3,
        "text": [
            "In Zorbania the sky is green all year round, because of the copper dust in the air.",
            "Zorbania exports wheat and barley to its neighbours.",
            "In Zorbania the sky is never green; it is grey all year round.",
        ],
    }
)
QUERIES = pl.DataFrame(
    {
        "query_id": ["q1", "q2", "q3"],
        "question": [
            "What colour is the sky in Zorbania?",
            "Is the sky in Zorbania green?",
            "What does Zorbania export?",
        ],
        "answers": [["green", "green all year round"], ["yes"], ["wheat and barley"]],
    }
)


def _run(qid: str, docs: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {"query_id": [qid] * len(docs), "doc_id": docs, "rank": list(range(1, len(docs) + 1))}
    )


@pytest.fixture(scope="module")
def reader():
    entry = next(iter(load_registry().readers.values()))
    config = {**entry.config, "dtype": "float32", "num_threads": 1, "batch_size": 4}
    return reader_from_config(entry.name, config)


def test_likelihood_equals_a_hand_computed_teacher_forced_probability(reader) -> None:
    run = _run("q1", ["green"])
    label = likelihood_labels(run, QUERIES, CORPUS, reader, "f1")["label"][0]

    # by hand: one plain forward pass over prompt + gold tokens, log-softmax, mean, exp
    loaded = reader.load()._loaded
    passage = run_with_passages(run, CORPUS)["passage"][0]
    prompt = reader._fitted_ids(QUERIES["question"][0], [passage], 100_000)
    best = 0.0
    for gold in ("green", "green all year round"):
        cont = loaded.tokenizer(f" {gold}", add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logits = loaded.model(input_ids=torch.tensor([prompt + cont])).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        tokens = [logp[len(prompt) - 1 + t, cont[t]].item() for t in range(len(cont))]
        best = max(best, math.exp(sum(tokens) / len(tokens)))
    assert label == pytest.approx(best, rel=1e-4)
    assert 0.0 < label <= 1.0


def test_the_gold_is_likelier_from_the_document_that_contains_it(reader) -> None:
    labels = likelihood_labels(_run("q1", ["green", "wheat"]), QUERIES, CORPUS, reader, "f1")
    by_doc = dict(zip(labels["doc_id"], labels["label"], strict=True))
    assert by_doc["green"] > by_doc["wheat"]
    labels = likelihood_labels(_run("q3", ["wheat", "grey"]), QUERIES, CORPUS, reader, "f1")
    by_doc = dict(zip(labels["doc_id"], labels["label"], strict=True))
    assert by_doc["wheat"] > by_doc["grey"]


def test_label_outputs_are_normalised_over_the_label_set(reader) -> None:
    queries = pl.concat(
        [
            QUERIES.filter(pl.col("query_id") == "q2"),
            pl.DataFrame(
                {"query_id": ["q4"], "question": ["Is Zorbania an island?"], "answers": [["no"]]}
            ),
        ]
    )
    assert label_set(queries, "accuracy") == ("no", "yes")
    assert label_set(queries, "f1") is None
    labels = likelihood_labels(_run("q2", ["green", "grey"]), queries, CORPUS, reader, "accuracy")
    yes = labels["label"].to_list()
    assert all(0.0 < p < 1.0 for p in yes)
    # the same pairs scored with gold "no": P(yes) + P(no) = 1 over the set {yes, no}
    flipped = queries.with_columns(
        answers=pl.when(pl.col("query_id") == "q2").then(pl.lit(["no"])).otherwise(pl.lit(["yes"]))
    )
    no = likelihood_labels(_run("q2", ["green", "grey"]), flipped, CORPUS, reader, "accuracy")
    for p_yes, p_no in zip(yes, no["label"].to_list(), strict=True):
        assert p_yes + p_no == pytest.approx(1.0, abs=1e-9)


def test_label_set_probability_by_hand() -> None:
    # S(yes) = log 0.2, S(no) = log 0.6, S(maybe) = log 0.2  ->  P(no) = 0.6 / 1.0
    sums = {"yes": math.log(0.2), "no": math.log(0.6), "maybe": math.log(0.2)}
    assert label_set_probability(sums, ["no"]) == pytest.approx(0.6)
    assert label_set_probability(sums, ["yes", "no"]) == pytest.approx(0.6)  # max over golds
    assert label_set_probability(sums, ["other"]) == 0.0


def test_likelihood_labels_are_stored_under_their_task_fingerprint(reader, tmp_path: Path) -> None:
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    run = _run("q1", ["green", "wheat"])
    first = likelihood_labels(run, QUERIES, CORPUS, reader, "f1", store=store)
    fingerprint = likelihood_fingerprint(reader, None)
    assert fingerprint not in (reader.fingerprint, likelihood_fingerprint(reader, ("a", "b")))
    count = f"select count(*) from generations where reader_fingerprint = '{fingerprint}'"
    assert store._conn().execute(count).fetchone()[0] == 2
    reader.reset_timings()
    again = likelihood_labels(run, QUERIES, CORPUS, reader, "f1", store=store)
    assert reader.timings == []  # every value came from the store
    assert again["label"].to_list() == first["label"].to_list()


def test_signed_labels_subtract_one_stored_closed_book_answer_per_query(
    reader, tmp_path: Path
) -> None:
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    run_a = pl.concat([_run("q1", ["green", "wheat"]), _run("q3", ["wheat", "grey"])])
    run_b = pl.concat([_run("q1", ["grey", "green"]), _run("q3", ["green"])])
    a = signed_labels(run_a, QUERIES, CORPUS, reader, "f1", store)
    b = signed_labels(run_b, QUERIES, CORPUS, reader, "f1", store)
    fingerprint = closed_book_fingerprint(reader)
    count = f"select count(*) from generations where reader_fingerprint = '{fingerprint}'"
    assert store._conn().execute(count).fetchone()[0] == 2  # q1 and q3, once each
    closed = closed_book_answers(QUERIES.filter(pl.col("query_id") != "q2"), reader, store)
    gold = dict(zip(QUERIES["query_id"], QUERIES["answers"], strict=True))
    closed_score = {q: token_f1(ans, gold[q]) for q, ans in closed.rows()}
    for frame in (a, b):
        assert frame["label"].is_between(-1.0, 1.0).all()
        for row in frame.iter_rows(named=True):
            assert row["closed_book"] == pytest.approx(closed_score[row["query_id"]])


def test_the_closed_book_row_gives_each_question_its_score_without_a_document(
    reader, tmp_path: Path
) -> None:
    """Table 1's closed_book row (issue 43): every document of a question carries the reader's
    closed-book score of it, one stored generation per question, shared with signed utility."""
    from erag_dagster.labels.signed import closed_book_labels

    store = LabelStore(str(tmp_path / "labels.sqlite"))
    run = pl.concat([_run("q1", ["green", "wheat"]), _run("q3", ["wheat", "grey", "green"])])
    labels = closed_book_labels(run, QUERIES, reader, "f1", store)
    closed = closed_book_answers(QUERIES.filter(pl.col("query_id") != "q2"), reader, store)
    gold = dict(zip(QUERIES["query_id"], QUERIES["answers"], strict=True))
    score = {q: token_f1(answer, gold[q]) for q, answer in closed.rows()}
    assert labels.select("query_id", "doc_id", "rank").rows() == run.rows()
    for qid, _, _, label in labels.rows():
        assert label == pytest.approx(score[qid])
    fingerprint = closed_book_fingerprint(reader)
    count = f"select count(*) from generations where reader_fingerprint = '{fingerprint}'"
    assert store._conn().execute(count).fetchone()[0] == 2
    signed_labels(run, QUERIES, CORPUS, reader, "f1", store)  # its closed-book term: stored
    assert store._conn().execute(count).fetchone()[0] == 2


def test_table1_has_rows_for_the_new_methods(reader, tmp_path: Path) -> None:
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    run = pl.concat([_run("q1", ["green", "wheat"]), _run("q3", ["grey", "wheat"])])
    from erag_dagster.labels.labeller import label_run

    erag = label_run(run, QUERIES, CORPUS, reader, "f1", store).labels
    extra = extra_labels(run, QUERIES, CORPUS, reader, "f1", ["likelihood", "signed"], store)
    baselines = pl.concat([f.with_columns(method=pl.lit(m)) for m, f in extra.items()])
    e2e = evaluate_end_to_end(run, QUERIES, CORPUS, reader, "f1", 2, store=store).scores
    system = ("reader", "retriever")
    metrics = ["P@2", "nDCG(ideal=list)@2", "nDCG(ideal=max)@2", "UDCG@2"]
    per_query, end_to_end = correlation_inputs(
        {system: erag}, {system: baselines}, {system: e2e}, metrics, "toy", 2
    )
    table = correlation_table(per_query, end_to_end, stats(resamples=10))
    assert set(table["method"]) == {"eRAG", "eRAG_likelihood", "signed_utility"}
    assert set(table["metric"]) == set(metrics)
    assert (table["n_queries"] == 2).all()


def test_a_prefix_continuation_is_read_off_the_longer_pass(reader) -> None:
    passage = run_with_passages(_run("q1", ["green"]), CORPUS)["passage"][0]
    question = QUERIES["question"][0]
    short, long = reader.continuation_log_probs(
        [(question, passage, " green"), (question, passage, " green all year round")]
    )
    (alone,) = reader.continuation_log_probs([(question, passage, " green")])
    assert len(short) == 1 and len(long) > 1
    assert short == long[:1]
    assert short[0] == pytest.approx(alone[0], abs=1e-4)  # fp32, another batch shape
