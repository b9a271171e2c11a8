"""A run joined to the text of the documents it names: the one home of that join and its checks.

The labeller, the baselines, end-to-end evaluation, the reranker and the semantic labels all
need, for each ``(query_id, doc_id)`` row of a run, the text a model sees of that document.
:func:`run_with_passages` does that join; a run naming a document missing from the corpus is an
:class:`~erag_dagster.core.errors.InputError` naming the first such row (run order) and how many
rows name an unknown document. :func:`check_run_queries` is the same check for query ids.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.readers.prompts import reader_passage

__all__ = ["check_run_queries", "reader_passages", "run_with_passages"]

Render = Callable[[pl.DataFrame], list[str]]
"""Texts of corpus rows (``doc_id, title, text``), one per row, in row order."""


def reader_passages(docs: pl.DataFrame) -> list[str]:
    """What the reader sees of each document (:func:`reader_passage`: title + newline + text)."""
    return [reader_passage(title, text) for title, text in docs.select("title", "text").rows()]


def run_with_passages(
    run: pl.DataFrame, corpus: pl.DataFrame, render: Render = reader_passages
) -> pl.DataFrame:
    """``run`` (all its columns, row order kept; ``query_id``/``doc_id`` cast to strings) plus
    ``passage``: ``render`` of the document each row names. Only the documents the run names
    are rendered (the corpus may be large). Raises :class:`InputError` for an unknown doc id.
    """
    run = run.with_columns(pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String))
    docs = (
        run.select("doc_id")
        .unique(maintain_order=True)
        .join(
            corpus.select(pl.col("doc_id").cast(pl.String), "title", "text"),
            on="doc_id",
            how="inner",
            maintain_order="left",
        )
    )
    unknown = run.join(docs.select("doc_id"), on="doc_id", how="anti", maintain_order="left")
    if unknown.height:
        row = unknown.row(0, named=True)
        raise InputError(
            f"the run names doc_id {row['doc_id']!r} (query {row['query_id']!r}; "
            f"{unknown.height} such rows), which is not in the corpus"
        )
    texts = docs.select("doc_id").with_columns(pl.Series("passage", render(docs), dtype=pl.String))
    return run.join(texts, on="doc_id", how="left", maintain_order="left")


def check_run_queries(run: pl.DataFrame, queries: pl.DataFrame) -> None:
    """Raise :class:`InputError` naming the first query id of ``run`` (run order) that is not
    in ``queries``, and how many rows name an unknown query."""
    known = queries.select(pl.col("query_id").cast(pl.String))
    unknown = run.select(pl.col("query_id").cast(pl.String)).join(
        known, on="query_id", how="anti", maintain_order="left"
    )
    if unknown.height:
        raise InputError(
            f"the run names query_id {unknown.item(0, 'query_id')!r} ({unknown.height} such "
            "rows), which is not in the queries"
        )
