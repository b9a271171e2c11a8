"""Content keys of the label store (pure functions of content; see :mod:`.store`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.core.hashing import sha256_json

__all__ = ["generation_key", "gold_hash", "score_key", "utc_now"]


def generation_key(
    reader_fingerprint: str, query_id: str, question_hash: str, text_hash: str
) -> str:
    """Key of one reader answer (formula: :mod:`erag_dagster.labels.store`).

    The document is named by its text only (``text_hash``), never by its id: the reader sees
    the text, so re-ingesting or re-chunking the same corpus under new doc ids reuses every
    stored answer.
    """
    return sha256_json([reader_fingerprint, query_id, question_hash, text_hash])


def gold_hash(answers: Iterable[str]) -> str:
    """sha256 of the canonical JSON of the sorted gold answers."""
    return sha256_json(sorted(answers))


def score_key(generation: str, gold: str, metric: str | CodeVersion) -> str:
    """Key of one score: (generation key, gold hash, metric tag).

    A metric's tag is its name at version 1 and ``name/vN`` from version 2 on
    (:attr:`~erag_dagster.core.code_versions.CodeVersion.tag`; a plain string is taken as the tag):
    scores stored before metrics had versions keep their keys, and a raised version keys its
    scores apart, so they are computed again instead of served stale.
    """
    tag = metric.tag if isinstance(metric, CodeVersion) else metric
    return sha256_json([generation, gold, tag])


def utc_now() -> str:
    """Current UTC time, ISO 8601 with microseconds and ``+00:00``."""
    return datetime.now(UTC).isoformat()
