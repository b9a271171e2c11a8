"""Audit of stored labels: who made each label of a (query, document) pair, and how.

Who: every stored answer and score records the id of what produced it (``producer_run_id``):
a Dagster run's id for the assets, and an evaluation id (:func:`evaluation_id`,
``api:<32 hex>`` / ``gate:<32 hex>``) for one call of the Python API
(:func:`erag_dagster.evaluate`, ``label``) or of the regression gate (``compare``,
``baseline``). Rows written before ids were recorded outside Dagster have none (null).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from erag_dagster.core.hashing import sha256_json

__all__ = ["AUDIT_COLUMNS", "IDENTITY_COLUMNS", "audit_rows", "evaluation_id", "identity_columns"]

#: The front doors outside Dagster whose evaluations record an :func:`evaluation_id`.
FRONT_DOORS = ("api", "gate")


def evaluation_id(front_door: str) -> str:
    """A new id for one evaluation made outside Dagster: ``"<front door>:<uuid4 hex>"``
    (``api:…`` for :func:`erag_dagster.evaluate` / ``label``, ``gate:…`` for ``compare`` /
    ``baseline``); recorded as the ``producer_run_id`` of every row it writes, as a Dagster
    run records its run id. Unique per call (122 random bits)."""
    if front_door not in FRONT_DOORS:
        raise ValueError(f"unknown front door {front_door!r}; known: {', '.join(FRONT_DOORS)}")
    return f"{front_door}:{uuid.uuid4().hex}"


Query = Callable[[str, Sequence[Any]], tuple[list[str], list[tuple[Any, ...]]]]
"""``query(sql, args)`` → (column names, rows); ``sql`` uses ``?`` placeholders."""


def audit_rows(query: Query, run_column: str, query_id: str, doc_id: str) -> pl.DataFrame:
    """Every stored label of one (query, document) pair, with who made it and how.

    One row per score (a generation without any score yet gives one row with null metric
    and score), columns :data:`AUDIT_COLUMNS`: ``model`` is the identity's model JSON,
    ``model_hash`` the file sha256, commit, or hash of the folder's file hashes,
    ``prompt_template_hash`` the sha256 of the prompt part of the identity, ``decoding``
    JSON. Ordered by generation time, then metric. Reads only (works read-only).
    """
    run = run_column
    sql = f"""
        SELECT g.query_id, g.doc_id, r.name AS reader_name, g.reader_fingerprint,
               r.identity_json, s.metric, ga.answers_json AS gold_answers, g.answer, s.score,
               g.gen_seconds, g.created_at AS generated_at, s.created_at AS scored_at,
               g.{run} AS generation_run_id, s.{run} AS score_run_id,
               g.question_hash, g.text_hash, g.generation_key
        FROM generations g
        LEFT JOIN scores s ON s.generation_key = g.generation_key
        LEFT JOIN readers r ON r.reader_fingerprint = g.reader_fingerprint
        LEFT JOIN gold_answers ga ON ga.gold_hash = s.gold_hash
        WHERE g.query_id = ? AND g.doc_id = ?
        ORDER BY g.created_at, g.generation_key, s.metric
    """
    names, rows = query(sql, (query_id, doc_id))
    out = []
    for values in rows:
        row = dict(zip(names, values, strict=True))
        row |= identity_columns(json.loads(row.pop("identity_json") or "{}"))
        out.append(row)
    schema = {k: pl.String for k in AUDIT_COLUMNS} | {
        "score": pl.Float64,
        "gen_seconds": pl.Float64,
    }
    return pl.DataFrame(out, schema=schema).select(AUDIT_COLUMNS)


#: The columns of :func:`identity_columns`, in :data:`AUDIT_COLUMNS` order.
IDENTITY_COLUMNS = (
    "model",
    "model_hash",
    "dtype",
    "hardware",
    "libraries",
    "prompt_template_hash",
    "decoding",
)


def identity_columns(identity: dict[str, Any]) -> dict[str, str | None]:
    """The :data:`IDENTITY_COLUMNS` of a registered reader identity (the label store's
    ``readers.identity_json``; ``{}`` for an unregistered fingerprint): ``model``, ``libraries``
    and ``decoding`` as canonical JSON, ``model_hash`` (:func:`_model_hash`), the resolved
    ``dtype``, ``hardware`` (JSON; ``"any"`` where the answers do not depend on the machine) and
    ``prompt_template_hash``. A task's identity (LLM annotation, end-to-end) wraps its reader's
    as ``{"task", "reader"}``: the reader's is described."""
    identity = identity.get("reader", identity)
    model = identity.get("model")
    return {
        "model": json.dumps(model, sort_keys=True),
        "model_hash": _model_hash(model),
        "dtype": identity.get("dtype"),
        # only settings whose answers depend on the machine name it (readers/hardware.py)
        "hardware": json.dumps(identity.get("hardware", "any"), sort_keys=True),
        "libraries": json.dumps(identity.get("libraries"), sort_keys=True),
        "prompt_template_hash": _json_hash(identity.get("prompt")),
        "decoding": json.dumps(identity.get("decoding"), sort_keys=True),
    }


AUDIT_COLUMNS = (
    "query_id",
    "doc_id",
    "reader_name",
    "reader_fingerprint",
    *IDENTITY_COLUMNS,
    "metric",
    "gold_answers",
    "answer",
    "score",
    "gen_seconds",
    "generated_at",
    "scored_at",
    "generation_run_id",
    "score_run_id",
    "question_hash",
    "text_hash",
    "generation_key",
)


def _json_hash(value: Any) -> str | None:
    return None if value is None else sha256_json(value)


def _model_hash(model: Any) -> str | None:
    """The one hash naming a model: GGUF sha256, hub commit, or hash of a folder's files."""
    if not isinstance(model, dict):
        return None
    for key in ("sha256", "commit"):
        if model.get(key):
            return str(model[key])
    return _json_hash(model["files"]) if model.get("files") else None
