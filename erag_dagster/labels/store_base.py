"""The label store's interface and every rule that does not depend on the database.

A backend (:mod:`.store_sqlite`, :mod:`.store_postgres`) supplies connections, one write
transaction per call (insert-if-absent: a key already stored keeps its first row), key lookups
and the schema check; this class holds what the rows must satisfy, the recovery file and the
audit, so both backends store exactly the same content under the same keys (formulas and
columns: :mod:`erag_dagster.labels.store`, :mod:`.tables`).

Write policy shared by the backends: each ``put_*`` call is ONE transaction (a ``kill -9``
loses at most the batch being written), inserting rows in key order (two writers with
overlapping keys then wait on each other in one order, never in a cycle); a write that still
finds the store locked (or, for a server, unreachable) after ``busy_timeout_s`` raises
:class:`StoreLocked`: the caller keeps its rows (:mod:`erag_dagster.labels.cached` retries, then
writes them with :meth:`LabelStoreBase.write_recovery`). A commit that fails for a reason waiting
does not cure — a full disk (SQLite "database or disk is full", ``ENOSPC``), a file-size limit
(``EFBIG``: SQLite's "disk I/O error"), a server's ``disk_full`` — raises
:class:`StoreWriteFailed`: the transaction is rolled back (nothing half-written) and the caller
writes its rows to a recovery file at once. ``read_only=True`` writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.core.credentials import mask_credentials, mask_in
from erag_dagster.core.errors import InputError, StorageError
from erag_dagster.labels.audit import audit_rows
from erag_dagster.labels.keys import utc_now
from erag_dagster.labels.recovery import (
    ReaderRecord,
    RecoveryFile,
    read_recovery_file,
    recovery_text,
)
from erag_dagster.labels.tables import (
    GENERATIONS,
    GOLD_ANSWERS,
    READERS,
    SCHEMA_VERSION,
    SCORES,
    Table,
)
from erag_dagster.metrics.label_value import bad_label_rows, checked_label

__all__ = [
    "BUSY_TIMEOUT_S",
    "COPY_ORDER",
    "LOCK_WAIT_ENV",
    "LabelStoreBase",
    "NoLabelStore",
    "RecoveryImport",
    "StoreLocked",
    "StoreWriteFailed",
    "complete_frame",
    "default_busy_timeout",
]

BUSY_TIMEOUT_S = 60.0
LOCK_WAIT_ENV = "ERAG_LOCK_WAIT_SECONDS"
"""Environment variable: the most a locked store is waited for in all, in seconds (default 300
for a commit's retries, :mod:`.cached`); it also caps :data:`BUSY_TIMEOUT_S`."""
Row = tuple[Any, ...]


def default_busy_timeout() -> float:
    """:data:`BUSY_TIMEOUT_S`, capped by ``$ERAG_LOCK_WAIT_SECONDS`` when set (no statement
    waits longer for a lock than the user allows in all); :class:`InputError` if not a number
    >= 0."""
    raw = os.environ.get(LOCK_WAIT_ENV, "").strip()
    if not raw:
        return BUSY_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0:  # NaN and negatives; inf (wait as long as it takes) keeps 60 s
        raise InputError(f"{LOCK_WAIT_ENV}={raw!r} is not a number of seconds >= 0")
    return min(BUSY_TIMEOUT_S, seconds)


class StoreLocked(StorageError):
    """A write found the store locked by another process (or a server unreachable) for longer
    than the busy timeout; ``reason`` says which, for the caller's message."""

    def __init__(self, message: str, reason: str = "locked by another process") -> None:
        super().__init__(message)
        self.reason = reason


class StoreWriteFailed(StorageError):
    """A commit failed and retrying will not help (disk full, file too large, I/O error, a
    read-only store); ``reason`` is the database's own words, for the caller's message, and
    ``when`` says when the answers can be imported again. Rolled back."""

    def __init__(self, message: str, reason: str, when: str = "once there is space") -> None:
        super().__init__(message)
        self.reason, self.when = reason, when


class NoLabelStore(StorageError):
    """A read-only open found no label store (no file, an empty file, no tables)."""


@dataclass(frozen=True)
class RecoveryImport:
    """What importing a recovery file did: ``added`` answers stored now; ``same`` already
    stored with the same answer; ``kept`` already stored with another answer (the stored one
    kept: the first answer wins)."""

    added: int
    same: int
    kept: int


class LabelStoreBase(ABC):
    """A label store; ``location`` names it in messages (a path, or a URL without password)."""

    location: str
    read_only: bool
    busy_timeout_s: float
    _run_column: str = "producer_run_id"  # a version-1 store read as it is: "dagster_run_id"

    # -- what a backend provides ------------------------------------------------------------

    @abstractmethod
    def _query(self, sql: str, args: Sequence[Any] = ()) -> tuple[list[str], list[Row]]:
        """Run a read-only statement (``?`` placeholders); (column names, rows)."""

    @abstractmethod
    def _insert_rows(self, table: Table, rows: list[Row]) -> int:
        """Insert-if-absent ``rows`` (the table's columns in order) in one transaction; the
        number inserted. Locked past the busy timeout: :class:`StoreLocked`."""

    @abstractmethod
    def _insert_scores(self, golds: list[Row], rows: list[Row]) -> int:
        """``gold_answers`` then ``scores`` rows in one transaction; a score whose generation
        is not stored is an :class:`InputError` and nothing is written."""

    @abstractmethod
    def _lookup_rows(self, table: Table, keys: list[str]) -> list[Row]:
        """Rows of ``table`` whose key is among ``keys`` (unique), columns :meth:`_select`."""

    @abstractmethod
    def _recovery_base(self) -> Path:
        """Recovery files are named ``<this name>.recovery-…`` in this path's folder."""

    @abstractmethod
    def schema_version(self) -> int:
        """The stored schema version (0: no store yet; > :data:`SCHEMA_VERSION`: refused)."""

    @abstractmethod
    def _limit_wait(self, seconds: float) -> None:
        """Make this thread's connection wait at most ``seconds`` for a lock per statement."""

    @abstractmethod
    def close(self) -> None:
        """Close this thread's connection (the store re-opens on next use)."""

    # -- shared --------------------------------------------------------------------------------

    def __repr__(self) -> str:
        extra = ", read_only=True" if self.read_only else ""
        return f"{type(self).__name__}({self.location!r}{extra})"

    def __enter__(self) -> LabelStoreBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def waiting_at_most(self, seconds: float) -> Iterator[None]:
        """Within the block, a statement waits at most ``min(seconds, busy_timeout_s)`` for a
        lock (a commit's last retry must not outlast the total wait); restored after."""
        self._limit_wait(max(0.0, min(seconds, self.busy_timeout_s)))
        try:
            yield
        finally:
            self._limit_wait(self.busy_timeout_s)

    def _refuse_newer(self, version: int) -> int:
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"{self.location}: label store schema version {version} is newer than this "
                f"erag-dagster's ({SCHEMA_VERSION}); refusing to change it: use a newer "
                "erag-dagster or another store"
            )
        return version

    def _refuse_empty(self, version: int) -> int:
        """A read-only open of a store no one has created yet (schema version 0: an empty
        SQLite file, a database without the tables) finds nothing: :class:`StorageError`."""
        if version == 0:
            raise NoLabelStore(f"{self.location}: no label store here")
        return version

    def _refuse_write(self) -> None:
        if self.read_only:
            raise StorageError(f"{self.location}: opened read-only; nothing can be written")

    def _select(self, table: Table, alias: str = "t") -> str:
        """The table's columns for a SELECT (a version-1 store's run column under its new name)."""
        legacy = self._run_column != "producer_run_id"
        return ", ".join(
            f"{alias}.{self._run_column} AS {c}"
            if legacy and c == "producer_run_id"
            else f"{alias}.{c}"
            for c in table.names
        )

    # -- readers -------------------------------------------------------------------------------

    def register_reader(
        self,
        fingerprint: str,
        name: str,
        identity: Mapping[str, Any],
        spec: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a reader's identity (what its fingerprint hashes) and, optionally, its full
        spec. The first registration of a fingerprint is kept (and a known one is not written
        again, so registering needs no write lock). Credentials in the spec (a URL's password,
        an ``api_key=`` parameter) are masked before they are stored
        (:func:`~erag_dagster.core.credentials.mask_in`); the identity is stored as it is, since
        the fingerprint hashes it (no credential is part of an identity)."""
        if self.reader_identity(fingerprint) is not None:
            return
        row = (
            fingerprint,
            name,
            json.dumps(identity, sort_keys=True, ensure_ascii=False),
            None
            if spec is None
            else json.dumps(mask_in(dict(spec)), sort_keys=True, ensure_ascii=False),
            utc_now(),
        )
        self._refuse_write()
        self._insert_rows(READERS, [row])

    def reader_identity(self, fingerprint: str) -> dict[str, Any] | None:
        """The identity registered for ``fingerprint`` (``None`` if unknown)."""
        sql = "SELECT identity_json FROM readers WHERE reader_fingerprint = ?"
        _, rows = self._query(sql, (fingerprint,))
        return json.loads(rows[0][0]) if rows else None

    # -- generations ---------------------------------------------------------------------------

    def lookup_generations(self, keys: Iterable[str] | pl.Series) -> pl.DataFrame:
        """Stored generations among ``keys`` (any order, duplicates fine), with all columns of
        :data:`GENERATIONS_SCHEMA`; keys not stored are simply absent."""
        return self._lookup(GENERATIONS, keys)

    def put_generations(self, frame: pl.DataFrame) -> int:
        """Insert generations in one transaction; keys already stored are kept as they are.

        ``frame`` needs every column of :data:`GENERATIONS_SCHEMA` except ``producer_run_id``
        (default null) and ``created_at`` (default now). Returns the number of rows inserted.
        A null key or answer, or a negative or NaN ``gen_seconds``, is an :class:`InputError`.
        """
        if frame.height == 0:
            return 0
        frame = complete_frame(frame, GENERATIONS)
        seconds = pl.col("gen_seconds")
        bad = frame.filter(
            pl.col("generation_key").is_null()
            | pl.col("answer").is_null()
            | seconds.is_null()
            | (seconds < 0)
            | seconds.is_nan()
        )
        if bad.height:
            row = bad.row(0, named=True)
            raise InputError(
                f"generation for query {row['query_id']!r}, doc {row['doc_id']!r}: "
                f"null key/answer or bad gen_seconds {row['gen_seconds']!r}"
            )
        self._refuse_write()
        return self._insert_rows(GENERATIONS, frame.sort("generation_key").rows())

    def count_generations(self, reader_fingerprint: str | None = None) -> int:
        """Number of stored generations (of one reader when ``reader_fingerprint`` is given)."""
        sql, args = "SELECT COUNT(*) FROM generations", ()
        if reader_fingerprint is not None:
            sql, args = sql + " WHERE reader_fingerprint = ?", (reader_fingerprint,)
        return int(self._query(sql, args)[1][0][0])

    # -- recovery file -------------------------------------------------------------------------

    def write_recovery(self, frame: pl.DataFrame, readers: Iterable[ReaderRecord] = ()) -> Path:
        """Write generations that could not be committed to a JSON-lines file.

        The file, ``<store name>.recovery-<UTC time>-<pid>.jsonl`` (beside an SQLite store; in
        the storage root's ``label-recovery`` folder for a server), holds the reader record of
        each fingerprint the rows use, then one digested line per generation (format:
        :mod:`.recovery`). ``readers``: the records the caller holds (the reader it ran); a
        fingerprint they lack is looked up in this store (none found: no record, and the file
        imports only into a store that has the reader). It is written to a temporary name,
        flushed to disk and renamed, so it is complete or absent. When that folder refuses the
        file (the disk the store is on is full), the storage root's ``label-recovery`` folder
        is tried, then the system's temporary folder; the ``OSError`` of the last is raised
        when all refuse. Returns its path.
        """
        from erag_dagster.core.paths import storage_root

        base = self._recovery_base()
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        name = f"{base.name}.recovery-{stamp}-{os.getpid()}.jsonl"
        frame = complete_frame(frame, GENERATIONS)
        text = recovery_text(frame, self._reader_records(frame, readers))
        folders = [base.parent]
        with contextlib.suppress(StorageError):
            folders.append(storage_root(writable=False) / "label-recovery")
        folders.append(Path(tempfile.gettempdir()) / "erag-dagster-recovery")
        error: OSError | None = None
        for folder in dict.fromkeys(folders):
            try:
                return _write_synced(folder / name, text)
            except OSError as exc:
                error = exc
        assert error is not None
        raise error

    def reader_records(self, fingerprints: Iterable[str]) -> list[ReaderRecord]:
        """The registered readers among ``fingerprints`` (name, identity, spec as stored)."""
        wanted = sorted(set(fingerprints))
        if not wanted:
            return []
        marks = ", ".join("?" for _ in wanted)
        sql = (
            "SELECT reader_fingerprint, name, identity_json, spec_json FROM readers "
            f"WHERE reader_fingerprint IN ({marks})"
        )
        _, rows = self._query(sql, wanted)
        return [
            ReaderRecord(fp, name, json.loads(identity), json.loads(spec) if spec else None)
            for fp, name, identity, spec in rows
        ]

    def _reader_records(
        self, frame: pl.DataFrame, given: Iterable[ReaderRecord]
    ) -> list[ReaderRecord]:
        """``given`` plus, for the frame's other fingerprints, what this store registered (a
        store that cannot be read now — locked, gone — adds none)."""
        records = {r.fingerprint: r for r in given}
        rest = set(frame.get_column("reader_fingerprint").to_list()) - set(records)
        if rest:
            with contextlib.suppress(Exception):
                records.update({r.fingerprint: r for r in self.reader_records(rest)})
        return list(records.values())

    def import_recovery(self, path: str | Path, accept_undigested: bool = False) -> int:
        """Insert the generations of a recovery file; returns how many were new
        (:meth:`import_recovery_counts` says more)."""
        return self.import_recovery_counts(path, accept_undigested).added

    def import_recovery_counts(
        self, path: str | Path, accept_undigested: bool = False
    ) -> RecoveryImport:
        """Insert the generations of a recovery file (:meth:`write_recovery`); keys already
        stored keep their answer (importing twice is harmless), and the counts say how many
        were stored with the same answer and how many with another (first answer wins).

        Every line is checked before anything is written (:func:`.recovery.read_recovery_file`:
        JSON, fields and types, sizes, times, the line digest over every field — the answer
        included — the key recomputed from the content, one answer per key). Then every
        fingerprint the answers use must be registered in this store or carried by a reader
        record of the file whose identity hashes to it (it is then registered); a record that
        contradicts the store's registration is refused. The first failure is an
        :class:`InputError` naming ``file:line``, and nothing of the file is imported (the
        answers in one transaction). ``accept_undigested``: lines written before digests are
        read (their answers cannot be verified).
        """
        return self.import_recovery_file(read_recovery_file(path, accept_undigested))

    def import_recovery_file(self, file: RecoveryFile) -> RecoveryImport:
        """:meth:`import_recovery_counts` of a file already read and checked."""
        frame = file.generations
        to_register = self._check_readers(file)
        stored = dict(
            self.lookup_generations(frame.get_column("generation_key"))
            .select("generation_key", "answer")
            .rows()
        )
        same = differ = 0
        for key, answer in frame.select("generation_key", "answer").rows():
            if key in stored:
                same, differ = (same + 1, differ) if stored[key] == answer else (same, differ + 1)
        for record in to_register:
            self.register_reader(record.fingerprint, record.name, record.identity, record.spec)
        new = frame.filter(~pl.col("generation_key").is_in(list(stored)))
        added = self.put_generations(new) if new.height else 0
        return RecoveryImport(added, same, differ + (new.height - added))

    def _check_readers(self, file: RecoveryFile) -> list[ReaderRecord]:
        return recovery_readers(file, self.reader_identity, self.location)

    # -- scores --------------------------------------------------------------------------------

    def lookup_scores(self, keys: Iterable[str] | pl.Series) -> pl.DataFrame:
        """Stored scores among ``keys`` (score keys), all columns of :data:`SCORES_SCHEMA`."""
        return self._lookup(SCORES, keys)

    def put_scores(self, frame: pl.DataFrame) -> int:
        """Insert scores in one transaction; returns the number of rows inserted.

        ``frame`` needs ``score_key, generation_key, gold_hash, metric, score`` (plus optional
        ``producer_run_id``, ``created_at`` and ``gold_answers: list[str]``, which is recorded in
        ``gold_answers`` for audit). A score that is not a label (:func:`checked_label`) is an
        :class:`InputError` and nothing is written; every generation must already be stored.
        """
        if frame.height == 0:
            return 0
        golds: list[Row] = []
        if "gold_answers" in frame.columns:
            for gh, answers in (
                frame.select("gold_hash", "gold_answers").unique("gold_hash").sort("gold_hash")
            ).rows():
                golds.append((gh, json.dumps(sorted(answers or []), ensure_ascii=False)))
        frame = complete_frame(frame, SCORES)
        bad = bad_label_rows(frame, "score")
        if bad.height:
            row = bad.row(0, named=True)
            checked_label(row["score"], f"metric {row['metric']!r} score {row['score_key'][:16]}")
        self._refuse_write()
        return self._insert_scores(golds, frame.sort("score_key").rows())

    # -- audit and bulk reading -----------------------------------------------------------------

    def audit(self, query_id: str, doc_id: str) -> pl.DataFrame:
        """Every stored label of one (query, document) pair (:func:`.audit.audit_rows`);
        reads only, so it works on a read-only store."""
        return audit_rows(self._query, self._run_column, query_id, doc_id)

    def iter_rows(self, table: Table, chunk: int = 10_000) -> Iterator[list[Row]]:
        """Every row of ``table`` in key order, ``chunk`` rows at a time (keyset pages, so a
        store being written meanwhile is read without skipping or repeating a key)."""
        key, last = table.names[0], ""
        while True:
            sql = (
                f"SELECT {self._select(table)} FROM {table.name} t WHERE t.{key} > ? "
                f"ORDER BY t.{key} LIMIT {int(chunk)}"
            )
            _, rows = self._query(sql, (last,))
            if not rows:
                return
            yield rows
            last = rows[-1][0]

    def insert_rows(self, table: Table, rows: list[Row]) -> int:
        """Insert-if-absent rows of any table as read by :meth:`iter_rows` (one transaction;
        for copying a store: scores need their generations and gold answers stored first). A
        reader's ``spec_json`` is masked
        (:func:`~erag_dagster.core.credentials.mask_credentials`)."""
        self._refuse_write()
        rows = sorted(rows, key=lambda r: r[0])
        if table is READERS:  # a spec stored before specs were masked: masked on the way
            spec_at = table.names.index("spec_json")
            rows = [
                (*r[:spec_at], mask_credentials(r[spec_at]) if r[spec_at] else r[spec_at],
                 *r[spec_at + 1 :])
                for r in rows
            ]  # fmt: skip
        if table is SCORES:
            return self._insert_scores([], rows)
        return self._insert_rows(table, rows)

    def _lookup(self, table: Table, keys: Iterable[str] | pl.Series) -> pl.DataFrame:
        wanted = list(dict.fromkeys(keys.to_list() if isinstance(keys, pl.Series) else keys))
        rows = self._lookup_rows(table, wanted) if wanted else []
        return pl.DataFrame(rows, schema=table.schema, orient="row")


def recovery_readers(
    file: RecoveryFile, identity_of: Callable[[str], dict[str, Any] | None], location: str
) -> list[ReaderRecord]:
    """The reader records of ``file`` a store must register before its answers, given the
    store's registrations (``identity_of(fingerprint)``, ``None`` if unknown; a store that does
    not exist yet knows none). :class:`InputError` for a fingerprint the store does not know
    and the file cannot vouch for (no record, or one whose identity does not hash to it), or a
    record contradicting the store's registration. Reads only, so a caller can check on a
    read-only open before it opens the store for writing."""
    register = []
    for fingerprint in sorted(file.used_at):
        known = identity_of(fingerprint)
        record = file.readers.get(fingerprint)
        if known is None and record is None:
            raise InputError(
                f"{file.used_at[fingerprint]}: reader fingerprint {fingerprint[:16]}… is "
                f"not registered in {location} and the file carries no reader record "
                "for it (import into the store that labelled with it); nothing imported"
            )
        if known is None and record is not None:
            if not record.verified:
                raise InputError(
                    f"{file.reader_at[fingerprint]}: the reader record's identity does not "
                    f"hash to its fingerprint {fingerprint[:16]}… and {location} does "
                    "not know that reader; nothing imported"
                )
            register.append(record)
        elif record is not None and dict(record.identity) != known:
            raise InputError(
                f"{file.reader_at[fingerprint]}: the reader record's identity differs from "
                f"the one {location} registered for {fingerprint[:16]}…; nothing "
                "imported"
            )
    return register


def read_recovery(path: str | Path, accept_undigested: bool = False) -> pl.DataFrame:
    """The generations of a recovery file, every line checked (rules: :mod:`.recovery`);
    :class:`InputError` at the first bad line."""
    return read_recovery_file(path, accept_undigested).generations


def _write_synced(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` via a ``.partial`` name, fsync'd, then renamed (complete or
    absent; a partial file is removed on failure)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        partial.replace(path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    return path


COPY_ORDER: tuple[Table, ...] = (READERS, GOLD_ANSWERS, GENERATIONS, SCORES)
"""Tables in an order where every reference is stored before the row that needs it."""


def complete_frame(frame: pl.DataFrame, table: Table) -> pl.DataFrame:
    """Add defaulted columns (``producer_run_id`` null, ``created_at`` now), check the rest,
    and return the table's columns in order and type."""
    if "producer_run_id" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("producer_run_id"))
    if "created_at" not in frame.columns:
        frame = frame.with_columns(pl.lit(utc_now()).alias("created_at"))
    missing = [c for c in table.names if c not in frame.columns]
    if missing:
        raise InputError(f"{table.name} frame lacks column(s) {', '.join(missing)}")
    return frame.select([pl.col(c).cast(t) for c, t in table.schema.items()])
