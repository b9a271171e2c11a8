"""Store-backed generation: the one engine that runs a reader only for what the store lacks.

eRAG answers (``labels/labeller.py``), end-to-end answers (``meta/end_to_end.py``) and LLM
relevance annotations (``meta/baselines.py``) are all reader outputs kept in the
:class:`~erag_dagster.labels.store.LabelStore` ``generations`` table, keyed by
``(fingerprint, query id, question hash, text hash)`` (the subject id — a doc id — is stored
beside the answer for audits, but is not part of the key); the other tasks use a *task
fingerprint* (the reader's fingerprint combined with a task version) so they never collide with
eRAG answers. A re-run, or a pair shared by two retrievers, is generated once.

Commit policy (:class:`CommitPolicy`; defaults :data:`DEFAULT_COMMIT`, overridable by the
environment variables ``ERAG_COMMIT_EVERY_PAIRS``, ``ERAG_COMMIT_EVERY_SECONDS`` and
``ERAG_LOCK_WAIT_SECONDS``, or per call):

* generated outputs are committed when ``every_pairs`` are waiting **or** ``every_seconds``
  have passed since the last commit (checked after each reader step of ``step`` subjects), at
  the end, and before any error leaves the engine: a ``kill -9`` loses at most
  ``every_seconds`` plus one step of reader work;
* a store still locked by another process after its busy timeout: the outputs stay in memory
  and the commit is retried with exponential backoff (0.5 s doubling to 30 s) for
  ``lock_wait_seconds`` in all; if the lock never clears they are written to a JSON-lines
  recovery file beside the store (:meth:`LabelStore.write_recovery`, import with
  :meth:`LabelStore.import_recovery`) and a one-line :class:`StorageError` says where;
* a reader output that is ``None`` is never stored (it would become the string ``"None"`` for
  good): the outputs before it are committed and an :class:`EnvironmentFault` names the pair.

Each stored row's ``created_at`` is when its step finished (UTC), so the store records when
every answer was generated; ``gen_seconds`` is its step's wall time divided by the step's size.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from erag_dagster.core.callbacks import Log, OnBatch, Progress
from erag_dagster.core.errors import EnvironmentFault, InputError, StorageError
from erag_dagster.core.hashing import sha256_text
from erag_dagster.labels.recovery import ReaderRecord
from erag_dagster.labels.store import (
    GENERATIONS_SCHEMA,
    LabelStoreBase,
    StoreLocked,
    StoreWriteFailed,
    generation_key,
    utc_now,
)
from erag_dagster.labels.ticker import PROGRESS_EVERY_S, Ticker

__all__ = [
    "DEFAULT_COMMIT",
    "CommitPolicy",
    "Generated",
    "OnBatch",
    "Subject",
    "accepts_on_batch",
    "generate_stored",
    "task_fingerprint",
]

"""``on_batch(positions, outputs)``: outputs of a generator call as they come (see below)."""


@dataclass(frozen=True)
class Subject:
    """What one output is about: ``subject_id`` is a doc id (or a ranked list of doc ids),
    recorded for audits, and ``text`` exactly what the reader saw of it (its sha256, not the id,
    is part of the key)."""

    query_id: str
    question: str
    subject_id: str
    text: str


@dataclass(frozen=True)
class CommitPolicy:
    """When generated outputs are committed, and how long a locked store is waited for.

    ``every_pairs`` >= 1, ``every_seconds`` > 0 (seconds since the last commit),
    ``lock_wait_seconds`` >= 0 (total retry time on a locked store before the recovery file).
    """

    every_pairs: int = 64
    every_seconds: float = 10.0
    lock_wait_seconds: float = 300.0

    def __post_init__(self) -> None:
        if self.every_pairs < 1:
            raise InputError(f"commit every_pairs must be >= 1, got {self.every_pairs}")
        if not self.every_seconds > 0:
            raise InputError(f"commit every_seconds must be > 0, got {self.every_seconds}")
        if not self.lock_wait_seconds >= 0:
            raise InputError(f"lock_wait_seconds must be >= 0, got {self.lock_wait_seconds}")

    @classmethod
    def from_env(cls) -> CommitPolicy:
        """The defaults, each overridden by its environment variable when set."""
        names = {
            "every_pairs": ("ERAG_COMMIT_EVERY_PAIRS", int),
            "every_seconds": ("ERAG_COMMIT_EVERY_SECONDS", float),
            "lock_wait_seconds": ("ERAG_LOCK_WAIT_SECONDS", float),
        }
        values: dict[str, Any] = {}
        for key, (env, kind) in names.items():
            raw = os.environ.get(env)
            if raw:
                try:
                    values[key] = kind(raw)
                except ValueError:
                    raise InputError(f"{env}={raw!r} is not a {kind.__name__}") from None
        return cls(**values)


DEFAULT_COMMIT = CommitPolicy()
"""Every 64 pairs or 10 s, whichever comes first; a locked store is waited for 5 minutes."""


@dataclass(frozen=True)
class Generated:
    """Outputs per subject (input order) and where they came from.

    ``generated``: distinct keys generated now; ``from_store``: distinct keys found stored;
    ``seconds``: wall time of the generator calls, seconds.
    """

    outputs: list[str]
    generated: int
    from_store: int
    seconds: float = 0.0
    keys: list[str] = field(default_factory=list)
    estimate: dict[str, Any] = field(default_factory=dict)


def task_fingerprint(reader_fingerprint: str, task: str) -> str:
    """sha256 of ``"<reader fingerprint>|<task version>"``: names one reader task in the store."""
    return sha256_text(f"{reader_fingerprint}|{task}")


def generate_stored(
    subjects: Sequence[Subject],
    generate: Callable[[list[int]], Sequence[str | None]],
    store: LabelStoreBase | None,
    fingerprint: str,
    reader_name: str,
    identity: Mapping[str, Any],
    *,
    spec: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    step: int = 64,
    streams: bool = False,
    commit: CommitPolicy | None = None,
    progress: Progress | None = None,
    progress_every_s: float = PROGRESS_EVERY_S,
    log: Log | None = None,
    estimate: Callable[[list[int]], Mapping[str, Any]] | None = None,
) -> Generated:
    """Outputs for ``subjects``, generating only the distinct keys ``store`` lacks.

    ``generate(indices)`` returns one string per index of ``subjects``; it is called with at
    most ``step`` indices at a time, in the order of the subjects' first occurrence (sort the
    subjects to batch similar lengths). With ``streams``, it is called as
    ``generate(indices, on_batch)`` and may report outputs as they come with
    ``on_batch(positions in indices, outputs)`` (e.g. per model batch), so commits need not wait
    for the whole call. ``progress(done, total)`` runs after each step and, from a ticker
    thread, whenever ``progress_every_s`` (10 s) pass without one (:mod:`.ticker`). With a
    store, the final outputs are read back from it, so if another process stored a key first,
    its output is the one returned (the first writer wins). Without a store every distinct key
    is generated. ``estimate(indices)`` runs once, before any generation, with the subjects
    to generate (not called when there are none); its mapping is returned as
    ``Generated.estimate``. Commit, lock and ``None`` policy: see the module docstring.
    """
    if step < 1:
        raise ValueError(f"step must be >= 1, got {step}")
    batch = _Pending(subjects, fingerprint, reader_name, run_id, store, commit, log)
    batch.reader = ReaderRecord(fingerprint, reader_name, dict(identity), spec)
    known: dict[str, str] = {}
    if store is not None:
        store.register_reader(fingerprint, reader_name, dict(identity), spec)
        found = store.lookup_generations(batch.keys).select("generation_key", "answer")
        known = dict(found.rows())
    first: dict[str, int] = {}
    for i, key in enumerate(batch.keys):
        if key not in known:
            first.setdefault(key, i)
    todo = list(first.values())
    from_store = len(set(batch.keys) & set(known))
    if log is not None:
        log(f"{reader_name}: {from_store} outputs in the store, {len(todo)} to generate")
    spent = [0.0]
    estimated: dict[str, Any] = {}
    ticker = None
    if progress is not None and todo:
        ticker = Ticker(progress, len(todo), lambda: batch.generated, progress_every_s)
    try:
        # progress at least every progress_every_s, also while the estimate loads the model
        # and in the middle of a step
        with ticker or contextlib.nullcontext():
            estimated = dict(estimate(todo)) if estimate is not None and todo else {}
            _generate_all(todo, step, batch, generate, streams, ticker, spent)
    finally:
        batch.flush()  # also on an error: what was generated is kept
    known.update(batch.outputs)
    if store is not None and todo:
        stored = store.lookup_generations([batch.keys[i] for i in todo])
        known.update(stored.select("generation_key", "answer").rows())
    outputs = [known[k] for k in batch.keys]
    return Generated(outputs, len(todo), from_store, spent[0], batch.keys, estimated)


def _generate_all(
    todo: list[int],
    step: int,
    batch: _Pending,
    generate: Callable[..., Sequence[str | None]],
    streams: bool,
    ticker: Ticker | None,
    spent: list[float],
) -> None:
    """Call ``generate`` on ``todo``, ``step`` subjects at a time, recording every output in
    ``batch`` and reporting to ``ticker`` after each step; ``spent[0]`` gathers the calls'
    wall time (seconds)."""
    for start in range(0, len(todo), step):
        part = todo[start : start + step]
        batch.begin(part)
        began = time.perf_counter()
        outputs = list(generate(part, batch.record) if streams else generate(part))
        spent[0] += time.perf_counter() - began
        if len(outputs) != len(part):
            raise RuntimeError(f"generator returned {len(outputs)} outputs for {len(part)} inputs")
        rest = [p for p in range(len(part)) if p not in batch.recorded]
        if rest:
            batch.record(rest, [outputs[p] for p in rest])
        if ticker is not None:
            ticker(start + len(part))


class _Pending:
    """Outputs generated but not yet committed, and the commit policy that flushes them."""

    def __init__(
        self,
        subjects: Sequence[Subject],
        fingerprint: str,
        reader_name: str,
        run_id: str | None,
        store: LabelStoreBase | None,
        commit: CommitPolicy | None,
        log: Log | None,
    ) -> None:
        self.subjects, self.fingerprint, self.reader_name = subjects, fingerprint, reader_name
        self.run_id, self.store, self.log = run_id, store, log
        self.policy = commit or CommitPolicy.from_env()
        self.question_hashes = [sha256_text(s.question) for s in subjects]
        self.text_hashes = [sha256_text(s.text) for s in subjects]
        self.keys = [
            generation_key(fingerprint, s.query_id, qh, th)
            for s, qh, th in zip(subjects, self.question_hashes, self.text_hashes, strict=True)
        ]
        self.reader: ReaderRecord | None = None  # carried into a recovery file
        self.generated = 0  # outputs recorded so far (the ticker's count)
        self.outputs: dict[str, str] = {}
        self.rows: list[dict[str, Any]] = []
        self.last_commit = time.monotonic()
        self.part: list[int] = []
        self.recorded: set[int] = set()
        self.mark = time.perf_counter()

    def begin(self, part: list[int]) -> None:
        """A generator call for the subjects ``part`` starts now."""
        self.part, self.recorded, self.mark = part, set(), time.perf_counter()

    def record(self, positions: list[int], outputs: Sequence[str | None]) -> None:
        """Keep the outputs of ``part[p]`` for each position ``p``; commit when due."""
        now = time.perf_counter()
        seconds, self.mark = now - self.mark, now
        if len(outputs) != len(positions):
            raise RuntimeError(
                f"generator returned {len(outputs)} outputs for {len(positions)} inputs"
            )
        finished = utc_now()
        for position, output in zip(positions, outputs, strict=True):
            i = self.part[position]
            subject = self.subjects[i]
            if output is None:
                raise EnvironmentFault(
                    f"reader {self.reader_name} returned None for query {subject.query_id!r}, "
                    f"{subject.subject_id!r}: not stored (the answers before it were kept)"
                )
            self.outputs[self.keys[i]] = str(output)
            self.recorded.add(position)
            self.generated += 1
            self.rows.append(
                {
                    "generation_key": self.keys[i],
                    "reader_fingerprint": self.fingerprint,
                    "query_id": subject.query_id,
                    "question_hash": self.question_hashes[i],
                    "doc_id": subject.subject_id,
                    "text_hash": self.text_hashes[i],
                    "answer": str(output),
                    "gen_seconds": seconds / len(positions),
                    "producer_run_id": self.run_id,
                    "created_at": finished,
                }
            )
        due = time.monotonic() - self.last_commit >= self.policy.every_seconds
        if len(self.rows) >= self.policy.every_pairs or due:
            self.flush()

    def flush(self) -> None:
        """Commit what is waiting (nothing to do without a store). The rows leave the queue
        first: a commit that fails has written them to one recovery file, and the flush on
        the way out of the engine must not write them to a second."""
        rows, self.rows = self.rows, []
        if rows and self.store is not None:
            frame = pl.DataFrame(rows, schema=GENERATIONS_SCHEMA)
            readers = [self.reader] if self.reader is not None else []
            _commit(self.store, frame, self.policy, self.log, readers)
        self.last_commit = time.monotonic()


def _recovered(
    store: LabelStoreBase,
    frame: pl.DataFrame,
    why: str,
    when: str = "once there is space",
    readers: Sequence[ReaderRecord] = (),
) -> StorageError:
    """Write ``frame`` to a recovery file (with the ``readers`` records); the one line saying
    why, where, and how to import it (or, when no folder takes the file either, that the
    answers are lost)."""
    try:
        path = store.write_recovery(frame, readers)
    except OSError as exc:
        return StorageError(
            f"{store.location}: {why}; the {frame.height} generated answers could not be saved "
            f"to a recovery file either ({exc.strerror or exc}): free some space and rerun"
        )
    return StorageError(
        f"{store.location}: {why}; {frame.height} generated answers saved to {path}; "
        f"{when}: erag-dagster import-recovery {path} --store {store.location}"
    )


def accepts_on_batch(method: Callable[..., Any]) -> bool:
    """Whether a reader method takes ``on_batch`` (then :func:`generate_stored` can stream)."""
    return "on_batch" in inspect.signature(method).parameters


def _commit(
    store: LabelStoreBase,
    frame: pl.DataFrame,
    policy: CommitPolicy,
    log: Log | None,
    readers: Sequence[ReaderRecord] = (),
) -> None:
    """``put_generations``, retried with backoff while the store is locked; after
    ``lock_wait_seconds`` the rows go to a recovery file and a :class:`StorageError` says so. A
    commit the disk refused (:class:`StoreWriteFailed`) goes to a recovery file at once."""
    began = time.monotonic()
    delay = 0.5
    while True:
        left = policy.lock_wait_seconds - (time.monotonic() - began)
        try:
            with store.waiting_at_most(left):  # the last try ends by lock_wait_seconds
                store.put_generations(frame)
            return
        except StoreWriteFailed as failed:
            why = f"the commit failed ({failed.reason})"
            raise _recovered(store, frame, why, failed.when, readers) from None
        except StoreLocked as locked:
            waited = time.monotonic() - began
            if waited >= policy.lock_wait_seconds:
                why = f"still {locked.reason} after {waited:.0f} s"
                raise _recovered(store, frame, why, "once the lock is gone", readers) from None
            if log is not None:
                log(f"{store.location} is {locked.reason}; retrying in {delay:.1f} s")
            time.sleep(min(delay, max(policy.lock_wait_seconds - waited, 0.0)))
            delay = min(delay * 2, 30.0)
