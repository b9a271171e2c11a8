"""The content-addressed label store: reader answers and their downstream scores, in SQLite.

(About 430 lines: one class, the store, whose methods share its connection and write policy;
its declarations live in :mod:`.tables`, its keys in :mod:`.keys`, its audit in :mod:`.audit`.)

Two layers, so that a new downstream metric re-scores stored answers without running the reader:

``generations`` — one reader answer per (reader, question, document text)::

    generation_key = sha256(canonical JSON [reader_fingerprint, query_id,
                                            sha256(question), doc_id, sha256(doc text)])

``scores`` — one score per (generation, gold answers, metric)::

    score_key = sha256(canonical JSON [generation_key, gold_hash, metric])
    gold_hash = sha256(canonical JSON of the sorted gold answers)

The columns of every table are declared once, in :data:`TABLES` (SQL type and polars type side
by side). ``gen_seconds`` is reader wall time per pair in seconds (a step's time / its size);
``producer_run_id`` names the run that wrote a row (any string the caller chooses, e.g. an
orchestrator's run id; null when none); ``created_at`` is UTC ISO 8601. ``readers``
(fingerprint → name, identity JSON, full spec JSON) and ``gold_answers`` (gold_hash → answers
JSON) make every label auditable (:meth:`LabelStore.audit`).

Schema versions (``PRAGMA user_version``): 1 named the run column ``dagster_run_id``; 2 names it
``producer_run_id``. A writable open migrates a version-1 store in one transaction; a read-only
open reads it as it is. A store of a *newer* version than :data:`SCHEMA_VERSION` is refused
(:class:`StorageError`), never rewritten.

Concurrency and crash policy: the database runs in WAL mode with ``synchronous=FULL`` and a busy
timeout; each ``put_*`` call is ONE ``BEGIN IMMEDIATE`` transaction of ``INSERT OR IGNORE`` rows,
so a ``kill -9`` loses at most the batch being written, never a committed one, and two processes
writing the same keys keep the first row and corrupt nothing. A write that still finds the store
locked after the busy timeout raises :class:`StoreLocked` (the caller keeps its rows; see
:mod:`erag_dagster.labels.cached` for the retry and :meth:`LabelStore.write_recovery`).
``LabelStore(path, read_only=True)`` opens ``file:PATH?mode=ro``: no DDL, no WAL switch, no
write of any kind (for ``audit`` on read-only media). When no ``-wal`` file exists (no process
has the store open) it adds ``immutable=1``, so SQLite creates no ``-wal``/``-shm`` files either;
a writer that opens the store during such a read is not seen by it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import polars as pl

from erag_dagster.errors import InputError, StorageError
from erag_dagster.labels.audit import AUDIT_COLUMNS, audit_rows
from erag_dagster.labels.keys import generation_key, gold_hash, score_key, utc_now
from erag_dagster.labels.label_value import bad_label_rows, checked_label
from erag_dagster.labels.tables import (
    GENERATION_COLUMNS,
    GENERATIONS,
    GENERATIONS_SCHEMA,
    INDEXES,
    LEGACY_RUN_COLUMN,
    READERS,
    SCHEMA_VERSION,
    SCORE_COLUMNS,
    SCORES,
    SCORES_SCHEMA,
    TABLES,
    Table,
)

__all__ = [
    "AUDIT_COLUMNS",
    "GENERATIONS_SCHEMA",
    "GENERATION_COLUMNS",
    "SCHEMA_VERSION",
    "SCORES_SCHEMA",
    "SCORE_COLUMNS",
    "LabelStore",
    "StoreLocked",
    "generation_key",
    "gold_hash",
    "score_key",
    "utc_now",
]

BUSY_TIMEOUT_S = 60.0


class StoreLocked(StorageError):
    """A write found the store locked by another process for longer than the busy timeout."""


# -- the store -----------------------------------------------------------------------------------


class LabelStore:
    """A SQLite label store at ``path`` (created with its parent folder unless ``read_only``).

    Safe to share between threads (one connection per thread and process) and processes.
    ``busy_timeout_s``: how long one statement waits for another process's lock.
    """

    def __init__(
        self, path: str | Path, read_only: bool = False, busy_timeout_s: float = BUSY_TIMEOUT_S
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        if read_only:
            if not self.path.is_file():
                raise StorageError(f"{self.path}: no label store here")
            version = self._version(self._conn())
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            version = self._create_or_migrate()
        self._run_column = LEGACY_RUN_COLUMN if version == 1 else "producer_run_id"

    def __repr__(self) -> str:
        return f"LabelStore({str(self.path)!r}{', read_only=True' if self.read_only else ''})"

    # -- connection and schema ----------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (re-opened after a fork: connections do not cross fork)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        target, uri = (self._read_only_uri(), True) if self.read_only else (self.path, False)
        conn = sqlite3.connect(target, timeout=self.busy_timeout_s, isolation_level=None, uri=uri)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        if not self.read_only:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StorageError(f"{self.path}: cannot switch the label store to WAL ({mode})")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _read_only_uri(self) -> str:
        """``mode=ro``; plus ``immutable=1`` when no ``-wal`` file exists (no process has the
        store open), so SQLite creates no ``-wal``/``-shm`` beside it (read-only media)."""
        quiet = not self.path.with_name(self.path.name + "-wal").exists()
        return f"file:{quote(str(self.path))}?mode=ro" + ("&immutable=1" if quiet else "")

    def _version(self, conn: sqlite3.Connection) -> int:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"{self.path}: label store schema version {version} is newer than this "
                f"erag-dagster's ({SCHEMA_VERSION}); refusing to change it: use a newer "
                "erag-dagster or another store"
            )
        return version

    def _create_or_migrate(self) -> int:
        with self._transaction() as conn:
            version = self._version(conn)
            if version == 1:
                for table in (GENERATIONS, SCORES):
                    conn.execute(
                        f"ALTER TABLE {table.name} RENAME COLUMN {LEGACY_RUN_COLUMN} "
                        "TO producer_run_id"
                    )
            for statement in (*(t.ddl() for t in TABLES), *INDEXES):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return SCHEMA_VERSION

    def _transaction(self) -> _Tx:
        """One write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``; rollback on error)."""
        if self.read_only:
            raise StorageError(f"{self.path}: opened read-only; nothing can be written")
        return _Tx(self._conn(), self)

    def close(self) -> None:
        """Close this thread's connection (the store re-opens on next use)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def __enter__(self) -> LabelStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        again, so registering needs no write lock)."""
        if self.reader_identity(fingerprint) is not None:
            return
        row = (
            fingerprint,
            name,
            json.dumps(identity, sort_keys=True, ensure_ascii=False),
            None if spec is None else json.dumps(spec, sort_keys=True, ensure_ascii=False),
            utc_now(),
        )
        self._insert(READERS, [row])

    def reader_identity(self, fingerprint: str) -> dict[str, Any] | None:
        """The identity registered for ``fingerprint`` (``None`` if unknown)."""
        sql = "SELECT identity_json FROM readers WHERE reader_fingerprint = ?"
        row = self._conn().execute(sql, (fingerprint,)).fetchone()
        return None if row is None else json.loads(row[0])

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
        frame = _complete(frame, GENERATIONS)
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
        return self._insert(GENERATIONS, frame.rows())

    def count_generations(self, reader_fingerprint: str | None = None) -> int:
        """Number of stored generations (of one reader when ``reader_fingerprint`` is given)."""
        sql, args = "SELECT COUNT(*) FROM generations", ()
        if reader_fingerprint is not None:
            sql, args = sql + " WHERE reader_fingerprint = ?", (reader_fingerprint,)
        return int(self._conn().execute(sql, args).fetchone()[0])

    # -- recovery file -------------------------------------------------------------------------

    def write_recovery(self, frame: pl.DataFrame) -> Path:
        """Write generations that could not be committed to a JSON-lines file beside the store.

        The file, ``<store name>.recovery-<UTC time>-<pid>.jsonl``, holds one JSON object per
        generation with the columns of :data:`GENERATIONS_SCHEMA`; it is written to a temporary
        name, flushed to disk and renamed, so it is complete or absent. Returns its path.
        """
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        path = self.path.with_name(f"{self.path.name}.recovery-{stamp}-{os.getpid()}.jsonl")
        partial = path.with_name(path.name + ".partial")
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(_complete(frame, GENERATIONS).write_ndjson())
            handle.flush()
            os.fsync(handle.fileno())
        partial.replace(path)
        return path

    def import_recovery(self, path: str | Path) -> int:
        """Insert the generations of a recovery file (:meth:`write_recovery`); returns how many
        were new (keys already stored are kept, so importing twice is harmless)."""
        try:
            frame = pl.read_ndjson(path, schema=GENERATIONS_SCHEMA)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise InputError(f"{path}: not a label-store recovery file ({exc})") from None
        return self.put_generations(frame)

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
        golds: list[tuple[str, str]] = []
        if "gold_answers" in frame.columns:
            for gh, answers in frame.select("gold_hash", "gold_answers").unique("gold_hash").rows():
                golds.append((gh, json.dumps(sorted(answers or []), ensure_ascii=False)))
        frame = _complete(frame, SCORES)
        bad = bad_label_rows(frame, "score")
        if bad.height:
            row = bad.row(0, named=True)
            checked_label(row["score"], f"metric {row['metric']!r} score {row['score_key'][:16]}")
        try:
            with self._transaction() as conn:
                if golds:
                    conn.executemany("INSERT OR IGNORE INTO gold_answers VALUES (?, ?)", golds)
                return _insert_rows(conn, self, SCORES, frame.rows())
        except sqlite3.IntegrityError as exc:
            raise InputError(
                f"{self.path}: cannot store scores ({exc}); is every generation stored?"
            ) from None

    # -- audit ---------------------------------------------------------------------------------

    def audit(self, query_id: str, doc_id: str) -> pl.DataFrame:
        """Every stored label of one (query, document) pair (:func:`.audit.audit_rows`);
        reads only, so it works on a read-only store."""
        return audit_rows(self._conn(), self._run_column, query_id, doc_id)

    # -- internals -----------------------------------------------------------------------------

    def _select(self, table: Table) -> str:
        """The table's columns for a SELECT (a version-1 store's run column under its new name)."""
        legacy = self._run_column != "producer_run_id"
        return ", ".join(
            f"t.{self._run_column} AS {c}" if legacy and c == "producer_run_id" else f"t.{c}"
            for c in table.names
        )

    def _lookup(self, table: Table, keys: Iterable[str] | pl.Series) -> pl.DataFrame:
        wanted = list(dict.fromkeys(keys.to_list() if isinstance(keys, pl.Series) else keys))
        rows: list[tuple[Any, ...]] = []
        if wanted:
            key = table.names[0]
            conn = self._conn()
            # A temp table + join scales to any number of keys (no SQL variable limit); temp
            # tables live outside the store file, so this works on a read-only store too.
            conn.execute("BEGIN")
            try:
                conn.execute("CREATE TEMP TABLE IF NOT EXISTS wanted_keys (k TEXT PRIMARY KEY)")
                conn.execute("DELETE FROM wanted_keys")
                conn.executemany(
                    "INSERT OR IGNORE INTO wanted_keys VALUES (?)", ((k,) for k in wanted)
                )
                rows = conn.execute(
                    f"SELECT {self._select(table)} FROM wanted_keys w "
                    f"JOIN {table.name} t ON t.{key} = w.k"
                ).fetchall()
                conn.execute("DELETE FROM wanted_keys")
            finally:
                conn.execute("COMMIT")
        return pl.DataFrame(rows, schema=table.schema, orient="row")

    def _insert(self, table: Table, rows: list[tuple[Any, ...]]) -> int:
        with self._transaction() as conn:
            return _insert_rows(conn, self, table, rows)


class _Tx:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error); a lock that outlasts the busy
    timeout is :class:`StoreLocked`."""

    def __init__(self, conn: sqlite3.Connection, store: LabelStore) -> None:
        self.conn, self.store = conn, store

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise _locked(exc, self.store) from None
        return self.conn

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.conn.execute("ROLLBACK")
            return
        try:
            self.conn.execute("COMMIT")
        except sqlite3.OperationalError as error:
            self.conn.execute("ROLLBACK")
            raise _locked(error, self.store) from None


def _locked(exc: sqlite3.OperationalError, store: LabelStore) -> Exception:
    if "locked" in str(exc) or "busy" in str(exc):
        return StoreLocked(
            f"{store.path}: locked by another process for more than {store.busy_timeout_s:g} s"
        )
    return exc


def _insert_rows(
    conn: sqlite3.Connection, store: LabelStore, table: Table, rows: list[tuple[Any, ...]]
) -> int:
    columns = table.names
    before = conn.total_changes
    try:
        conn.executemany(
            f"INSERT OR IGNORE INTO {table.name} ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' * len(columns))})",
            rows,
        )
    except sqlite3.OperationalError as exc:
        raise _locked(exc, store) from None
    return conn.total_changes - before


def _complete(frame: pl.DataFrame, table: Table) -> pl.DataFrame:
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
