"""scripts/make_yesno_set.py: SciFact's verified claims as a yes/no set the loaders read."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from erag_dagster.data.loaders import load_dataset
from tests.conftest import load_script


def test_abstract_sentences_reads_each_literal() -> None:
    """Adjacent literals of numpy's array repr stay separate sentences, either quote kind."""
    script = load_script("make_yesno_set")
    field = "['First one.'\n \"It's the second.\" 'Third, with [brackets].']"
    assert script.abstract_sentences(field) == [
        "First one.",
        "It's the second.",
        "Third, with [brackets].",
    ]
    assert script.question_for(" Aspirin lowers fever. ") == (
        "Is it true that Aspirin lowers fever? Answer yes or no."
    )


def test_make_yesno_set_builds_a_loadable_yes_no_set(shared_data: Path, tmp_path: Path) -> None:
    script = load_script("make_yesno_set")
    source = shared_data / "scifact" / "scifact-hf-csv.zip"
    script.main(["--out", str(tmp_path / "a"), "--source", str(source)])
    data = script.build(source)
    # 300 claims (BEIR SciFact test): 124 all SUPPORT, 64 all CONTRADICT, 112 without evidence
    assert data.counts == {"yes": 124, "no": 64, "no_evidence": 112, "mixed": 0}

    ds = load_dataset(f"jsonl:{tmp_path / 'a'}")
    assert (ds.corpus.height, ds.queries.height, ds.qrels.height) == (5183, 188, 209)
    golds = ds.queries["answers"].to_list()
    assert all(g in (["yes"], ["no"]) for g in golds)
    assert (golds.count(["yes"]), golds.count(["no"])) == (124, 64)
    assert ds.queries["question"].str.starts_with("Is it true that ").all()
    assert ds.queries["question"].str.ends_with("? Answer yes or no.").all()
    assert set(ds.qrels["query_id"]) == set(ds.queries["query_id"])
    assert ds.qrels["relevance"].unique().to_list() == [1]

    # the corpus is BEIR SciFact's: sentences joined by one space, titles as given, same order
    beir = pl.read_ndjson(shared_data / "scifact" / "beir" / "corpus.jsonl")
    assert ds.corpus["doc_id"].to_list() == beir["_id"].to_list()
    assert ds.corpus["text"].to_list() == beir["text"].to_list()
    assert ds.corpus["title"].to_list() == beir["title"].to_list()

    # deterministic: a second build writes the same bytes
    script.write(data, tmp_path / "b")
    for name in ("corpus.jsonl", "queries.jsonl", "qrels.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    first = json.loads((tmp_path / "a" / "queries.jsonl").read_text().splitlines()[0])
    assert list(first) == ["query_id", "question", "answers"]
