"""BEIR folders: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import polars as pl

from erag_dagster.core.errors import InputError, where
from erag_dagster.core.input_files import regular_file, text_lines
from erag_dagster.core.input_numbers import parse_grade
from erag_dagster.data.formats.records import (
    Column,
    check_references,
    coerce,
    read_corpus,
    records_with_ids,
    unique_nonempty,
)
from erag_dagster.data.schema import MAX_RELEVANCE, QRELS_SCHEMA, QUERIES_SCHEMA, Dataset


class BeirFiles(NamedTuple):
    """The three files a BEIR folder's loader reads."""

    corpus: Path
    queries: Path
    qrels: Path


def beir_files(directory: Path, split: str = "test") -> BeirFiles:
    """``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` of a BEIR folder.

    Raises :class:`InputError` if the folder or one of the files is missing (naming the
    splits that exist when the split's qrels file is the missing one).
    """
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory (beir: needs a BEIR folder)")
    if "/" in split or "\\" in split or split in ("", ".", ".."):
        raise InputError(
            f"{directory}: split {split!r} is not a file name in the qrels/ folder "
            "(e.g. test, dev, train)"
        )
    corpus_file = directory / "corpus.jsonl"
    queries_file = directory / "queries.jsonl"
    qrels_file = directory / "qrels" / f"{split}.tsv"
    for needed in (corpus_file, queries_file):
        if not needed.exists():
            raise InputError(f"{needed}: no such file (expected in a BEIR folder)")
        regular_file(needed)
    if not qrels_file.exists():
        splits = sorted(p.stem for p in (directory / "qrels").glob("*.tsv"))
        raise InputError(
            f"{qrels_file}: no such file; splits available: {', '.join(splits) or 'none'}"
        )
    regular_file(qrels_file)
    return BeirFiles(corpus_file, queries_file, qrels_file)


def load_beir(directory: Path, split: str = "test", spec: str | None = None) -> Dataset:
    """Read a BEIR folder: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

    * corpus: ``_id`` (str or int) → ``doc_id``; missing ``title``/``text`` become ``""``.
    * queries: ``_id``, ``text``; ``answers`` from ``metadata.answers`` and/or
      ``metadata.answer`` (string or list) when present, else an empty list. **Only queries
      with at least one judgment in the split are kept** (as BEIR's own loader does), in
      ``queries.jsonl`` order; judgments with score 0 count as judgments.
    * qrels: tab-separated ``query-id corpus-id score``, with or without a header line. The
      first line is a header if its third field is not an integer (BEIR's own loader always
      skips line 1, silently losing a judgment of header-less files; this one does not).
      Blank lines are ignored; a line without exactly three fields, a non-integer score, a
      repeated (query, document) pair, or a judgment naming an unknown document or query is
      an :class:`InputError` at ``file:line``.
    """
    corpus_file, queries_file, qrels_file = beir_files(directory, split)
    corpus = read_corpus(
        corpus_file, "_id", "title", Column("text", "text", "str", False), "doc_id"
    )
    queries = _read_beir_queries(queries_file)
    qrels, qrel_lines = _read_qrels_tsv(qrels_file)

    def place(row: int) -> str:
        return where(qrels_file, qrel_lines[row])

    check_references(qrels, corpus, queries, place, queries_file, corpus_file)
    queries = queries.join(
        qrels.select("query_id").unique(), on="query_id", how="semi", maintain_order="left"
    )
    return Dataset(spec or f"beir:{directory}?split={split}", corpus, queries, qrels)


def _read_beir_queries(path: Path) -> pl.DataFrame:
    """BEIR queries, line by line (they are few and carry free-form ``metadata``)."""
    ids: list[str] = []
    questions: list[str] = []
    answer_lists: list[list[str]] = []
    text_column = Column("text", "question", "str")
    id_column = Column("_id", "query_id", "id")
    for _, at, qid, record in records_with_ids(path, id_column, "query_id"):
        answers: list[str] = []
        metadata = record.get("metadata")
        if isinstance(metadata, dict):
            for key in ("answers", "answer"):
                answers += coerce(metadata, Column(key, "answers", "answers", False), at)
        elif metadata is not None:
            raise InputError(f"{at}: 'metadata' is not a JSON object")
        ids.append(qid)
        questions.append(coerce(record, text_column, at))
        answer_lists.append(unique_nonempty(answers))
    return pl.DataFrame(
        {"query_id": ids, "question": questions, "answers": answer_lists}, schema=QUERIES_SCHEMA
    )


def _read_qrels_tsv(path: Path) -> tuple[pl.DataFrame, list[int]]:
    """``query-id<TAB>corpus-id<TAB>score`` lines (header optional) and their line numbers."""
    query_ids: list[str] = []
    doc_ids: list[str] = []
    scores: list[int] = []
    lines: list[int] = []
    seen: dict[tuple[str, str], int] = {}
    first = True
    for number, line in text_lines(path):
        if not line.strip():
            continue
        fields = line.rstrip("\r\n").split("\t")
        fields = [f.strip() for f in fields]
        if first:
            first = False
            if len(fields) == 3 and _is_header(fields[2]):
                continue  # header, e.g. "query-id corpus-id score"
        at = where(path, number)
        if len(fields) != 3:
            raise InputError(
                f"{at}: expected 3 tab-separated fields (query-id, corpus-id, score), "
                f"found {len(fields)}"
            )
        qid, did, score_text = fields
        if not qid or not did:
            raise InputError(f"{at}: empty query-id or corpus-id")
        score = parse_grade(score_text, at, "score")
        if not 0 <= score <= MAX_RELEVANCE:
            raise InputError(
                f"{at}: score {score} is out of range; relevance grades are integers "
                f"from 0 to {MAX_RELEVANCE}"
            )
        if (qid, did) in seen:
            raise InputError(
                f"{at}: second judgment for query {qid!r} and document {did!r} "
                f"(first at line {seen[(qid, did)]})"
            )
        seen[(qid, did)] = number
        query_ids.append(qid)
        doc_ids.append(did)
        scores.append(score)
        lines.append(number)
    if not lines:
        raise InputError(f"{path}: no judgments")
    frame = pl.DataFrame(
        {"query_id": query_ids, "doc_id": doc_ids, "relevance": scores}, schema=QRELS_SCHEMA
    )
    return frame, lines


def _is_header(field: str) -> bool:
    """A first line is a header when its score field is a word (``score``), not a number."""
    return field[:1].isascii() and field[:1].isalpha()
