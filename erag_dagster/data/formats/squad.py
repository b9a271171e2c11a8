"""SQuAD v1.1 JSON (plain, gzip or zipped) and the embedded SQuAD sample."""

from __future__ import annotations

import gzip
import json
import zipfile
import zlib
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.core.input_files import bounded_read, decode, open_binary, parse_json
from erag_dagster.data.formats.records import unique_nonempty
from erag_dagster.data.schema import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, Dataset

SAMPLE_FILE = "squad-v1.1-dev-sample.json"
"""Name of the embedded sample inside the ``erag_dagster.data`` package's ``sample/`` folder."""


def load_squad(path: Path, spec: str | None = None) -> Dataset:
    """Read SQuAD v1.1 JSON (plain, ``.gz``, or the single ``.json`` member of a ``.zip``).

    * corpus: one document per paragraph, ``doc_id = f"{article_title}_{paragraph_index}"``
      (the raw title, 0-based index within the article, e.g. ``Super_Bowl_50_0``), ``title`` =
      the article title with ``_`` shown as spaces, ``text`` = the context unchanged.
    * queries: the SQuAD question id, the question with surrounding whitespace stripped, and
      every non-empty gold answer text (exact-string duplicates removed, first-seen order).
    * qrels: ``(question id, its paragraph's doc_id, 1)``.

    A question without any non-empty answer (e.g. a SQuAD v2 unanswerable one), an answer whose
    ``text`` is not a string (``42``), a repeated question id or article title, or a structure
    that is not SQuAD's is an :class:`InputError` naming the file and the question id or
    article. The file is read under the input rule (:mod:`erag_dagster.core.input_files`: a regular
    file, bounded also once decompressed, BOM stripped, duplicate keys refused at ``file:line``).
    """
    label, data = _read_squad_json(path)
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise InputError(f"{label}: not SQuAD JSON (no top-level 'data' list)")
    docs: dict[str, list[str]] = {"doc_id": [], "title": [], "text": []}
    query_ids: list[str] = []
    questions: list[str] = []
    answer_lists: list[list[str]] = []
    qrel_docs: list[str] = []
    seen_titles: set[str] = set()
    seen_questions: set[str] = set()
    for a_index, article in enumerate(articles):
        at = f"{label}: article {a_index}"
        title = _get(article, "title", str, at)
        if title in seen_titles:
            raise InputError(
                f"{label}: article title {title!r} appears twice (doc ids would clash)"
            )
        seen_titles.add(title)
        for p_index, paragraph in enumerate(_get(article, "paragraphs", list, at)):
            pt = f"{label}: article {title!r} paragraph {p_index}"
            doc_id = f"{title}_{p_index}"
            docs["doc_id"].append(doc_id)
            docs["title"].append(title.replace("_", " "))
            docs["text"].append(_get(paragraph, "context", str, pt))
            for qa in _get(paragraph, "qas", list, pt, default=[]):
                qid = str(_get(qa, "id", (str, int), pt))
                qt = f"{label}: question {qid!r}"
                if qid in seen_questions:
                    raise InputError(f"{qt} appears twice")
                seen_questions.add(qid)
                answers = unique_nonempty(_answer_texts(qa, qt))
                if not answers:
                    raise InputError(
                        f"{qt} has no gold answers (unanswerable SQuAD v2 questions are not "
                        "supported)"
                    )
                query_ids.append(qid)
                questions.append(_get(qa, "question", str, qt).strip())
                answer_lists.append(answers)
                qrel_docs.append(doc_id)
    if not docs["doc_id"]:
        raise InputError(f"{label}: the corpus is empty (no paragraphs)")
    corpus = pl.DataFrame(docs, schema=CORPUS_SCHEMA)
    queries = pl.DataFrame(
        {"query_id": query_ids, "question": questions, "answers": answer_lists},
        schema=QUERIES_SCHEMA,
    )
    qrels = pl.DataFrame(
        {"query_id": query_ids, "doc_id": qrel_docs, "relevance": [1] * len(query_ids)},
        schema=QRELS_SCHEMA,
    )
    return Dataset(spec or f"squad:{path}", corpus, queries, qrels)


def sample_file() -> Path:
    """Path of the embedded SQuAD v1.1 dev slice inside the installed package."""
    path = Path(str(resources.files("erag_dagster.data").joinpath("sample", SAMPLE_FILE)))
    if not path.is_file():
        raise InputError(f"the embedded sample is missing from the installation: {path}")
    return path


def load_sample(spec: str = "sample") -> Dataset:
    """The embedded SQuAD v1.1 dev slice (CC BY-SA 4.0), read with :func:`load_squad`.

    See ``erag_dagster/data/sample/ATTRIBUTION.md`` for its source and contents.
    """
    return load_squad(sample_file(), spec)


def _read_squad_json(path: Path) -> tuple[str, Any]:
    """Parse the JSON; returns a label for messages (``file`` or ``archive/member``) and data.

    Read under the input rule (:mod:`erag_dagster.core.input_files`): a regular file within the
    input limit, which also bounds the decompressed size of a ``.gz`` or ``.zip``.
    """
    try:
        with open_binary(path) as handle:
            if zipfile.is_zipfile(handle):
                with zipfile.ZipFile(handle) as archive:
                    members = [
                        n for n in archive.namelist() if n.endswith(".json") and "__MACOSX" not in n
                    ]
                    if len(members) != 1:
                        raise InputError(
                            f"{path}: expected exactly one .json member in the zip, found "
                            f"{len(members)} ({', '.join(members) or 'none'})"
                        )
                    label = f"{path}/{members[0]}"
                    with archive.open(members[0]) as raw:
                        return label, parse_json(decode(bounded_read(raw, label), label), label)
            handle.seek(0)
            if path.suffix == ".gz":
                with gzip.GzipFile(fileobj=handle) as raw:
                    data = bounded_read(raw, str(path))
            else:
                data = bounded_read(handle, str(path))
        return str(path), parse_json(decode(data, str(path)), str(path))
    except (OSError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from exc


def _get(obj: Any, key: str, kind: type | tuple[type, ...], at: str, default: Any = ...) -> Any:
    """``obj[key]`` checked to be of ``kind``; a missing key gives ``default`` or an error."""
    if not isinstance(obj, dict):
        raise InputError(f"{at}: expected a JSON object, found {type(obj).__name__}")
    value = obj.get(key, default)
    if value is ...:
        raise InputError(f"{at}: missing field {key!r}")
    if value is None and default is not ...:
        return default
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"{at}: field {key!r} has type {type(value).__name__}")
    return value


def _answer_texts(qa: Any, at: str) -> list[Any]:
    """The ``text`` of every entry of a question's ``answers``; an entry that is not an object,
    or whose ``text`` is not a string (e.g. the number ``42``), is an error naming it."""
    texts: list[Any] = []
    for index, answer in enumerate(_get(qa, "answers", list, at, default=[])):
        if not isinstance(answer, dict):
            raise InputError(
                f"{at}: answer {index} is {type(answer).__name__}, not an object with a 'text'"
            )
        text = answer.get("text")
        if not isinstance(text, str):
            shown = json.dumps(text)[:40]
            raise InputError(
                f"{at}: answer {index} 'text' is {_json_type(text)} ({shown}), not a string; "
                "write the answer in quotes"
            )
        texts.append(text)
    return texts


def _json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", list: "a list"}
    names[dict] = "an object"
    return "null" if value is None else names.get(type(value), type(value).__name__)
