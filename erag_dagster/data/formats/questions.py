"""A question log with a corpus: questions only, no gold answers and no judgments.

``questions:FILE[?corpus=PATH]`` — what a RAG team has from its logs. Labels for it score the
reader's answers against a reference answer instead of gold (``evaluation.reference``,
docs/label-methods.md, "Labels without gold answers").

* ``FILE`` ending in ``.jsonl``: one JSON object per non-blank line with the question in
  ``question`` (or ``query``, or ``text``, the BEIR name) and, optionally, its id in
  ``query_id`` (or ``_id``, or ``id``; a string or an integer). Other fields (a timestamp, a
  user) are ignored — except ``answers``/``answer``: a log with gold answers is a ``jsonl:``
  folder (docs/data.md), so one is refused rather than dropped. Any other ``FILE``: one
  question per non-blank line, stripped.
* A question without an id gets ``q-`` and the first 12 hex digits of its text's sha256: the
  same question keeps its id (and the stored answers keyed by it) in next week's log.
  Identical questions without ids are one query (the first line kept: :func:`log_records`
  counts the lines); an id given twice is an :class:`InputError` naming both lines.
* The corpus: ``PATH`` (as given if it exists, else beside ``FILE``), default ``corpus.jsonl``
  beside ``FILE``: JSON lines with ``_id`` (BEIR) or ``doc_id``, ``title`` (optional) and
  ``text``; or a ``.parquet`` table with ``doc_id``, ``title`` (optional), ``text``.

Every problem is one :class:`InputError` at ``file:line``: a blank question, a record that is
not an object, a missing question field, a refused answers field, an empty log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from erag_dagster.core.errors import InputError, where
from erag_dagster.core.hashing import sha256_text
from erag_dagster.core.input_files import regular_file, text_lines
from erag_dagster.data.formats.records import (
    Column,
    check_nonempty_corpus,
    check_unique,
    iter_jsonl_objects,
    read_corpus,
    read_table,
)
from erag_dagster.data.schema import QRELS_SCHEMA, QUERIES_SCHEMA, Dataset

QUESTION_FIELDS = ("question", "query", "text")
ID_FIELDS = ("query_id", "_id", "id")
ANSWER_FIELDS = ("answers", "answer")
DEFAULT_CORPUS = "corpus.jsonl"


class LogFiles(NamedTuple):
    """The question log and the corpus file a ``questions:`` spec reads."""

    log: Path
    corpus: Path


def log_files(path: Path, corpus: str | None = None, spec: str | None = None) -> LogFiles:
    """The files ``questions:FILE[?corpus=PATH]`` reads (module docstring); a missing one is
    an :class:`InputError` naming it."""
    if not path.exists():
        raise InputError(f"{path}: no such file (questions: needs a question log)")
    regular_file(path)
    name = corpus or DEFAULT_CORPUS
    candidate = Path(name).expanduser()
    if corpus is not None and candidate.exists():
        found = candidate
    elif not candidate.is_absolute() and (path.parent / candidate).exists():
        found = path.parent / candidate
    else:
        hint = (
            "" if corpus else f" (give one with ?corpus=PATH; default {DEFAULT_CORPUS} beside it)"
        )
        raise InputError(f"dataset spec {spec or str(path)!r}: no corpus file {candidate}{hint}")
    regular_file(found)
    return LogFiles(path, found)


def question_id(question: str) -> str:
    """The id of a question given without one: ``q-`` + 12 hex digits of its sha256."""
    return f"q-{sha256_text(question)[:12]}"


def _first(record: dict[str, Any], fields: tuple[str, ...]) -> tuple[str | None, Any]:
    for name in fields:
        if name in record and record[name] is not None:
            return name, record[name]
    return None, None


def log_records(path: Path) -> list[tuple[str, str | None, str]]:
    """``(file:line, id or None, question)`` of every record of the log, in file order
    (module docstring: the fields read, what is refused)."""
    out: list[tuple[str, str | None, str]] = []
    if path.suffix.lower() == ".jsonl":
        for number, record in iter_jsonl_objects(path):
            at = where(path, number)
            refused, _ = _first(record, ANSWER_FIELDS)
            if refused is not None:
                raise InputError(
                    f"{at}: a question log holds questions only, this record has {refused!r}; "
                    "a dataset with gold answers is a jsonl: folder (docs/data.md)"
                )
            field, question = _first(record, QUESTION_FIELDS)
            if field is None:
                raise InputError(f"{at}: no question (a field {', '.join(QUESTION_FIELDS)})")
            if not isinstance(question, str) or not question.strip():
                raise InputError(f"{at}: {field} must be a non-empty string, not {question!r}")
            id_field, qid = _first(record, ID_FIELDS)
            if id_field is not None:
                if isinstance(qid, bool) or not isinstance(qid, str | int) or not str(qid).strip():
                    raise InputError(f"{at}: {id_field} must be a non-empty string or an integer")
                qid = str(qid)
            out.append((at, qid, question.strip()))
    else:
        for number, line in text_lines(path):
            if line.strip():
                out.append((where(path, number), None, line.strip()))
    if not out:
        raise InputError(f"{path}: the question log holds no question")
    return out


def _queries(records: list[tuple[str, str | None, str]]) -> pl.DataFrame:
    """One query per id (explicit, or the question's own); identical questions without ids
    are one query; an explicit id given twice is an :class:`InputError` naming both lines."""
    seen: dict[str, str] = {}
    rows: list[tuple[str, str]] = []
    for at, given, question in records:
        qid = given if given is not None else question_id(question)
        if qid in seen:
            if given is None:
                continue  # the same question again: one query
            raise InputError(f"{at}: duplicate query id {qid!r} (first at {seen[qid]})")
        seen[qid] = at
        rows.append((qid, question))
    return pl.DataFrame(
        {
            "query_id": [r[0] for r in rows],
            "question": [r[1] for r in rows],
            "answers": [[] for _ in rows],
        },
        schema=QUERIES_SCHEMA,
    )


def _corpus(path: Path) -> pl.DataFrame:
    if path.suffix.lower() == ".parquet":
        corpus = read_table(
            path,
            "parquet",
            [
                Column("doc_id", "doc_id", "id"),
                Column("title", "title", "str", required=False),
                Column("text", "text", "str"),
            ],
        )
        check_nonempty_corpus(corpus, path)
        check_unique(corpus, "doc_id", path, "parquet", "doc_id")
        return corpus
    id_field = "doc_id"
    for _, record in iter_jsonl_objects(path):
        id_field = "_id" if "_id" in record else "doc_id"
        break
    return read_corpus(path, id_field, "title", Column("text", "text", "str"), id_field)


def load_question_log(path: Path, corpus_file: Path, spec: str | None = None) -> Dataset:
    """A question log and its corpus as a :class:`Dataset`: questions with no answers, an
    empty qrels table (module docstring for the rules)."""
    queries = _queries(log_records(path))
    corpus = _corpus(corpus_file)
    return Dataset(spec or f"questions:{path}", corpus, queries, pl.DataFrame(schema=QRELS_SCHEMA))
