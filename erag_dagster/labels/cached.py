"""Store-backed generation for reader tasks other than eRAG's per-document answer.

End-to-end answers (``meta/end_to_end.py``) and LLM relevance annotations
(``meta/baselines.py``) are reader outputs too; they live in the same
:class:`~erag_dagster.labels.store.LabelStore` ``generations`` table under a *task fingerprint*
(the reader's fingerprint combined with a task version, so they never collide with eRAG answers),
keyed like eRAG generations by ``(fingerprint, query id, question hash, subject id, text hash)``.
A re-run, or a pair shared by two retrievers, is generated once; a crash loses at most the chunk
in flight (each chunk is committed before the next starts).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from erag_dagster.labels.store import LabelStore, generation_key, sha256_text

__all__ = ["Subject", "stored_or_generated", "task_fingerprint"]


@dataclass(frozen=True)
class Subject:
    """What one output is about: ``subject_id`` is a doc id (or a ranked list of doc ids) and
    ``text`` exactly what the reader saw of it (its sha256 is part of the key)."""

    query_id: str
    question: str
    subject_id: str
    text: str


def task_fingerprint(reader_fingerprint: str, task: str) -> str:
    """sha256 of ``"<reader fingerprint>|<task version>"``: names one reader task in the store."""
    return sha256_text(f"{reader_fingerprint}|{task}")


def stored_or_generated(
    subjects: Sequence[Subject],
    generate: Callable[[list[int]], Sequence[str]],
    store: LabelStore | None,
    fingerprint: str,
    reader_name: str,
    identity: Mapping[str, Any],
    dagster_run_id: str | None = None,
    chunk: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[str], int]:
    """Outputs for ``subjects`` (input order) and how many distinct ones were generated now.

    ``generate(indices)`` returns one string per index of ``subjects``; it is called only for
    subjects whose key is not in ``store`` (each distinct key once, ``chunk`` at a time, every
    chunk committed before the next; ``progress(done, total)`` after each). Without a store
    every subject is generated, still once per distinct key. ``gen_seconds`` of a stored row is
    its chunk's wall time divided by the chunk's size.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    keys = [
        generation_key(
            fingerprint, s.query_id, sha256_text(s.question), s.subject_id, sha256_text(s.text)
        )
        for s in subjects
    ]
    known: dict[str, str] = {}
    if store is not None:
        store.register_reader(fingerprint, reader_name, dict(identity))
        known = dict(store.lookup_generations(keys).select("generation_key", "answer").rows())
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key not in known:
            first.setdefault(key, i)
    todo = list(first.values())
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        began = time.perf_counter()
        outputs = [str(o) for o in generate(part)]
        if len(outputs) != len(part):
            raise RuntimeError(f"generator returned {len(outputs)} outputs for {len(part)} inputs")
        seconds = time.perf_counter() - began
        if store is not None:
            store.put_generations(
                pl.DataFrame(
                    {
                        "generation_key": [keys[i] for i in part],
                        "reader_fingerprint": [fingerprint] * len(part),
                        "query_id": [subjects[i].query_id for i in part],
                        "question_hash": [sha256_text(subjects[i].question) for i in part],
                        "doc_id": [subjects[i].subject_id for i in part],
                        "text_hash": [sha256_text(subjects[i].text) for i in part],
                        "answer": outputs,
                        "gen_seconds": [seconds / len(part)] * len(part),
                        "dagster_run_id": [dagster_run_id] * len(part),
                    },
                    schema_overrides={"dagster_run_id": pl.String},
                )
            )
        known.update(zip((keys[i] for i in part), outputs, strict=True))
        if progress is not None:
            progress(start + len(part), len(todo))
    return [known[k] for k in keys], len(todo)
