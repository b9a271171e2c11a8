"""The label store on a PostgreSQL server (psycopg 3): one store shared by many machines.

Same tables, columns and keys as the SQLite store (declared once in :mod:`.tables`; ``REAL`` is
``DOUBLE PRECISION`` here, 8 bytes like SQLite's), so the same answer has the same key and a
store moves between backends row for row (``erag-dagster store copy``).

Schema version: the row ``schema_version`` of the table ``erag_store_meta``. A writable open of
an older store (or an empty database) creates and migrates in ONE transaction, under a
transaction-level advisory lock so that several processes opening a new store at once create
it once; a store already at :data:`SCHEMA_VERSION` is opened without writing anything; a newer
one is refused. A read-only open sets ``default_transaction_read_only`` on its sessions: the
server itself refuses any write.

Writes (policy: :mod:`.store_base`): ``INSERT … SELECT FROM unnest(arrays) ORDER BY key ON
CONFLICT DO NOTHING`` — one statement and one round trip per batch, in key order, in one
transaction. Two writers inserting the same key: the second waits for the first to commit,
then skips the row (first answer wins). ``lock_timeout`` is the busy timeout: a write waiting
longer for a lock (or one caught in a deadlock, or a server that cannot be reached) raises
:class:`StoreLocked`, and the connection is re-opened on the next call.

Credentials: from the environment only (:mod:`.store_url`); messages name the store by its
URL with any password masked. Recovery files go to ``<storage root>/label-recovery/``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import psycopg
from psycopg import errors as pg_errors

from erag_dagster.core.errors import InputError, StorageError
from erag_dagster.core.input_numbers import format_given
from erag_dagster.labels.store_base import (
    LabelStoreBase,
    Row,
    StoreLocked,
    StoreWriteFailed,
    default_busy_timeout,
)
from erag_dagster.labels.store_url import parse_store, redact_url
from erag_dagster.labels.tables import (
    GOLD_ANSWERS,
    INDEXES,
    LEGACY_RUN_COLUMN,
    MIGRATIONS,
    SCHEMA_VERSION,
    SCORES,
    TABLES,
    Table,
)

__all__ = ["META_TABLE", "PostgresLabelStore", "ServerUnreachable"]

META_TABLE = "erag_store_meta"
CONNECT_TIMEOUT_S = 10
_SCHEMA_LOCK = 0x65726167  # advisory lock id ("erag") held while creating or migrating
_RETRYABLE = (
    pg_errors.LockNotAvailable,
    pg_errors.DeadlockDetected,
    pg_errors.SerializationFailure,
)


class ServerUnreachable(StorageError):
    """No connection to the server (a write turns this into :class:`StoreLocked`)."""


class PostgresLabelStore(LabelStoreBase):
    """The label store in the database named by ``url`` (``postgresql://``, no password).

    Safe to share between threads (one connection per thread and process) and processes.
    ``busy_timeout_s``: how long one statement waits for a lock (``lock_timeout``).
    """

    dialect = "postgresql"

    def __init__(
        self, url: str, read_only: bool = False, busy_timeout_s: float | None = None
    ) -> None:
        parse_store(url)  # refuses a password in the URL
        self.url = url
        self.location = redact_url(url)
        self.read_only = read_only
        self.busy_timeout_s = default_busy_timeout() if busy_timeout_s is None else busy_timeout_s
        self._local = threading.local()
        version = self.schema_version()
        if read_only:
            self._refuse_empty(version)
        elif version < SCHEMA_VERSION:
            version = self._create_or_migrate()
        self._run_column = LEGACY_RUN_COLUMN if version == 1 else "producer_run_id"

    # -- connection and schema ----------------------------------------------------------------

    def _conn(self) -> psycopg.Connection:
        """This thread's connection (re-opened after a fork or a lost connection)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid() and not conn.closed:
            return conn
        try:
            conn = psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name="erag-dagster",
            )
            conn.execute(f"SET lock_timeout = {max(1, int(self.busy_timeout_s * 1000))}")
            if self.read_only:
                conn.execute("SET default_transaction_read_only = on")
        except psycopg.Error as exc:
            raise ServerUnreachable(
                f"{self.location}: cannot connect ({_first_line(exc)})"
            ) from None
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _limit_wait(self, seconds: float) -> None:
        """``SET lock_timeout``; a server that cannot take it now (gone, restarting) is left to
        the statement that follows, which reports it as the write's own fault."""
        try:
            self._conn().execute(f"SET lock_timeout = {max(1, int(seconds * 1000))}")
        except (psycopg.Error, StorageError):
            self._drop_broken()

    def schema_version(self) -> int:
        return self._refuse_newer(self._version(self._conn()))

    def _tables_present(self, conn: psycopg.Connection) -> tuple[bool, bool]:
        """Whether the meta table and the generations table exist, as one statement sees them."""
        meta, generations = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL, to_regclass('generations') IS NOT NULL",
            (META_TABLE,),
        ).fetchone()
        return bool(meta), bool(generations)

    def _version(self, conn: psycopg.Connection) -> int:
        meta, generations = self._tables_present(conn)
        if generations and not meta:
            # The two catalog lookups of one statement may straddle the commit of another
            # process's create (catalog snapshots refresh within a statement), so ask again:
            # that create committed both tables at once, and a new statement sees both.
            meta, generations = self._tables_present(conn)
        if not meta:
            if generations:
                raise StorageError(
                    f"{self.location}: has a generations table but no {META_TABLE}; not an "
                    "erag-dagster label store (use another database or schema)"
                )
            return 0
        row = conn.execute(
            f"SELECT value FROM {META_TABLE} WHERE name = 'schema_version'"
        ).fetchone()
        return int(row[0]) if row else 0

    def _create_or_migrate(self) -> int:
        """Create or migrate in one transaction, serialised by an advisory lock."""
        conn = self._conn()
        with _Writing(self), conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            version = self._refuse_newer(self._version(conn))  # another process may be done
            for step in range(version, SCHEMA_VERSION) if version else ():
                for statement in MIGRATIONS[step]:
                    conn.execute(statement)
            for statement in (*(t.ddl("postgresql") for t in TABLES), *INDEXES):
                conn.execute(statement)
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {META_TABLE} "
                "(name TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            conn.execute(
                f"INSERT INTO {META_TABLE} VALUES ('schema_version', %s) "
                "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                (str(SCHEMA_VERSION),),
            )
        return SCHEMA_VERSION

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _recovery_base(self) -> Path:
        from psycopg.conninfo import conninfo_to_dict

        from erag_dagster.core.paths import storage_root

        database = str(conninfo_to_dict(self.url).get("dbname") or "postgres").strip("/")
        return storage_root() / "label-recovery" / database

    # -- the backend operations -----------------------------------------------------------------

    def _query(self, sql: str, args: Sequence[Any] = ()) -> tuple[list[str], list[Row]]:
        try:
            cursor = self._conn().execute(sql.replace("?", "%s"), tuple(args))
            return [d.name for d in cursor.description or ()], cursor.fetchall()
        except psycopg.Error as exc:
            self._drop_broken()
            raise StorageError(f"{self.location}: {_first_line(exc)}") from None

    def _insert_rows(self, table: Table, rows: list[Row]) -> int:
        with _Writing(self):
            conn = self._conn()
            with conn.transaction():
                return _insert(conn, table, rows)

    def _insert_scores(self, golds: list[Row], rows: list[Row]) -> int:
        try:
            with _Writing(self):
                conn = self._conn()
                with conn.transaction():
                    if golds:
                        _insert(conn, GOLD_ANSWERS, golds)
                    return _insert(conn, SCORES, rows)
        except (pg_errors.ForeignKeyViolation, pg_errors.CheckViolation) as exc:
            raise InputError(
                f"{self.location}: cannot store scores ({_first_line(exc)}); "
                "is every generation stored?"
            ) from None

    def _lookup_rows(self, table: Table, keys: list[str]) -> list[Row]:
        # one array parameter: any number of keys, and no temp table (works read-only)
        sql = (
            f"SELECT {self._select(table)} FROM unnest(?::text[]) AS w(k) "
            f"JOIN {table.name} t ON t.{table.names[0]} = w.k"
        )
        return self._query(sql, (keys,))[1]

    def _drop_broken(self) -> None:
        """Forget a connection the server closed (the next call opens a new one)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and conn.broken:
            self._local.conn = None


class _Writing:
    """Maps a write's failure: waiting too long, a deadlock, a lost or unreachable server is
    :class:`StoreLocked` (the caller keeps its rows and retries); other server errors are
    one-line :class:`StorageError`; the store's own errors pass through."""

    def __init__(self, store: PostgresLabelStore) -> None:
        self.store = store

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        store = self.store
        if isinstance(exc, ServerUnreachable):
            raise StoreLocked(str(exc), reason="unreachable") from None
        if exc is None or not isinstance(exc, psycopg.Error):
            return
        if isinstance(exc, pg_errors.ForeignKeyViolation | pg_errors.CheckViolation):
            return  # the caller maps these to InputError
        if isinstance(exc, pg_errors.DiskFull | pg_errors.OutOfMemory | pg_errors.IoError):
            raise StoreWriteFailed(
                f"{store.location}: the commit failed ({_first_line(exc)})",
                reason=_first_line(exc),
            ) from None
        if isinstance(exc, _RETRYABLE):
            raise StoreLocked(
                f"{store.location}: locked by another process for more than "
                f"{format_given(store.busy_timeout_s)} s"
            ) from None
        if isinstance(exc, psycopg.OperationalError):
            store._drop_broken()
            raise StoreLocked(
                f"{store.location}: unreachable ({_first_line(exc)})", reason="unreachable"
            ) from None
        raise StorageError(f"{store.location}: {_first_line(exc)}") from None


def _sql_type(dtype: Any) -> str:
    return "float8" if dtype == pl.Float64 else "text"


def _insert(conn: psycopg.Connection, table: Table, rows: list[Row]) -> int:
    """Insert-if-absent ``rows`` with one statement (column arrays, key order); rows inserted."""
    if not rows:
        return 0
    arrays = ", ".join(f"%s::{_sql_type(t)}[]" for t in table.schema.values())
    sql = (
        f"INSERT INTO {table.name} ({', '.join(table.names)}) "
        f"SELECT * FROM unnest({arrays}) ORDER BY 1 ON CONFLICT DO NOTHING"
    )
    columns = [list(column) for column in zip(*rows, strict=True)]
    return conn.execute(sql, columns).rowcount


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
