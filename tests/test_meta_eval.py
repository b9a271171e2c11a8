"""End-to-end evaluation, baseline labellers and the efficiency table with the real reader."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.labels.store import LabelStore
from erag_dagster.meta.baselines import (
    containment_labels,
    llm_annotation_labels,
    provenance_labels,
)
from erag_dagster.meta.efficiency import MODES, measure_efficiency, round_orders, summarise_rounds
from erag_dagster.meta.end_to_end import context_lists, evaluate_end_to_end
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.prompts import reader_passage


@pytest.fixture(scope="module")
def small():
    return load_dataset("sample?max_questions=4")


@pytest.fixture(scope="module")
def run(small, tmp_path_factory):
    import os

    os.environ.setdefault("ERAG_STORAGE", str(tmp_path_factory.mktemp("storage")))
    return run_retriever(load_registry(), "bm25", small.corpus, small.queries, 5)


@pytest.fixture(scope="module")
def reader():
    entry = load_registry().reader("smollm2-135m")
    return reader_from_config(entry.name, {**entry.config, "dtype": "float32"})


@pytest.mark.slow
def test_end_to_end_batched_equals_one_by_one_and_k1_is_the_erag_prompt(small, run, reader) -> None:
    result = evaluate_end_to_end(run, small.queries, small.corpus, reader, "f1", k=2)
    scores = result.scores
    assert scores.height == 4 and scores.get_column("k").unique().to_list() == [2]
    assert ((scores["score"] >= 0) & (scores["score"] <= 1)).all()
    contexts = context_lists(run, small.queries, small.corpus, 2)
    for row, answer in zip(contexts.rows(named=True), scores["answer"], strict=True):
        assert reader.answer_with_context(row["question"], row["passages"]) == answer
    # at k = 1 the end-to-end prompt is the eRAG prompt of the top document
    top = (
        run.filter(pl.col("rank") == 1)
        .join(small.corpus, on="doc_id")
        .join(small.queries, on="query_id")
    )
    k1 = evaluate_end_to_end(run, small.queries, small.corpus, reader, "em", k=1).scores
    singles = reader.answer(
        [(q, reader_passage(t, x)) for q, t, x in top.select("question", "title", "text").rows()]
    )
    expected = dict(zip(top["query_id"], singles, strict=True))
    assert dict(zip(k1["query_id"], k1["answer"], strict=True)) == expected


@pytest.mark.slow
def test_baseline_labels(small, run, reader, tmp_path: Path) -> None:
    prov = provenance_labels(run, small.qrels, relevance_level=1)
    judged = run.join(small.qrels, on=["query_id", "doc_id"], how="semi")
    assert prov.get_column("label").sum() == judged.height
    contains = containment_labels(run, small.queries, small.corpus)
    assert set(contains.get_column("label").unique().to_list()) <= {0.0, 1.0}
    # the gold paragraph contains the answer in SQuAD (when it is retrieved)
    gold_rows = contains.join(small.qrels, on=["query_id", "doc_id"], how="semi")
    assert gold_rows.get_column("label").min() == 1.0
    store = LabelStore(tmp_path / "labels.sqlite")
    first = llm_annotation_labels(run, small.queries, small.corpus, reader, store=store)
    assert ((first["p_yes"] >= 0) & (first["p_yes"] <= 1)).all()
    stored = store.count_generations()
    assert stored == run.height
    again = llm_annotation_labels(run, small.queries, small.corpus, reader, store=store)
    assert store.count_generations() == stored  # nothing asked twice
    assert again["p_yes"].to_list() == first["p_yes"].to_list()


@pytest.mark.slow
def test_efficiency_table_has_every_mode(small, run) -> None:
    entry = load_registry().reader("smollm2-135m")
    contexts = context_lists(run, small.queries.head(1), small.corpus, 3)
    items = list(zip(contexts["question"], contexts["passages"], strict=True))
    config = {**entry.config, "num_threads": 1}
    # one round: each cell is a fresh process (~7 s here); the rounds' alternation and their
    # medians and ranges are tested on their own below (round_orders, summarise_rounds)
    # and one depth: each cell costs a process start, the depths only change the item lists
    table = measure_efficiency(entry.name, config, items, ks=(3,), rounds=1)
    assert table.height == len(MODES)
    assert set(table.get_column("mode").to_list()) == set(MODES)
    assert table.get_column("rounds").to_list() == [1] * table.height
    assert (table.get_column("seconds") > 0).all()
    assert (table["seconds_min"] <= table["seconds"]).all()
    assert (table["seconds"] <= table["seconds_max"]).all()
    # prefill (1 new token) costs part of a full generation, never nothing
    assert (table.get_column("prefill_share") > 0).all()
    assert (table.get_column("peak_memory_mib") > 100).all()
    e2e = table.filter(pl.col("mode") == "end_to_end")
    # the end-to-end cell against itself: 1 up to polars' vectorised division, which can be
    # an ulp off for some values (13.956884408233488 / itself gave 0.9999999999999999)
    assert e2e.get_column("time_vs_end_to_end").to_list() == [pytest.approx(1.0, abs=1e-12)]
    docs = dict(zip(table["mode"] + table["k"].cast(str), table["documents"], strict=True))
    assert docs["erag_doc_batch3"] == 3 and docs["end_to_end3"] == 3


def test_round_orders_alternate_so_no_cell_is_always_first_or_last() -> None:
    orders = round_orders(["a", "b", "c"], 4)
    assert orders == [["a", "b", "c"], ["a", "c", "b"], ["c", "a", "b"], ["c", "b", "a"]]
    assert {o[0] for o in orders} == {"a", "c"} and {o[-1] for o in orders} == {"c", "b", "a"}
    assert round_orders(["a"], 0) == []


def test_summarise_rounds_gives_medians_ranges_and_ratios() -> None:
    timings = pl.DataFrame(
        {
            "round": [0, 0, 1, 1, 2, 2],
            "mode": ["end_to_end", "erag_doc_batch"] * 3,
            "k": [10] * 6,
            "queries": [2] * 6,
            "documents": [20] * 6,
            "seconds": [4.0, 10.0, 6.0, 30.0, 5.0, 20.0],
            "prefill_seconds": [3.0, 2.0, 3.0, 3.0, 4.0, 4.0],
            "peak_memory_mib": [900.0, 700.0, 1000.0, 800.0, 950.0, 750.0],
            "memory_kind": ["peak_rss"] * 6,
        }
    )
    table = summarise_rounds(timings)
    e2e, doc = table.row(0, named=True), table.row(1, named=True)
    assert (e2e["mode"], e2e["rounds"], e2e["seconds"]) == ("end_to_end", 3, 5.0)
    assert (e2e["seconds_min"], e2e["seconds_max"], e2e["seconds_per_query"]) == (4.0, 6.0, 2.5)
    assert e2e["prefill_share"] == pytest.approx(0.75)  # median of 3/4, 3/6, 4/5
    assert doc["seconds"] == 20.0 and doc["prefill_share"] == pytest.approx(0.2)  # 2/10,1/10,1/5
    assert doc["time_vs_end_to_end"] == pytest.approx(4.0)  # 20 / 5
    assert doc["memory_vs_end_to_end"] == pytest.approx(750 / 950)


def test_end_to_end_answers_are_stored_and_reused(small, run, reader, tmp_path: Path) -> None:
    store = LabelStore(tmp_path / "labels.sqlite")
    first = evaluate_end_to_end(run, small.queries, small.corpus, reader, "em", k=2, store=store)
    assert store.count_generations() == 4
    calls = []
    original = reader.answer_with_contexts

    def counting(items, *args, **kwargs):
        calls.append(len(items))
        return original(items, *args, **kwargs)

    reader.answer_with_contexts = counting
    try:
        again = evaluate_end_to_end(
            run, small.queries, small.corpus, reader, "em", k=2, store=store
        )
        deeper = evaluate_end_to_end(
            run, small.queries, small.corpus, reader, "em", k=3, store=store
        )
    finally:
        del reader.answer_with_contexts
    assert again.scores.equals(first.scores)
    assert calls == [4]  # only the k = 3 lists (new contexts) were generated
    assert deeper.scores.height == 4 and store.count_generations() == 8


def test_end_to_end_at_k1_reuses_stored_erag_answers(small, run, reader, tmp_path: Path) -> None:
    from erag_dagster.labels.labeller import label_run

    store = LabelStore(tmp_path / "labels.sqlite")
    top = run.filter(pl.col("rank") == 1)
    labelled = label_run(top, small.queries, small.corpus, reader, "em", store)
    stored = store.count_generations()
    reader.reset_timings()
    k1 = evaluate_end_to_end(run, small.queries, small.corpus, reader, "em", k=1, store=store)
    assert reader.timings == []  # the reader was not called
    assert store.count_generations() == stored
    erag = dict(labelled.labels.select("query_id", "answer").rows())
    assert dict(k1.scores.select("query_id", "answer").rows()) == erag
    # k = 2 has no eRAG counterpart: generated (and stored) as end-to-end answers
    evaluate_end_to_end(run, small.queries, small.corpus, reader, "em", k=2, store=store)
    assert store.count_generations() == stored + small.queries.height


def test_efficiency_items_take_the_first_deep_enough_queries(small, run) -> None:
    from erag_dagster.meta.efficiency import efficiency_items

    shallow = run.filter(~((pl.col("query_id") == run["query_id"].min()) & (pl.col("rank") > 3)))
    deep_ids = sorted(set(shallow["query_id"]) - {run["query_id"].min()})
    items = efficiency_items(shallow, small.queries, small.corpus, depth=5, n_queries=2)
    questions = dict(small.queries.select("query_id", "question").rows())
    assert [q for q, _ in items] == [questions[qid] for qid in deep_ids[:2]]
    assert all(len(passages) == 5 for _, passages in items)
    assert efficiency_items(run, small.queries, small.corpus, depth=6, n_queries=2) == []
