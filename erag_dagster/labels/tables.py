"""The label store's tables, declared once: each column's SQL declaration and polars type.

Schema versions (SQLite: ``PRAGMA user_version``; PostgreSQL: the ``erag_store_meta`` row
``schema_version``): 1 named the run column ``dagster_run_id``; 2 names it
``producer_run_id`` (:data:`LEGACY_RUN_COLUMN` is the old name, for the migration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

SCHEMA_VERSION = 2
LEGACY_RUN_COLUMN = "dagster_run_id"  # schema version 1's name of producer_run_id


@dataclass(frozen=True)
class Table:
    """One table: ``columns`` maps each name to ``(SQL declaration, polars dtype)``."""

    name: str
    columns: Mapping[str, tuple[str, Any]]
    tail: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.columns)

    @property
    def schema(self) -> dict[str, Any]:
        return {name: dtype for name, (_, dtype) in self.columns.items()}

    def ddl(self, dialect: str = "sqlite") -> str:
        """``CREATE TABLE IF NOT EXISTS`` in ``dialect`` (``sqlite`` or ``postgresql``: there
        ``REAL`` is ``DOUBLE PRECISION``, 8 bytes like SQLite's, and SQLite's tail is dropped)."""
        columns = {name: sql for name, (sql, _) in self.columns.items()}
        tail = self.tail
        if dialect == "postgresql":
            columns = {n: sql.replace("REAL", "DOUBLE PRECISION") for n, sql in columns.items()}
            tail = ""
        body = ",\n    ".join(f"{name} {sql}" for name, sql in columns.items())
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n    {body}\n) {tail}".rstrip()


_S, _F = pl.String, pl.Float64
GENERATIONS = Table(
    "generations",
    {
        "generation_key": ("TEXT PRIMARY KEY", _S),
        "reader_fingerprint": ("TEXT NOT NULL", _S),
        "query_id": ("TEXT NOT NULL", _S),
        "question_hash": ("TEXT NOT NULL", _S),
        "doc_id": ("TEXT NOT NULL", _S),
        "text_hash": ("TEXT NOT NULL", _S),
        "answer": ("TEXT NOT NULL", _S),
        "gen_seconds": ("REAL NOT NULL CHECK (gen_seconds >= 0)", _F),
        "producer_run_id": ("TEXT", _S),
        "created_at": ("TEXT NOT NULL", _S),
    },
    "WITHOUT ROWID",
)
SCORES = Table(
    "scores",
    {
        "score_key": ("TEXT PRIMARY KEY", _S),
        "generation_key": ("TEXT NOT NULL REFERENCES generations (generation_key)", _S),
        "gold_hash": ("TEXT NOT NULL", _S),
        "metric": ("TEXT NOT NULL", _S),
        "score": ("REAL NOT NULL CHECK (score >= 0.0 AND score <= 1.0)", _F),
        "producer_run_id": ("TEXT", _S),
        "created_at": ("TEXT NOT NULL", _S),
    },
    "WITHOUT ROWID",
)
READERS = Table(
    "readers",
    {
        "reader_fingerprint": ("TEXT PRIMARY KEY", _S),
        "name": ("TEXT NOT NULL", _S),
        "identity_json": ("TEXT NOT NULL", _S),
        "spec_json": ("TEXT", _S),
        "created_at": ("TEXT NOT NULL", _S),
    },
)
GOLD_ANSWERS = Table(
    "gold_answers",
    {"gold_hash": ("TEXT PRIMARY KEY", _S), "answers_json": ("TEXT NOT NULL", _S)},
    "WITHOUT ROWID",
)
TABLES = (READERS, GENERATIONS, GOLD_ANSWERS, SCORES)
INDEXES = (
    "CREATE INDEX IF NOT EXISTS generations_pair ON generations (query_id, doc_id)",
    "CREATE INDEX IF NOT EXISTS scores_generation ON scores (generation_key)",
)
MIGRATIONS: dict[int, tuple[str, ...]] = {
    # from version 1 to 2 (the same SQL in both dialects)
    1: tuple(
        f"ALTER TABLE {table} RENAME COLUMN {LEGACY_RUN_COLUMN} TO producer_run_id"
        for table in ("generations", "scores")
    ),
}
"""Statements that take a store from version ``v`` to ``v + 1``, run in the transaction that
creates any missing table and sets the version to :data:`SCHEMA_VERSION`."""
GENERATION_COLUMNS, GENERATIONS_SCHEMA = GENERATIONS.names, GENERATIONS.schema
SCORE_COLUMNS, SCORES_SCHEMA = SCORES.names, SCORES.schema
