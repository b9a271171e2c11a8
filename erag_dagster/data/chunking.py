"""Split documents into fixed-length word passages, as in the eRAG paper (§3.1).

Salemi & Zamani (SIGIR 2024) evaluate retrieval over Wikipedia split into 100-word passages,
each passage shown to the reader together with its page title. Here:

* a *word* is a maximal run of non-whitespace characters (``\\S+``); passages re-join their
  words with single spaces, so line breaks and repeated spaces inside a document are not kept;
* passage ``i`` (0-based) of document ``d`` holds words ``i*W … i*W+W-1`` and has
  ``doc_id = f"{d}#{i}"``; the last passage of a document may be shorter than ``W``
  (no overlap, no re-balancing);
* passage text is ``f"{title} {words}"`` — the title, one space, the words — or just the words
  when the title is empty, or just the title when the document has no words;
* a document without any word still yields one passage (``#0``) so no judged document vanishes;
* the title is not counted among the ``W`` words.
"""

from __future__ import annotations

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.data.schema import Dataset

__all__ = ["PASSAGE_SCHEMA", "split_dataset", "split_passages"]

PASSAGE_SCHEMA = {
    "doc_id": pl.String,
    "parent_id": pl.String,
    "title": pl.String,
    "text": pl.String,
}
"""Columns of :func:`split_passages`' result (a corpus table plus ``parent_id``)."""


def split_passages(corpus: pl.DataFrame, words: int = 100) -> pl.DataFrame:
    """Split every ``corpus`` document into passages of at most ``words`` words.

    Returns ``doc_id`` (``f"{parent}#{i}"``), ``parent_id``, ``title`` (the parent's) and
    ``text`` (title-prefixed, see the module docstring), in corpus order then passage order.
    Null titles or texts count as empty. ``words`` must be a positive integer.
    """
    if isinstance(words, bool) or not isinstance(words, int) or words < 1:
        raise InputError(f"passage length must be a positive number of words, not {words!r}")
    if corpus.height == 0:
        return pl.DataFrame(schema=PASSAGE_SCHEMA)
    docs = corpus.select(
        pl.col("doc_id").cast(pl.String).alias("parent_id"),
        pl.col("title").cast(pl.String).fill_null(""),
        pl.col("text").cast(pl.String).fill_null("").str.extract_all(r"\S+").alias("_word"),
    ).with_row_index("_doc")
    has_words = pl.col("_word").list.len() > 0
    worded = (
        docs.filter(has_words)
        .with_columns(pl.int_ranges(0, pl.col("_word").list.len()).alias("_pos"))
        .explode(["_word", "_pos"])  # one row per word
        .group_by(["_doc", (pl.col("_pos") // words).alias("_chunk")], maintain_order=True)
        .agg(
            pl.col("parent_id").first(),
            pl.col("title").first(),
            pl.col("_word").str.join(" ").alias("_body"),
        )
    )
    wordless = docs.filter(~has_words).select(
        "_doc",
        pl.lit(0, dtype=worded.schema["_chunk"]).alias("_chunk"),
        "parent_id",
        "title",
        pl.lit("", dtype=pl.String).alias("_body"),
    )
    passages = pl.concat([worded, wordless]).sort(["_doc", "_chunk"])
    has_title = pl.col("title") != ""
    has_body = pl.col("_body") != ""
    return passages.select(
        pl.concat_str([pl.col("parent_id"), pl.lit("#"), pl.col("_chunk").cast(pl.String)]).alias(
            "doc_id"
        ),
        "parent_id",
        "title",
        pl.when(has_title & has_body)
        .then(pl.concat_str([pl.col("title"), pl.col("_body")], separator=" "))
        .when(has_body)
        .then(pl.col("_body"))
        .otherwise(pl.col("title"))
        .alias("text"),
    )


def split_dataset(dataset: Dataset, words: int = 100) -> Dataset:
    """The dataset over passages: corpus split by :func:`split_passages`, qrels mapped.

    Judgment policy: a judgment of document ``d`` is copied, with the same relevance, to every
    passage of ``d`` — the judgments say which document is relevant, not which passage holds
    the evidence. Queries are unchanged. The corpus keeps the extra ``parent_id`` column. The
    spec gains ``passages=<words>`` unless it already names that option, so a spec string
    still identifies the data it produced.
    """
    passages = split_passages(dataset.corpus, words)
    qrels = dataset.qrels.join(
        passages.select(pl.col("parent_id").alias("doc_id"), pl.col("doc_id").alias("_passage")),
        on="doc_id",
        how="inner",
        maintain_order="left_right",
    ).select("query_id", pl.col("_passage").alias("doc_id"), "relevance")
    return Dataset(_spec_with_passages(dataset.spec, words), passages, dataset.queries, qrels)


def _spec_with_passages(spec: str, words: int) -> str:
    options = spec.partition("?")[2]
    if any(item.partition("=")[0].strip() == "passages" for item in options.split("&")):
        return spec
    return f"{spec}{'&' if '?' in spec else '?'}passages={words}"
