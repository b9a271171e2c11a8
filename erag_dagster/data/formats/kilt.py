"""KILT JSON lines, with an optional KILT knowledge source as the corpus."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import polars as pl

from erag_dagster.core.errors import InputError, where
from erag_dagster.core.input_files import regular_file
from erag_dagster.data.formats.records import (
    Column,
    check_references,
    check_value,
    coerce,
    read_corpus,
    records_with_ids,
    unique_nonempty,
)
from erag_dagster.data.schema import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, Dataset

_INPUT = Column("input", "question", "str")
_ANSWER = Column("answer", "answers", "str", required=False)
_PROVENANCE_TEXT = (
    Column("title", "title", "str", required=False),
    Column("text", "text", "str", required=False),
)
"""The text fields of a KILT record (records.check_value: a string, or null)."""


class KiltFiles(NamedTuple):
    """The KILT file and, when a spec gives ``corpus=``, the knowledge source it resolved to."""

    kilt: Path
    corpus: Path | None


def kilt_files(path: Path, corpus: str | None = None, spec: str | None = None) -> KiltFiles:
    """The files ``kilt:PATH[?corpus=NAME]`` reads.

    ``NAME`` is taken as given (relative to the working directory) if it exists, else
    relative to the folder of the KILT file. Raises :class:`InputError` naming the spec if
    either is missing.
    """
    _check_kilt_file(path)
    if corpus is None:
        return KiltFiles(path, None)
    candidate = Path(corpus).expanduser()
    if candidate.exists():
        return KiltFiles(path, candidate)
    beside = path.parent / candidate
    if not candidate.is_absolute() and beside.exists():
        return KiltFiles(path, beside)
    raise InputError(f"dataset spec {spec or corpus!r}: no such file or directory: {candidate}")


def _check_kilt_file(path: Path) -> None:
    if not path.exists():
        raise InputError(f"{path}: no such file (kilt: needs a KILT .jsonl file)")
    regular_file(path)


def load_kilt(path: Path, corpus_file: Path | None = None, spec: str | None = None) -> Dataset:
    """Read a KILT JSON-lines file (``id``, ``input``, ``output[].answer``/``provenance``).

    * queries: ``id`` (int or str → str), ``input`` (required, non-blank) and every non-blank
      ``output[].answer`` (duplicates removed, order kept). A record with no answer is an
      :class:`InputError` at ``file:line`` (KILT test files without outputs cannot be used).
    * qrels: one ``(id, str(wikipedia_id), 1)`` per distinct page named in any
      ``output[].provenance``; ``wikipedia_id`` may be an int or a string.
    * corpus with ``corpus=FILE``: a KILT knowledge source (``wikipedia_id``,
      ``wikipedia_title``, ``text`` = list of paragraphs), one document per page, the
      paragraphs stripped, blank ones dropped, joined by newlines. A provenance page missing
      from it is an error. In a spec, a relative FILE is looked up in the working directory
      first, then beside the KILT file.
    * corpus without ``corpus=``: a stand-in built from the provenance itself, one document per
      page in first-seen order: ``title`` = the first non-blank provenance ``title``,
      ``text`` = the distinct non-blank provenance ``text`` values joined by newlines, or ``""``
      when provenance carries no text (KILT's usually does not). Good for smoke tests, not for
      a real retrieval evaluation. With no provenance at all this corpus is empty: an error.
    """
    _check_kilt_file(path)
    ids: list[str] = []
    questions: list[str] = []
    answer_lists: list[list[str]] = []
    qrel_rows: dict[tuple[str, str], int] = {}
    pages: dict[str, tuple[str, list[str]]] = {}
    id_column = Column("id", "query_id", "id")
    page_column = Column("wikipedia_id", "doc_id", "id")
    for number, at, qid, record in records_with_ids(path, id_column, "id"):
        question = record.get("input")
        check_value(question, _INPUT, at)  # a number where text is documented: refused
        if not isinstance(question, str) or not question.strip():
            raise InputError(f"{at}: record {qid!r} has no 'input' question")
        outputs = record.get("output") or []
        if not isinstance(outputs, list):
            raise InputError(f"{at}: 'output' of record {qid!r} is not a list")
        answers: list[str] = []
        for output in outputs:
            if not isinstance(output, dict):
                raise InputError(f"{at}: an 'output' entry of record {qid!r} is not an object")
            check_value(output.get("answer"), _ANSWER, at)
            answers.append(output.get("answer"))
            for provenance in output.get("provenance") or []:
                if not isinstance(provenance, dict):
                    raise InputError(f"{at}: a provenance entry of record {qid!r} is not an object")
                page = coerce(provenance, page_column, at)
                for column in _PROVENANCE_TEXT:
                    check_value(provenance.get(column.source), column, at)
                qrel_rows.setdefault((qid, page), number)
                title, texts = pages.setdefault(page, ("", []))
                new_title = provenance.get("title")
                if not title and isinstance(new_title, str) and new_title.strip():
                    pages[page] = (new_title, texts)
                text = provenance.get("text")
                if isinstance(text, str) and text.strip() and text not in texts:
                    texts.append(text)
        kept = unique_nonempty(answers)
        if not kept:
            raise InputError(f"{at}: record {qid!r} has no non-empty 'output' answer")
        ids.append(qid)
        questions.append(question.strip())
        answer_lists.append(kept)
    queries = pl.DataFrame(
        {"query_id": ids, "question": questions, "answers": answer_lists}, schema=QUERIES_SCHEMA
    )
    qrels = pl.DataFrame(
        {
            "query_id": [q for q, _ in qrel_rows],
            "doc_id": [d for _, d in qrel_rows],
            "relevance": [1] * len(qrel_rows),
        },
        schema=QRELS_SCHEMA,
    )
    if corpus_file is None:
        if not pages:
            raise InputError(
                f"{path}: the corpus is empty (no provenance pages); give a KILT knowledge "
                "source with ?corpus=FILE"
            )
        corpus = pl.DataFrame(
            {
                "doc_id": list(pages),
                "title": [title for title, _ in pages.values()],
                "text": ["\n".join(texts) for _, texts in pages.values()],
            },
            schema=CORPUS_SCHEMA,
        )
    else:
        text = Column("text", "text", "paragraphs", required=False)
        corpus = read_corpus(corpus_file, "wikipedia_id", "wikipedia_title", text, "wikipedia_id")
        qrel_lines = list(qrel_rows.values())
        check_references(
            qrels, corpus, queries, lambda row: where(path, qrel_lines[row]), path, corpus_file
        )
    suffix = f"?corpus={corpus_file}" if corpus_file is not None else ""
    return Dataset(spec or f"kilt:{path}{suffix}", corpus, queries, qrels)
