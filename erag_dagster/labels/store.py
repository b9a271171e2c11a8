"""The content-addressed label store: reader answers and their downstream scores, in SQLite.

Two layers, so that a new downstream metric re-scores stored answers without running the reader:

``generations`` — one reader answer per (reader, question, document text)::

    generation_key = sha256(canonical JSON [reader_fingerprint, query_id,
                                            sha256(question), doc_id, sha256(doc text)])
    columns: reader_fingerprint, query_id, question_hash, doc_id, text_hash, answer,
             gen_seconds (reader wall time per pair, seconds; a batch's time / its size),
             dagster_run_id, created_at (UTC ISO 8601)

``scores`` — one score per (generation, gold answers, metric)::

    score_key = sha256(canonical JSON [generation_key, gold_hash, metric])
    gold_hash = sha256(canonical JSON of the sorted gold answers)
    columns: generation_key, gold_hash, metric, score (CHECK 0 <= score <= 1),
             dagster_run_id, created_at

``readers`` (fingerprint → name, identity JSON, full spec JSON) and ``gold_answers``
(gold_hash → answers JSON) make every label auditable (:meth:`LabelStore.audit`).

Concurrency and crash policy: the database runs in WAL mode with ``synchronous=FULL`` and a
busy timeout; each ``put_*`` call is ONE ``BEGIN IMMEDIATE`` transaction of
``INSERT OR IGNORE`` rows, so a ``kill -9`` loses at most the batch being written, never a
committed one, and two processes writing the same keys at once keep the first row and corrupt
nothing (content keys make both rows equal up to bf16 batch effects; the first one wins and
readers of the store then use it). Keys are pure functions of content: the same pair labelled
by another retriever, run or process is the same row.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.errors import InputError

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 60_000

GENERATION_COLUMNS = (
    "generation_key",
    "reader_fingerprint",
    "query_id",
    "question_hash",
    "doc_id",
    "text_hash",
    "answer",
    "gen_seconds",
    "dagster_run_id",
    "created_at",
)
SCORE_COLUMNS = (
    "score_key",
    "generation_key",
    "gold_hash",
    "metric",
    "score",
    "dagster_run_id",
    "created_at",
)
GENERATIONS_SCHEMA = {
    "generation_key": pl.String,
    "reader_fingerprint": pl.String,
    "query_id": pl.String,
    "question_hash": pl.String,
    "doc_id": pl.String,
    "text_hash": pl.String,
    "answer": pl.String,
    "gen_seconds": pl.Float64,
    "dagster_run_id": pl.String,
    "created_at": pl.String,
}
SCORES_SCHEMA = {
    "score_key": pl.String,
    "generation_key": pl.String,
    "gold_hash": pl.String,
    "metric": pl.String,
    "score": pl.Float64,
    "dagster_run_id": pl.String,
    "created_at": pl.String,
}

_DDL = """
CREATE TABLE IF NOT EXISTS readers (
    reader_fingerprint TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    identity_json TEXT NOT NULL,
    spec_json TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS generations (
    generation_key TEXT PRIMARY KEY,
    reader_fingerprint TEXT NOT NULL,
    query_id TEXT NOT NULL,
    question_hash TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    answer TEXT NOT NULL,
    gen_seconds REAL NOT NULL CHECK (gen_seconds >= 0),
    dagster_run_id TEXT,
    created_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS generations_pair ON generations (query_id, doc_id);
CREATE TABLE IF NOT EXISTS gold_answers (
    gold_hash TEXT PRIMARY KEY,
    answers_json TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS scores (
    score_key TEXT PRIMARY KEY,
    generation_key TEXT NOT NULL REFERENCES generations (generation_key),
    gold_hash TEXT NOT NULL,
    metric TEXT NOT NULL,
    score REAL NOT NULL CHECK (score >= 0.0 AND score <= 1.0),
    dagster_run_id TEXT,
    created_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS scores_generation ON scores (generation_key);
"""


# -- keys (pure functions) -----------------------------------------------------------------------


def sha256_text(text: str) -> str:
    """sha256 hex of a UTF-8 string."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _key(parts: Sequence[str]) -> str:
    # A JSON array is an unambiguous encoding of the parts (no separator collisions).
    return sha256_text(json.dumps(list(parts), ensure_ascii=False, separators=(",", ":")))


def generation_key(
    reader_fingerprint: str, query_id: str, question_hash: str, doc_id: str, text_hash: str
) -> str:
    """Key of one reader answer (see the module docstring)."""
    return _key([reader_fingerprint, query_id, question_hash, doc_id, text_hash])


def gold_hash(answers: Iterable[str]) -> str:
    """sha256 of the canonical JSON of the sorted gold answers (order/duplicates kept sorted)."""
    return sha256_text(json.dumps(sorted(answers), ensure_ascii=False, separators=(",", ":")))


def score_key(generation: str, gold: str, metric: str) -> str:
    """Key of one score: (generation key, gold hash, metric name)."""
    return _key([generation, gold, metric])


def utc_now() -> str:
    """Current UTC time, ISO 8601 with microseconds and ``+00:00``."""
    return datetime.now(UTC).isoformat()


# -- the store -----------------------------------------------------------------------------------


class LabelStore:
    """A SQLite label store at ``path`` (created with its parent folder when missing).

    Safe to share between threads (one connection per thread and process) and processes.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._transaction() as conn:
            for statement in _DDL.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def __repr__(self) -> str:
        return f"LabelStore({str(self.path)!r})"

    # -- connection ----------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (re-opened after a fork: connections do not cross fork)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=True
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise InputError(f"{self.path}: cannot switch the label store to WAL mode ({mode})")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    class _Tx:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def __enter__(self) -> sqlite3.Connection:
            self.conn.execute("BEGIN IMMEDIATE")
            return self.conn

        def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
            if exc_type is None:
                self.conn.execute("COMMIT")
            else:
                self.conn.execute("ROLLBACK")

    def _transaction(self) -> LabelStore._Tx:
        """One write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``; rollback on error)."""
        return LabelStore._Tx(self._conn())

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
        spec. The first registration of a fingerprint is kept."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO readers VALUES (?, ?, ?, ?, ?)",
                (
                    fingerprint,
                    name,
                    json.dumps(identity, sort_keys=True, ensure_ascii=False),
                    None if spec is None else json.dumps(spec, sort_keys=True, ensure_ascii=False),
                    utc_now(),
                ),
            )

    def reader_identity(self, fingerprint: str) -> dict[str, Any] | None:
        """The identity registered for ``fingerprint`` (``None`` if unknown)."""
        row = (
            self._conn()
            .execute(
                "SELECT identity_json FROM readers WHERE reader_fingerprint = ?", (fingerprint,)
            )
            .fetchone()
        )
        return None if row is None else json.loads(row[0])

    # -- generations ---------------------------------------------------------------------------

    def lookup_generations(self, keys: Iterable[str] | pl.Series) -> pl.DataFrame:
        """Stored generations among ``keys`` (any order, duplicates fine), with all columns of
        :data:`GENERATIONS_SCHEMA`; keys not stored are simply absent."""
        rows = self._lookup("generations", "generation_key", GENERATION_COLUMNS, keys)
        return pl.DataFrame(rows, schema=GENERATIONS_SCHEMA, orient="row")

    def put_generations(self, frame: pl.DataFrame) -> int:
        """Insert generations in one transaction; keys already stored are kept as they are.

        ``frame`` needs every column of :data:`GENERATIONS_SCHEMA` except ``dagster_run_id``
        (default null) and ``created_at`` (default now). Returns the number of rows inserted.
        """
        if frame.height == 0:
            return 0
        frame = _complete(frame, GENERATIONS_SCHEMA, "generations")
        bad = frame.filter(
            pl.col("generation_key").is_null()
            | pl.col("answer").is_null()
            | pl.col("gen_seconds").is_null()
            | (pl.col("gen_seconds") < 0)
            | pl.col("gen_seconds").is_nan()
        )
        if bad.height:
            row = bad.row(0, named=True)
            raise InputError(
                f"generation for query {row['query_id']!r}, doc {row['doc_id']!r}: "
                f"null key/answer or bad gen_seconds {row['gen_seconds']!r}"
            )
        rows = frame.select(GENERATION_COLUMNS).rows()
        return self._insert("generations", GENERATION_COLUMNS, rows)

    def count_generations(self, reader_fingerprint: str | None = None) -> int:
        """Number of stored generations (of one reader when ``reader_fingerprint`` is given)."""
        if reader_fingerprint is None:
            sql, args = "SELECT COUNT(*) FROM generations", ()
        else:
            sql = "SELECT COUNT(*) FROM generations WHERE reader_fingerprint = ?"
            args = (reader_fingerprint,)
        return int(self._conn().execute(sql, args).fetchone()[0])

    # -- scores --------------------------------------------------------------------------------

    def lookup_scores(self, keys: Iterable[str] | pl.Series) -> pl.DataFrame:
        """Stored scores among ``keys`` (score keys), all columns of :data:`SCORES_SCHEMA`."""
        rows = self._lookup("scores", "score_key", SCORE_COLUMNS, keys)
        return pl.DataFrame(rows, schema=SCORES_SCHEMA, orient="row")

    def put_scores(self, frame: pl.DataFrame) -> int:
        """Insert scores in one transaction; returns the number of rows inserted.

        ``frame`` needs ``score_key, generation_key, gold_hash, metric, score`` (plus optional
        ``dagster_run_id``, ``created_at`` and ``gold_answers: list[str]``, which is recorded in
        ``gold_answers`` for audit). A score that is null, NaN or outside [0, 1] is an
        :class:`InputError` and nothing is written; every generation must already be stored.
        """
        if frame.height == 0:
            return 0
        golds: list[tuple[str, str]] = []
        if "gold_answers" in frame.columns:
            for gh, answers in frame.select("gold_hash", "gold_answers").unique("gold_hash").rows():
                golds.append((gh, json.dumps(sorted(answers or []), ensure_ascii=False)))
        frame = _complete(frame, SCORES_SCHEMA, "scores")
        for key, metric, score in frame.select("score_key", "metric", "score").rows():
            if score is None or not math.isfinite(score) or not 0.0 <= score <= 1.0:
                raise InputError(
                    f"score {score!r} of metric {metric!r} (score key {key[:16]}) is not in [0, 1]"
                )
        rows = frame.select(SCORE_COLUMNS).rows()
        with self._transaction() as conn:
            if golds:
                conn.executemany("INSERT OR IGNORE INTO gold_answers VALUES (?, ?)", golds)
            before = conn.total_changes
            try:
                conn.executemany(
                    f"INSERT OR IGNORE INTO scores ({', '.join(SCORE_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * len(SCORE_COLUMNS))})",
                    rows,
                )
            except sqlite3.IntegrityError as exc:
                raise InputError(
                    f"{self.path}: cannot store scores ({exc}); is every generation stored?"
                ) from None
            return conn.total_changes - before

    # -- audit ---------------------------------------------------------------------------------

    def audit(self, query_id: str, doc_id: str) -> pl.DataFrame:
        """Every stored label of one (query, document) pair, with who made it and how.

        One row per score (a generation without any score yet gives one row with null metric
        and score): ``query_id, doc_id, reader_name, reader_fingerprint, model (identity JSON),
        model_hash`` (file sha256, commit, or hash of the folder's file hashes), ``dtype,
        libraries, prompt_template_hash`` (sha256 of the prompt part of the identity),
        ``decoding`` (JSON), ``metric, gold_answers, answer, score, gen_seconds,
        generated_at, scored_at, generation_dagster_run_id, score_dagster_run_id,
        question_hash, text_hash, generation_key``. Ordered by generation time, then metric.
        """
        sql = """
            SELECT g.query_id, g.doc_id, r.name, g.reader_fingerprint, r.identity_json,
                   s.metric, ga.answers_json, g.answer, s.score, g.gen_seconds,
                   g.created_at, s.created_at, g.dagster_run_id, s.dagster_run_id,
                   g.question_hash, g.text_hash, g.generation_key
            FROM generations g
            LEFT JOIN scores s ON s.generation_key = g.generation_key
            LEFT JOIN readers r ON r.reader_fingerprint = g.reader_fingerprint
            LEFT JOIN gold_answers ga ON ga.gold_hash = s.gold_hash
            WHERE g.query_id = ? AND g.doc_id = ?
            ORDER BY g.created_at, g.generation_key, s.metric
        """
        out: list[dict[str, Any]] = []
        for row in self._conn().execute(sql, (query_id, doc_id)).fetchall():
            identity = json.loads(row[4]) if row[4] else {}
            out.append(
                {
                    "query_id": row[0],
                    "doc_id": row[1],
                    "reader_name": row[2],
                    "reader_fingerprint": row[3],
                    "model": json.dumps(identity.get("model"), sort_keys=True),
                    "model_hash": _model_hash(identity.get("model")),
                    "dtype": identity.get("dtype"),
                    "libraries": json.dumps(identity.get("libraries"), sort_keys=True),
                    "prompt_template_hash": _json_hash(identity.get("prompt")),
                    "decoding": json.dumps(identity.get("decoding"), sort_keys=True),
                    "metric": row[5],
                    "gold_answers": row[6],
                    "answer": row[7],
                    "score": row[8],
                    "gen_seconds": row[9],
                    "generated_at": row[10],
                    "scored_at": row[11],
                    "generation_dagster_run_id": row[12],
                    "score_dagster_run_id": row[13],
                    "question_hash": row[14],
                    "text_hash": row[15],
                    "generation_key": row[16],
                }
            )
        schema = {k: pl.String for k in AUDIT_COLUMNS}
        schema["score"] = pl.Float64
        schema["gen_seconds"] = pl.Float64
        return pl.DataFrame(out, schema=schema)

    # -- internals -----------------------------------------------------------------------------

    def _lookup(
        self, table: str, key: str, columns: Sequence[str], keys: Iterable[str] | pl.Series
    ) -> list[tuple[Any, ...]]:
        wanted = list(dict.fromkeys(keys.to_list() if isinstance(keys, pl.Series) else keys))
        if not wanted:
            return []
        conn = self._conn()
        select = ", ".join(f"t.{c}" for c in columns)
        # A temp table + join scales to any number of keys (no SQL variable limit).
        conn.execute("BEGIN")
        try:
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS wanted_keys (k TEXT PRIMARY KEY)")
            conn.execute("DELETE FROM wanted_keys")
            conn.executemany("INSERT OR IGNORE INTO wanted_keys VALUES (?)", ((k,) for k in wanted))
            rows = conn.execute(
                f"SELECT {select} FROM wanted_keys w JOIN {table} t ON t.{key} = w.k"
            ).fetchall()
            conn.execute("DELETE FROM wanted_keys")
        finally:
            conn.execute("COMMIT")
        return rows

    def _insert(self, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> int:
        with self._transaction() as conn:
            before = conn.total_changes
            conn.executemany(
                f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) "
                f"VALUES ({', '.join('?' * len(columns))})",
                rows,
            )
            return conn.total_changes - before


AUDIT_COLUMNS = (
    "query_id",
    "doc_id",
    "reader_name",
    "reader_fingerprint",
    "model",
    "model_hash",
    "dtype",
    "libraries",
    "prompt_template_hash",
    "decoding",
    "metric",
    "gold_answers",
    "answer",
    "score",
    "gen_seconds",
    "generated_at",
    "scored_at",
    "generation_dagster_run_id",
    "score_dagster_run_id",
    "question_hash",
    "text_hash",
    "generation_key",
)


def _json_hash(value: Any) -> str | None:
    if value is None:
        return None
    return sha256_text(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def _model_hash(model: Any) -> str | None:
    """The one hash naming a model: GGUF sha256, hub commit, or hash of a folder's files."""
    if not isinstance(model, dict):
        return None
    if model.get("sha256"):
        return str(model["sha256"])
    if model.get("commit"):
        return str(model["commit"])
    if model.get("files"):
        return _json_hash(model["files"])
    return None


def _complete(frame: pl.DataFrame, schema: Mapping[str, Any], what: str) -> pl.DataFrame:
    """Add defaulted columns (``dagster_run_id`` null, ``created_at`` now), check the rest."""
    if "dagster_run_id" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("dagster_run_id"))
    if "created_at" not in frame.columns:
        frame = frame.with_columns(pl.lit(utc_now()).alias("created_at"))
    missing = [c for c in schema if c not in frame.columns]
    if missing:
        raise InputError(f"{what} frame lacks column(s) {', '.join(missing)}")
    return frame.select([pl.col(c).cast(t) for c, t in schema.items()])
