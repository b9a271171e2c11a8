"""The label store in one SQLite file (the default backend).

Schema versions live in ``PRAGMA user_version`` (:mod:`.tables`). A writable open creates the
tables or migrates an older store in one transaction; a read-only open reads it as it is; a
*newer* version is refused (:class:`StorageError`), never rewritten.

The database runs in WAL mode with ``synchronous=FULL`` and a busy timeout; each write is ONE
``BEGIN IMMEDIATE`` transaction of ``INSERT OR IGNORE`` rows (the shared policy:
:mod:`.store_base`); ``BEGIN IMMEDIATE`` takes SQLite's one write lock, so writers queue. WAL
does not work on network filesystems: a store shared by several machines belongs on
PostgreSQL (:mod:`.store_postgres`).

``SqliteLabelStore(path, read_only=True)`` opens ``file:PATH?mode=ro``: no DDL, no WAL switch,
no write of any kind (for ``audit`` on read-only media). When no ``-wal`` file exists (no
process has the store open) it adds ``immutable=1``, so SQLite creates no ``-wal``/``-shm``
files either; a writer that opens the store during such a read is not seen by it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from erag_dagster.core.errors import InputError, StorageError
from erag_dagster.core.input_numbers import format_given
from erag_dagster.labels.store_base import (
    LabelStoreBase,
    NoLabelStore,
    Row,
    StoreLocked,
    StoreWriteFailed,
    default_busy_timeout,
)
from erag_dagster.labels.store_url import check_store_location, sqlite_read_only_uri
from erag_dagster.labels.tables import (
    INDEXES,
    LEGACY_RUN_COLUMN,
    MIGRATIONS,
    SCHEMA_VERSION,
    SCORES,
    TABLES,
    Table,
)

__all__ = ["SqliteLabelStore"]


class SqliteLabelStore(LabelStoreBase):
    """A SQLite label store at ``path`` (created with its parent folder unless ``read_only``).

    Safe to share between threads (one connection per thread and process) and processes.
    ``busy_timeout_s``: how long one statement waits for another process's lock.
    """

    dialect = "sqlite"

    def __init__(
        self, path: str | Path, read_only: bool = False, busy_timeout_s: float | None = None
    ) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self.read_only = read_only
        self.busy_timeout_s = default_busy_timeout() if busy_timeout_s is None else busy_timeout_s
        self._local = threading.local()
        check_store_location(self.path)  # a folder, FIFO or device is named, never opened
        if read_only:
            if not self.path.is_file():
                raise NoLabelStore(f"{self.path}: no label store here")
            version = self._refuse_empty(self.schema_version())
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            version = self._create_or_migrate()
        self._run_column = LEGACY_RUN_COLUMN if version == 1 else "producer_run_id"

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
            self._switch_to_wal(conn)
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _switch_to_wal(self, conn: sqlite3.Connection) -> None:
        """``PRAGMA journal_mode = WAL``, retried until the busy timeout.

        The switch needs an exclusive lock, and SQLite answers "database is locked" at once,
        without calling the busy handler, while another process is creating or switching the
        same new file (four writers opening a fresh store together did this in CI). So this
        one statement is retried every 10-100 ms; past ``busy_timeout_s``: :class:`StoreLocked`.
        """
        deadline = time.monotonic() + self.busy_timeout_s
        pause_s = 0.01
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if time.monotonic() >= deadline or not _is_lock_error(exc):
                    raise _locked(exc, self) from None
                time.sleep(pause_s)
                pause_s = min(pause_s * 2, 0.1)
        if str(mode).lower() != "wal":
            raise StorageError(f"{self.path}: cannot switch the label store to WAL ({mode})")

    def _limit_wait(self, seconds: float) -> None:
        """``PRAGMA busy_timeout`` of this thread's connection (never blocks, never writes)."""
        self._conn().execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    def _read_only_uri(self) -> str:
        """:func:`~.store_url.sqlite_read_only_uri` of this store."""
        return sqlite_read_only_uri(self.path)

    def schema_version(self) -> int:
        version = int(self._conn().execute("PRAGMA user_version").fetchone()[0])
        return self._refuse_newer(version)

    def _create_or_migrate(self) -> int:
        with self._transaction() as conn:
            version = self.schema_version()
            # an empty file (version 0) has nothing to migrate
            for step in range(version, SCHEMA_VERSION) if version else ():
                for statement in MIGRATIONS[step]:
                    conn.execute(statement)
            for statement in (*(t.ddl() for t in TABLES), *INDEXES):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return SCHEMA_VERSION

    def _transaction(self) -> _Tx:
        """One write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``; rollback on error)."""
        self._refuse_write()
        return _Tx(self._conn(), self)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _recovery_base(self) -> Path:
        return self.path

    # -- the backend operations -----------------------------------------------------------------

    def _query(self, sql: str, args: Sequence[Any] = ()) -> tuple[list[str], list[Row]]:
        cursor = self._conn().execute(sql, tuple(args))
        return [d[0] for d in cursor.description], cursor.fetchall()

    def _insert_rows(self, table: Table, rows: list[Row]) -> int:
        with self._transaction() as conn:
            return _insert(conn, self, table, rows)

    def _insert_scores(self, golds: list[Row], rows: list[Row]) -> int:
        try:
            with self._transaction() as conn:
                if golds:
                    conn.executemany("INSERT OR IGNORE INTO gold_answers VALUES (?, ?)", golds)
                return _insert(conn, self, SCORES, rows)
        except sqlite3.IntegrityError as exc:
            raise InputError(
                f"{self.path}: cannot store scores ({exc}); is every generation stored?"
            ) from None

    def _lookup_rows(self, table: Table, keys: list[str]) -> list[Row]:
        key = table.names[0]
        conn = self._conn()
        # A temp table + join scales to any number of keys (no SQL variable limit); temp
        # tables live outside the store file, so this works on a read-only store too. CROSS
        # JOIN fixes the loop order (SQLite's planner otherwise may scan the whole table and
        # probe the keys: bench/store.py measured 1.2k lookups/s at 100k rows, 50x slower).
        conn.execute("BEGIN")
        try:
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS wanted_keys (k TEXT PRIMARY KEY)")
            conn.execute("DELETE FROM wanted_keys")
            conn.executemany("INSERT OR IGNORE INTO wanted_keys VALUES (?)", ((k,) for k in keys))
            rows = conn.execute(
                f"SELECT {self._select(table)} FROM wanted_keys w "
                f"CROSS JOIN {table.name} t ON t.{key} = w.k"
            ).fetchall()
            conn.execute("DELETE FROM wanted_keys")
        finally:
            conn.execute("COMMIT")
        return rows


class _Tx:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error); a lock that outlasts the busy
    timeout is :class:`StoreLocked`."""

    def __init__(self, conn: sqlite3.Connection, store: SqliteLabelStore) -> None:
        self.conn, self.store = conn, store

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise _locked(exc, self.store) from None
        return self.conn

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self._rollback()  # SQLite may have rolled back already (a full disk does)
            return
        try:
            self.conn.execute("COMMIT")
        except sqlite3.OperationalError as error:
            self._rollback()
            raise _locked(error, self.store) from None

    def _rollback(self) -> None:
        """ROLLBACK if a transaction is still open; a failing rollback (the disk gone) is not
        allowed to hide the error that caused it."""
        if self.conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")


def _is_lock_error(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


_WRITE_FAILURES = ("database or disk is full", "disk i/o error", "unable to open")
"""SQLite's words for a write the disk refused (``SQLITE_FULL``, ``SQLITE_IOERR``: also what
``EFBIG`` past a file-size limit becomes, ``SQLITE_CANTOPEN`` for the WAL file)."""


def _locked(exc: sqlite3.OperationalError, store: SqliteLabelStore) -> Exception:
    """A write's SQLite error as :class:`StoreLocked` (wait and retry), :class:`StoreWriteFailed`
    (the disk refused it) or itself."""
    if _is_lock_error(exc):
        return StoreLocked(
            f"{store.path}: locked by another process for more than "
            f"{format_given(store.busy_timeout_s)} s"
        )
    why = _read_only(exc, store.path)
    if why is not None:
        return StoreWriteFailed(
            f"{store.path}: the label store is read-only ({why}); nothing can be written to it: "
            "make it writable, or copy it (erag-dagster store copy) and pass the copy as --store",
            reason=f"the store is read-only: {why}",
            when="once it is writable",
        )
    if any(words in str(exc).lower() for words in _WRITE_FAILURES):
        return StoreWriteFailed(
            f"{store.path}: the commit failed (SQLite: {exc}); is the disk full?", reason=str(exc)
        )
    return exc


def _read_only(exc: sqlite3.OperationalError, path: Path) -> str | None:
    """Why a write failed because the store cannot be written at all (``None``: it can):
    SQLite's ``SQLITE_READONLY``, a read-only file system, or a file or folder without write
    permission (SQLite creates its ``-wal``/``-shm`` files beside the store)."""
    folder = path.parent
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "it is on a read-only file system"
    except OSError:
        pass
    if path.exists() and not os.access(path, os.W_OK):
        return "the file is not writable"
    if folder.exists() and not os.access(folder, os.W_OK | os.X_OK):
        return "its folder is not writable, and SQLite writes its -wal and -shm files there"
    if "readonly" in str(exc).lower():
        return f"SQLite: {exc}"
    return None


def _insert(
    conn: sqlite3.Connection, store: SqliteLabelStore, table: Table, rows: list[Row]
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
