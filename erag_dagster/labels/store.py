"""The content-addressed label store: reader answers and their downstream scores.

(The interface and its rules: :mod:`.store_base`; the backends: :mod:`.store_sqlite` — one
file, the default — and :mod:`.store_postgres` — one server shared by many machines; which one
a setting names: :mod:`.store_url`; tables: :mod:`.tables`; keys: :mod:`.keys`; audit:
:mod:`.audit`.)

Two layers, so that a new downstream metric re-scores stored answers without running the reader:

``generations`` — one reader answer per (reader, question, document text)::

    generation_key = sha256(canonical JSON [reader_fingerprint, query_id,
                                            sha256(question), sha256(doc text)])

A document is keyed by its text, not its id (the ``doc_id`` column records the id the answer
was first stored under, for audits): re-ingesting or re-chunking a corpus under new doc ids
reuses every stored answer whose text is unchanged. (Stores written before this rule keyed by
``[..., doc_id, sha256(doc text)]``: their rows stay, readable and auditable, but lookups no
longer find them, so each such pair is generated once more under its text key.)

``scores`` — one score per (generation, gold answers, metric and its version)::

    score_key = sha256(canonical JSON [generation_key, gold_hash, metric tag])
    gold_hash = sha256(canonical JSON of the sorted gold answers)

A metric's tag — also what the ``metric`` column records — is its name at version 1 and
``name/vN`` from version 2 on (:mod:`erag_dagster.core.code_versions`): scores stored before metrics
had versions keep their keys, and raising a metric's version (``metrics/downstream.py``) makes
its scores be computed again from the stored answers, without a reader call. The reader
fingerprint (part of ``generation_key``) holds the prompt builder's version by the same rule.

The columns of every table are declared once, in :data:`TABLES` (SQL type and polars type side
by side). ``gen_seconds`` is reader wall time per pair in seconds (a step's time / its size);
``producer_run_id`` names the run that wrote a row (any string the caller chooses, e.g. an
orchestrator's run id; null when none); ``created_at`` is UTC ISO 8601. ``readers``
(fingerprint → name, identity JSON, full spec JSON) and ``gold_answers`` (gold_hash → answers
JSON) make every label auditable (:meth:`LabelStoreBase.audit`).

Schema versions: 1 named the run column ``dagster_run_id``; 2 names it ``producer_run_id``. A
writable open migrates an older store in one transaction; a read-only open reads it as it is. A
store of a *newer* version than :data:`SCHEMA_VERSION` is refused (:class:`StorageError`), never
rewritten. Both backends insert-if-absent (the first answer stored for a key wins), one
transaction per ``put_*`` call.

``LabelStore(path)`` is the SQLite store (the name every caller used before there were two);
:func:`open_store` opens whichever a path or URL names.
"""

from __future__ import annotations

from pathlib import Path

from erag_dagster.labels.audit import AUDIT_COLUMNS
from erag_dagster.labels.keys import generation_key, gold_hash, score_key, utc_now
from erag_dagster.labels.store_base import (
    COPY_ORDER,
    LabelStoreBase,
    StoreLocked,
    StoreWriteFailed,
)
from erag_dagster.labels.store_sqlite import SqliteLabelStore
from erag_dagster.labels.store_url import STORE_ENV, default_store, parse_store, redact_url
from erag_dagster.labels.tables import (
    GENERATION_COLUMNS,
    GENERATIONS_SCHEMA,
    SCHEMA_VERSION,
    SCORE_COLUMNS,
    SCORES_SCHEMA,
    TABLES,
)

__all__ = [
    "AUDIT_COLUMNS",
    "COPY_ORDER",
    "GENERATIONS_SCHEMA",
    "GENERATION_COLUMNS",
    "SCHEMA_VERSION",
    "SCORES_SCHEMA",
    "SCORE_COLUMNS",
    "STORE_ENV",
    "TABLES",
    "LabelStore",
    "LabelStoreBase",
    "StoreLocked",
    "StoreWriteFailed",
    "generation_key",
    "gold_hash",
    "open_store",
    "redact_url",
    "resolve_store",
    "score_key",
    "utc_now",
]

LabelStore = SqliteLabelStore


def resolve_store(target: str | Path | None, writable: bool = True) -> str:
    """``target``, else ``$ERAG_LABEL_STORE``, else ``<storage root>/labels.sqlite``."""
    if target:
        return str(target)
    from erag_dagster.core.paths import storage_root

    return default_store(storage_root(writable=writable))


def open_store(
    target: str | Path | None = None,
    read_only: bool = False,
    busy_timeout_s: float | None = None,
) -> LabelStoreBase:
    """The store a path or URL names (forms: :mod:`.store_url`; default :func:`resolve_store`).
    ``busy_timeout_s``: how long one statement waits for a lock (default
    :func:`~.store_base.default_busy_timeout`: 60 s, or less when ``$ERAG_LOCK_WAIT_SECONDS``
    is smaller)."""
    kind, where = parse_store(resolve_store(target, writable=not read_only))
    if kind == "postgresql":
        from erag_dagster.labels.store_postgres import PostgresLabelStore

        return PostgresLabelStore(where, read_only=read_only, busy_timeout_s=busy_timeout_s)
    return SqliteLabelStore(where, read_only=read_only, busy_timeout_s=busy_timeout_s)
