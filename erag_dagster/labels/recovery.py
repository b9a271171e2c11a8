"""The recovery file: answers a label store could not take, one verified JSON line each.

A recovery file (written by :meth:`~.store_base.LabelStoreBase.write_recovery`, read back by
``erag-dagster import-recovery``) holds two kinds of JSON lines:

* a **reader record** ``{"reader": {"reader_fingerprint", "name", "identity", "spec"},
  "line_sha256"}`` for every fingerprint its answers use, so the store they go into can
  register the reader (the store's audit needs its identity); ``spec`` is masked
  (:func:`~erag_dagster.core.credentials.mask_in`) before it is written;
* a **generation** line: the columns of :data:`~.tables.GENERATIONS_SCHEMA` plus
  ``line_sha256``.

``line_sha256`` is the sha256 of the canonical JSON (:func:`~erag_dagster.core.hashing.sha256_json`)
of the line's object without that field: it covers *every* field, the answer included, which
the generation key does not (the key names reader, query, question and document text). It
detects a line edited or damaged after it was written; it is not a signature (whoever edits a
line can recompute it), which is why the key is still recomputed and readers are still checked.

Reading (:func:`read_recovery_file`) checks every line before anything is written, and the
first bad line is one :class:`~erag_dagster.core.errors.InputError` at ``file:line``:

* JSON under the input rule (:mod:`erag_dagster.core.input_files`: a regular file within the input
  limit, BOM stripped, duplicate keys and deep nesting refused), a line at most
  :data:`MAX_LINE_CHARS` characters;
* exactly the known fields, each of its type: the four hashes 64 lower-case hex digits,
  ``query_id`` non-empty, ``answer`` at most :data:`MAX_ANSWER_CHARS` characters, ids at most
  :data:`MAX_ID_CHARS`, ``gen_seconds`` a finite number >= 0 (seconds), ``created_at`` an ISO
  8601 time with a UTC offset;
* ``line_sha256`` matches (a line without it — a file written before digests — is refused
  unless the caller accepts undigested lines explicitly: their answers cannot be verified);
* the generation key is the key of the line's own content;
* one answer per key: the same key twice with two different answers is refused at the second
  line, naming the first (the same answer twice is read once).

A reader record is *verified* when its identity hashes to its fingerprint — either directly
(``sha256_json(identity)``: a reader, the likelihood and annotation tasks) or as a task
fingerprint (``identity = {"task": T, "reader": R}`` and
``fingerprint = sha256_text(sha256_json(R) + "|" + T)``: closed-book and end-to-end answers,
:func:`~.cached.task_fingerprint`). Whether a fingerprint is acceptable also depends on the
store (registered there already, or carried and verified here): :mod:`.store_base` decides.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.core.credentials import mask_in
from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import canonical_json, sha256_json, sha256_text
from erag_dagster.core.input_files import parse_json, text_lines
from erag_dagster.labels.keys import generation_key
from erag_dagster.labels.tables import GENERATIONS_SCHEMA

__all__ = [
    "LINE_DIGEST",
    "MAX_ANSWER_CHARS",
    "MAX_ID_CHARS",
    "MAX_LINE_CHARS",
    "ReaderRecord",
    "RecoveryFile",
    "read_recovery_file",
    "recovery_text",
]

LINE_DIGEST = "line_sha256"
"""The field holding a line's digest (module docstring)."""
MAX_ANSWER_CHARS = 100_000
"""The longest answer a line may hold, in characters (a reader's answer is at most its
``max_new_tokens``; a probability is a few dozen characters)."""
MAX_ID_CHARS = 65_536
"""The longest query id, doc id or run id, in characters (an end-to-end answer's doc id is the
ranked ids joined by spaces)."""
MAX_LINE_CHARS = 4 * 2**20
"""The longest line, in characters (a reader record's identity lists model files' hashes)."""

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HASHES = ("generation_key", "reader_fingerprint", "question_hash", "text_hash")
_READER_FIELDS = ("reader_fingerprint", "name", "identity", "spec")


@dataclass(frozen=True)
class ReaderRecord:
    """What a store registers for a fingerprint: its name, identity and (masked) spec."""

    fingerprint: str
    name: str
    identity: Mapping[str, Any]
    spec: Mapping[str, Any] | None = None

    @property
    def verified(self) -> bool:
        """Whether the identity hashes to the fingerprint (directly or as a task fingerprint)."""
        identity = dict(self.identity)
        if sha256_json(identity) == self.fingerprint:
            return True
        task, reader = identity.get("task"), identity.get("reader")
        if set(identity) == {"task", "reader"} and isinstance(task, str):
            return isinstance(reader, dict) and (
                sha256_text(f"{sha256_json(reader)}|{task}") == self.fingerprint
            )
        return False

    def line(self) -> dict[str, Any]:
        """This record as a recovery-file line (digest included; the spec masked)."""
        spec = None if self.spec is None else mask_in(dict(self.spec))
        body = {
            "reader": {
                "reader_fingerprint": self.fingerprint,
                "name": self.name,
                "identity": dict(self.identity),
                "spec": spec,
            }
        }
        return {**body, LINE_DIGEST: sha256_json(body)}


@dataclass(frozen=True)
class RecoveryFile:
    """A checked recovery file: its generations (one row per key, first line's row kept), the
    reader records it carries, and where each fingerprint and record was first seen
    (``file:line``, for messages)."""

    generations: pl.DataFrame
    readers: dict[str, ReaderRecord] = field(default_factory=dict)
    reader_at: dict[str, str] = field(default_factory=dict)
    used_at: dict[str, str] = field(default_factory=dict)


def _digested(row: Mapping[str, Any]) -> dict[str, Any]:
    body = dict(row)
    body.pop(LINE_DIGEST, None)
    return {**body, LINE_DIGEST: sha256_json(body)}


def recovery_text(frame: pl.DataFrame, readers: Iterable[ReaderRecord] = ()) -> str:
    """The recovery file for ``frame`` (the columns of :data:`GENERATIONS_SCHEMA`, in order):
    the reader record of each fingerprint it uses that ``readers`` holds, then one digested line
    per row, in the frame's order. Empty frame: only the records."""
    used = set(frame.get_column("reader_fingerprint").unique().to_list()) if frame.height else set()
    records = sorted((r for r in readers if r.fingerprint in used), key=lambda r: r.fingerprint)
    seen: set[str] = set()
    lines = []
    for record in records:
        if record.fingerprint not in seen:
            seen.add(record.fingerprint)
            lines.append(canonical_json(record.line()))
    lines.extend(canonical_json(_digested(row)) for row in frame.iter_rows(named=True))
    return "".join(line + "\n" for line in lines)


def read_recovery_file(path: str | Path, accept_undigested: bool = False) -> RecoveryFile:
    """Read and check a recovery file (rules: module docstring); :class:`InputError` at the
    first bad line. ``accept_undigested``: lines without ``line_sha256`` are read (every other
    check still holds)."""
    label = str(path)
    if not Path(path).exists():
        raise InputError(f"{label}: recovery file not found")
    rows: list[dict[str, Any]] = []
    answers: dict[str, tuple[str, str]] = {}
    readers: dict[str, ReaderRecord] = {}
    reader_at: dict[str, str] = {}
    used_at: dict[str, str] = {}
    for number, line in text_lines(path):  # the input rule: regular, bounded, BOM stripped
        if not line.strip():
            continue
        at = f"{label}:{number}"
        if len(line) > MAX_LINE_CHARS:
            raise InputError(
                f"{at}: a line of {len(line)} characters is over the limit of {MAX_LINE_CHARS}; "
                "not a recovery file line"
            )
        row = _checked_object(parse_json(line, label, number), at, accept_undigested)
        if "reader" in row:
            if set(row) != {"reader"}:
                extra = ", ".join(repr(k) for k in sorted(set(row) - {"reader"}))
                raise InputError(f"{at}: a reader record line holds other fields too ({extra})")
            record = _reader_record(row["reader"], at)
            earlier = readers.get(record.fingerprint)
            if earlier is not None and earlier != record:
                raise InputError(
                    f"{at}: a second, different reader record for fingerprint "
                    f"{record.fingerprint[:16]}… (first at {reader_at[record.fingerprint]})"
                )
            readers.setdefault(record.fingerprint, record)
            reader_at.setdefault(record.fingerprint, at)
            continue
        generation = _generation(row, at)
        key, answer = generation["generation_key"], generation["answer"]
        if key in answers:
            first_answer, first_at = answers[key]
            if answer != first_answer:
                raise InputError(
                    f"{at}: a second, different answer for query {generation['query_id']!r}, "
                    f"doc {generation['doc_id']!r} (key {key[:16]}…; the first is at "
                    f"{first_at}): one answer per key; nothing of the file was imported"
                )
            continue
        answers[key] = (answer, at)
        used_at.setdefault(generation["reader_fingerprint"], at)
        rows.append(generation)
    if not rows:
        raise InputError(f"{label}: the recovery file holds no answers")
    frame = pl.DataFrame(rows, schema=GENERATIONS_SCHEMA)
    return RecoveryFile(frame, readers, reader_at, used_at)


def _checked_object(value: Any, at: str, accept_undigested: bool) -> dict[str, Any]:
    """A parsed line that is an object whose digest matches (or is absent and accepted)."""
    if not isinstance(value, dict):
        raise InputError(f"{at}: not a JSON object; not a recovery file line")
    if LINE_DIGEST not in value:
        if accept_undigested:
            return value
        raise InputError(
            f"{at}: no {LINE_DIGEST} (a recovery file written before line digests): its answer "
            "cannot be verified; pass --accept-undigested to import such a file anyway"
        )
    digest = value[LINE_DIGEST]
    body = {k: v for k, v in value.items() if k != LINE_DIGEST}
    if not isinstance(digest, str) or digest != sha256_json(body):
        raise InputError(
            f"{at}: {LINE_DIGEST} does not match the line's content (the line was edited or "
            "damaged after it was written); nothing of the file was imported"
        )
    return body


def _reader_record(value: Any, at: str) -> ReaderRecord:
    if not isinstance(value, dict) or set(value) != set(_READER_FIELDS):
        raise InputError(
            f"{at}: a reader record must be an object with exactly the fields "
            f"{', '.join(_READER_FIELDS)}"
        )
    fingerprint, name = value["reader_fingerprint"], value["name"]
    if not isinstance(fingerprint, str) or not _HEX64.fullmatch(fingerprint):
        raise InputError(f"{at}: reader_fingerprint must be 64 lower-case hex digits")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_ID_CHARS:
        raise InputError(f"{at}: the reader's name must be a non-empty string")
    if not isinstance(value["identity"], dict):
        raise InputError(f"{at}: the reader's identity must be a JSON object")
    if value["spec"] is not None and not isinstance(value["spec"], dict):
        raise InputError(f"{at}: the reader's spec must be a JSON object or null")
    return ReaderRecord(fingerprint, name, value["identity"], value["spec"])


def _generation(row: dict[str, Any], at: str) -> dict[str, Any]:
    """One checked generation line (types, bounds, time, key)."""
    unknown = sorted(set(row) - set(GENERATIONS_SCHEMA))
    if unknown:
        raise InputError(f"{at}: unknown field(s) {', '.join(map(repr, unknown))}")
    missing = [c for c in GENERATIONS_SCHEMA if c not in row and c != "producer_run_id"]
    if missing:
        raise InputError(f"{at}: missing field(s) {', '.join(map(repr, missing))}")
    for column, dtype in GENERATIONS_SCHEMA.items():
        value = row.get(column)
        if column == "producer_run_id" and value is None:
            continue
        if dtype.is_numeric():
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise InputError(f"{at}: {column} must be a number, got {_short(value)}")
        elif not isinstance(value, str):
            raise InputError(f"{at}: {column} must be a string, got {_short(value)}")
    for column in _HASHES:
        if not _HEX64.fullmatch(row[column]):
            raise InputError(
                f"{at}: {column} must be 64 lower-case hex digits, got {_short(row[column])}"
            )
    if not row["query_id"]:
        raise InputError(f"{at}: query_id is empty")
    for column in ("query_id", "doc_id", "producer_run_id"):
        value = row.get(column)
        if value is not None and len(value) > MAX_ID_CHARS:
            raise InputError(
                f"{at}: {column} of {len(value)} characters is over the limit of {MAX_ID_CHARS}"
            )
    if len(row["answer"]) > MAX_ANSWER_CHARS:
        raise InputError(
            f"{at}: an answer of {len(row['answer'])} characters is over the limit of "
            f"{MAX_ANSWER_CHARS} (no reader answer is that long); nothing of the file was imported"
        )
    seconds = row["gen_seconds"]
    if not math.isfinite(seconds) or seconds < 0:
        raise InputError(f"{at}: gen_seconds must be a finite number >= 0, got {seconds!r}")
    _check_time(row["created_at"], at)
    expected = generation_key(
        row["reader_fingerprint"], row["query_id"], row["question_hash"], row["text_hash"]
    )
    if row["generation_key"] != expected:
        raise InputError(
            f"{at}: generation_key {row['generation_key'][:16]}… is not the key of the "
            f"line's own content (query {row['query_id']!r}, doc {row['doc_id']!r}); the line "
            "was edited or forged: nothing of the file was imported"
        )
    return {column: row.get(column) for column in GENERATIONS_SCHEMA}


def _check_time(value: str, at: str) -> None:
    """``created_at``: ISO 8601 with a UTC offset (what :func:`~.keys.utc_now` writes)."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InputError(
            f"{at}: created_at {_short(value)} is not an ISO 8601 time "
            "(e.g. 2026-01-01T00:00:00+00:00)"
        ) from None
    if parsed.tzinfo is None:
        raise InputError(f"{at}: created_at {_short(value)} has no UTC offset (add +00:00)")


def _short(value: Any) -> str:
    """``repr`` of a value, cut to 60 characters (a 5 MB value is not echoed)."""
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "…"
