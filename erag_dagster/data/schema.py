"""The three tables every dataset becomes, and their validation.

* ``corpus``  — ``doc_id: str, title: str, text: str`` (one row per document or passage)
* ``queries`` — ``query_id: str, question: str, answers: list[str]`` (``answers`` may be empty
  for retrieval-only collections such as BEIR; labelling with a downstream metric then refuses
  those queries with an :class:`~erag_dagster.core.errors.InputError`)
* ``qrels``   — ``query_id: str, doc_id: str, relevance: int64`` (human / provenance judgments)

Validation policy: ids are non-empty strings and unique within their table; every qrels row
names a known query and a known document; an empty corpus or an empty query set is an error.
A question that is empty or only whitespace is an error naming the query (BM25 would silently
drop it). A relevance grade is an integer in ``[0, MAX_RELEVANCE]``: a null grade is refused
(not read as relevant), and so is a negative one — trec_eval would read it as "judged
non-relevant", but no dataset format here documents negative grades, so one is taken for a
data error; the upper bound is pytrec_eval's C ``int``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from erag_dagster.core.errors import InputError

CORPUS_SCHEMA = {"doc_id": pl.String, "title": pl.String, "text": pl.String}
QUERIES_SCHEMA = {"query_id": pl.String, "question": pl.String, "answers": pl.List(pl.String)}
QRELS_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int64}
MAX_RELEVANCE = 2**31 - 1
"""Largest relevance grade: pytrec_eval stores grades in a C ``int``."""


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset: the spec it came from, its three tables, and the files it was read from.

    ``source_files`` is set by :func:`erag_dagster.data.loaders.load_dataset` (empty for a
    dataset built in memory); the input fingerprint hashes exactly these files.
    """

    spec: str
    corpus: pl.DataFrame
    queries: pl.DataFrame
    qrels: pl.DataFrame
    source_files: tuple[Path, ...] = ()

    def validate(self) -> Dataset:
        """Check schemas and referential integrity; return ``self`` or raise ``InputError``."""
        validate_corpus(self.corpus, self.spec)
        validate_queries(self.queries, self.spec)
        validate_qrels(self.qrels, self.corpus, self.queries, self.spec)
        return self


def _first_duplicate(frame: pl.DataFrame, column: str) -> str | None:
    dup = frame.filter(pl.col(column).is_duplicated()).get_column(column)
    return None if dup.is_empty() else str(dup[0])


def _validate_ids(frame: pl.DataFrame, column: str, messages: tuple[str, str, str]) -> None:
    """The id rule of a table: rows present, ids non-empty and unique. ``messages``: what to
    say for no rows, an empty id, and a duplicate (``{dup!r}`` is filled in)."""
    empty_table, empty_id, duplicate = messages
    if frame.height == 0:
        raise InputError(empty_table)
    if frame.filter(pl.col(column).is_null() | (pl.col(column) == "")).height:
        raise InputError(empty_id)
    dup = _first_duplicate(frame, column)
    if dup is not None:
        raise InputError(duplicate.format(dup=dup))


def validate_corpus(corpus: pl.DataFrame, source: str) -> None:
    """Raise ``InputError`` if the corpus is empty, has null/empty or duplicate ``doc_id``s."""
    _validate_ids(
        corpus,
        "doc_id",
        (
            f"{source}: the corpus is empty (no documents)",
            f"{source}: a document has an empty doc_id",
            f"{source}: duplicate doc_id {{dup!r}} in the corpus",
        ),
    )


def validate_queries(queries: pl.DataFrame, source: str) -> None:
    """Raise ``InputError`` if there are no queries, or null/empty or duplicate ``query_id``s,
    or an empty question."""
    _validate_ids(
        queries,
        "query_id",
        (
            f"{source}: no queries",
            f"{source}: a query has an empty query_id",
            f"{source}: duplicate query_id {{dup!r}}",
        ),
    )
    require_questions(queries, source)


TREC_ID_SPLITS = r"[\s\x1c-\x1f]"
"""What :meth:`str.split` splits a TREC line on (Unicode White_Space and ``\x1c``-``\x1f``): an
id holding one (or an empty id) cannot stand in a TREC run or qrels file."""


def ids_trec_cannot_hold(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    """The rows of ``frame`` whose ``column`` id a TREC file cannot hold (null, empty, or
    holding :data:`TREC_ID_SPLITS`): the one rule ``retrieve`` refuses by
    (:func:`erag_dagster.retrieval.runs.check_trec_ids`) and ``check-dataset`` reports by."""
    value = pl.col(column)
    return frame.filter(value.is_null() | (value == "") | value.str.contains(TREC_ID_SPLITS))


_INVISIBLE = r"[\s\x1c-\x1f\p{Cf}]"
"""What a question may not consist of only: whitespace (as :meth:`str.split` sees it) and format
characters (Unicode category Cf: U+200B zero-width space, U+200C/D joiners, U+2060, U+FEFF)."""


def require_questions(queries: pl.DataFrame, source: str) -> None:
    """Raise ``InputError`` naming the first query whose question is null, empty or only
    whitespace and invisible format characters (:data:`_INVISIBLE`; BM25 would silently drop
    it; a reader would answer nothing)."""
    question = pl.col("question")
    blank = queries.filter(question.is_null() | (question.str.replace_all(_INVISIBLE, "") == ""))
    if blank.height:
        raise InputError(
            f"{source}: query {blank.get_column('query_id')[0]!r} has an empty question "
            f"({blank.height} such queries); give it text or leave it out"
        )


def validate_qrels(
    qrels: pl.DataFrame, corpus: pl.DataFrame, queries: pl.DataFrame, source: str
) -> None:
    """Raise ``InputError`` if a judgment names an unknown query or document, or its relevance
    grade is null or outside ``[0, MAX_RELEVANCE]``."""
    bad = qrels.filter(
        pl.col("relevance").is_null()
        | (pl.col("relevance") < 0)
        | (pl.col("relevance") > MAX_RELEVANCE)
    )
    if bad.height:
        row = bad.row(0, named=True)
        raise InputError(
            f"{source}: relevance {row['relevance']} of query {row['query_id']!r} and document "
            f"{row['doc_id']!r} is not a grade from 0 to {MAX_RELEVANCE} "
            f"({bad.height} such judgments)"
        )
    unknown_doc = qrels.join(corpus.select("doc_id"), on="doc_id", how="anti")
    if unknown_doc.height:
        row = unknown_doc.row(0, named=True)
        raise InputError(
            f"{source}: qrels for query {row['query_id']!r} name unknown doc_id {row['doc_id']!r}"
        )
    unknown_q = qrels.join(queries.select("query_id"), on="query_id", how="anti")
    if unknown_q.height:
        row = unknown_q.row(0, named=True)
        raise InputError(f"{source}: qrels name unknown query_id {row['query_id']!r}")


def require_answers(queries: pl.DataFrame, source: str) -> None:
    """Raise ``InputError`` naming the first query whose ``answers`` list is null or empty."""
    missing = queries.filter(pl.col("answers").is_null() | (pl.col("answers").list.len() == 0))
    if missing.height:
        qid = missing.get_column("query_id")[0]
        raise InputError(
            f"{source}: query {qid!r} has no gold answers ({missing.height} such queries); "
            "eRAG labels need gold answers"
        )
