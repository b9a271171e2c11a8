"""Passage splitting (eRAG paper §3.1): word counts, ids, title prefix, qrels mapping."""

from __future__ import annotations

import polars as pl
import pytest

from erag_dagster.core.errors import InputError
from erag_dagster.data.chunking import PASSAGE_SCHEMA, split_dataset, split_passages
from erag_dagster.data.loaders import load_dataset
from erag_dagster.data.schema import Dataset


def corpus(rows: list[tuple[str, str | None, str | None]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["doc_id", "title", "text"], orient="row")


def test_split_counts_ids_and_title_prefix() -> None:
    words = [f"w{i}" for i in range(250)]
    passages = split_passages(corpus([("d", "Title", " ".join(words))]), words=100)
    assert passages.schema == pl.Schema(PASSAGE_SCHEMA)
    assert passages["doc_id"].to_list() == ["d#0", "d#1", "d#2"]
    assert passages["parent_id"].to_list() == ["d", "d", "d"]
    assert passages["text"].to_list() == [
        "Title " + " ".join(words[0:100]),
        "Title " + " ".join(words[100:200]),
        "Title " + " ".join(words[200:250]),
    ]


def test_split_edge_cases() -> None:
    passages = split_passages(
        corpus(
            [
                ("spaces", "", "  one\ttwo\n\nthree  "),
                ("no-words", "Only Title", "   "),
                ("nulls", None, None),
                ("exact", "T", "a b c d"),
            ]
        ),
        words=2,
    )
    assert passages.select("doc_id", "text").rows() == [
        ("spaces#0", "one two"),  # no title: just the words, whitespace collapsed
        ("spaces#1", "three"),
        ("no-words#0", "Only Title"),  # a wordless document keeps one passage
        ("nulls#0", ""),
        ("exact#0", "T a b"),  # 4 words / 2 = exactly 2 passages, none empty
        ("exact#1", "T c d"),
    ]


@pytest.mark.parametrize("words", [0, -5, True, 2.5])
def test_split_rejects_bad_length(words: object) -> None:
    with pytest.raises(InputError, match="positive number of words"):
        split_passages(corpus([("d", "t", "x")]), words=words)  # type: ignore[arg-type]


def test_split_empty_corpus() -> None:
    empty = split_passages(
        pl.DataFrame(schema={"doc_id": pl.String, "title": pl.String, "text": pl.String})
    )
    assert empty.is_empty() and empty.schema == pl.Schema(PASSAGE_SCHEMA)


def test_split_sample_keeps_every_word_in_order() -> None:
    docs = load_dataset("sample").corpus
    passages = split_passages(docs, words=100)
    # strip the "title " prefix, count words, and rebuild every document
    body = passages.with_columns(
        pl.col("text").str.slice(pl.col("title").str.len_chars() + 1).alias("body")
    ).with_columns(pl.col("body").str.split(" ").list.len().alias("n"))
    assert body["n"].max() == 100
    rebuilt = body.group_by("parent_id", maintain_order=True).agg(
        pl.col("body").str.join(" "), pl.len().alias("passages")
    )
    expected = docs.select(
        pl.col("doc_id").alias("parent_id"),
        pl.col("text").str.extract_all(r"\S+").list.join(" ").alias("body"),
        ((pl.col("text").str.extract_all(r"\S+").list.len() + 99) // 100)
        .cast(pl.UInt32)
        .alias("passages"),
    )
    assert rebuilt.equals(expected)
    assert passages["doc_id"][0] == "Super_Bowl_50_0#0"
    assert passages["text"][0].startswith("Super Bowl 50 Super Bowl 50 was an American")


def test_split_dataset_maps_each_judgment_to_every_passage(shared_data) -> None:
    spec = f"squad:{shared_data / 'squad-v1.1-dev' / 'dev-v1.1.json.zip'}?max_questions=300"
    data = load_dataset(spec)
    split = split_dataset(data, words=50)
    assert split.spec == spec + "&passages=50"
    assert split.queries.equals(data.queries)
    per_parent = split.corpus.group_by("parent_id").len()
    expected = data.qrels.join(per_parent, left_on="doc_id", right_on="parent_id")["len"].sum()
    assert split.qrels.height == expected > data.qrels.height
    mapped = split.qrels.join(split.corpus.select("doc_id", "parent_id"), on="doc_id")
    assert mapped.height == split.qrels.height  # every judged passage exists
    assert set(mapped.select("query_id", "parent_id").unique().iter_rows()) == set(
        data.qrels.select("query_id", "doc_id").iter_rows()
    )
    # qrels keep their order; a judgment expands to its passages in passage order
    query_id, parent, _ = data.qrels.row(0)
    count = per_parent.filter(pl.col("parent_id") == parent)["len"][0]
    assert split.qrels.head(count)["doc_id"].to_list() == [f"{parent}#{i}" for i in range(count)]
    assert split.qrels.head(count)["query_id"].unique().to_list() == [query_id]
    split.validate()


def test_split_dataset_spec_suffix() -> None:
    tiny = Dataset(
        "jsonl:/x",
        corpus([("d", "t", "a b c")]),
        pl.DataFrame({"query_id": ["q"], "question": ["?"], "answers": [["a"]]}),
        pl.DataFrame({"query_id": ["q"], "doc_id": ["d"], "relevance": [2]}),
    )
    assert split_dataset(tiny, 2).spec == "jsonl:/x?passages=2"
    assert split_dataset(tiny, 2).qrels.rows() == [("q", "d#0", 2), ("q", "d#1", 2)]
    already = Dataset("sample?passages=2", tiny.corpus, tiny.queries, tiny.qrels)
    assert split_dataset(already, 2).spec == "sample?passages=2"
