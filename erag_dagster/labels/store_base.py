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
writes them with :meth:`LabelStoreBase.write_recovery`). ``read_only=True`` writes nothing.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.errors import InputError, StorageError
from erag_dagster.labels.audit import audit_rows
from erag_dagster.labels.keys import utc_now
from erag_dagster.labels.tables import (
    GENERATIONS,
    GENERATIONS_SCHEMA,
    GOLD_ANSWERS,
    READERS,
    SCHEMA_VERSION,
    SCORES,
    Table,
)
from erag_dagster.metrics.label_value import bad_label_rows, checked_label

__all__ = ["BUSY_TIMEOUT_S", "COPY_ORDER", "LabelStoreBase", "StoreLocked", "complete_frame"]

BUSY_TIMEOUT_S = 60.0
Row = tuple[Any, ...]


class StoreLocked(StorageError):
    """A write found the store locked by another process (or a server unreachable) for longer
    than the busy timeout; ``reason`` says which, for the caller's message."""

    def __init__(self, message: str, reason: str = "locked by another process") -> None:
        super().__init__(message)
        self.reason = reason


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

    def _refuse_newer(self, version: int) -> int:
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"{self.location}: label store schema version {version} is newer than this "
                f"erag-dagster's ({SCHEMA_VERSION}); refusing to change it: use a newer "
                "erag-dagster or another store"
            )
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

    def write_recovery(self, frame: pl.DataFrame) -> Path:
        """Write generations that could not be committed to a JSON-lines file.

        The file, ``<store name>.recovery-<UTC time>-<pid>.jsonl`` (beside an SQLite store; in
        the storage root's ``label-recovery`` folder for a server), holds one JSON object per
        generation with the columns of :data:`GENERATIONS_SCHEMA`; it is written to a temporary
        name, flushed to disk and renamed, so it is complete or absent. Returns its path.
        """
        base = self._recovery_base()
        base.parent.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        path = base.with_name(f"{base.name}.recovery-{stamp}-{os.getpid()}.jsonl")
        partial = path.with_name(path.name + ".partial")
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(complete_frame(frame, GENERATIONS).write_ndjson())
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
        for copying a store: scores need their generations and gold answers stored first)."""
        self._refuse_write()
        rows = sorted(rows, key=lambda r: r[0])
        if table is SCORES:
            return self._insert_scores([], rows)
        return self._insert_rows(table, rows)

    def _lookup(self, table: Table, keys: Iterable[str] | pl.Series) -> pl.DataFrame:
        wanted = list(dict.fromkeys(keys.to_list() if isinstance(keys, pl.Series) else keys))
        rows = self._lookup_rows(table, wanted) if wanted else []
        return pl.DataFrame(rows, schema=table.schema, orient="row")


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
