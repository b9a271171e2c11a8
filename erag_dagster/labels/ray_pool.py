"""Reader replicas on Ray actors: the unseen pairs of one call sharded over them.

:class:`RayReaderPool` is the ``generate`` of :func:`~erag_dagster.labels.cached.generate_stored`
when the ``generation`` executor is ``ray`` (:mod:`erag_dagster.labels.executor`): the engine,
its commit policy (by count or time), its store and its ``None`` policy are the in-process ones;
only where the reader runs changes.

* **Replicas** (:mod:`.ray_actor`). Each actor builds its reader from the driver reader's spec
  through the same loading path as in-process
  (:func:`~erag_dagster.labels.ray_actor.build_reader`), reserving ``num_cpus`` CPUs (also its torch
  threads) and ``num_gpus`` GPUs. Before it loads any weights every actor reports its reader
  fingerprint; one that differs from the driver's (e.g. ``dtype: auto`` resolving to bf16 on a
  GPU actor and float32 here, or a model path naming another file on the cluster's machines) is
  refused with one line, since its outputs would be stored under the wrong key.
* **Methods.** A pool runs any of the reader's batch methods
  (:data:`~erag_dagster.labels.ray_actor.METHODS`): eRAG answers, end-to-end and closed-book
  answers (``answer_with_contexts``), P(yes) and teacher-forced log-probabilities;
  :mod:`erag_dagster.labels.reader_calls` chooses it for every task.
* **Sharding.** The pairs are cut into chunks of ``chunk`` pairs in the order the engine gives
  them (the chunks of an in-process run, so model batches are the same); an idle actor takes the
  next chunk. Answers stream back per model batch (a Ray streaming generator) and go straight to
  ``on_batch``, where the engine commits them by count or time. Through Ray Client
  (``ray://``), which cannot stream actor methods, each chunk comes back whole instead.
* **Failures.** An actor that dies (killed, OOM, node lost) loses only the answers of its chunk
  that had not streamed back yet (through Ray Client: its whole chunk; answers the driver holds
  are committed by the engine as usual); those pairs are queued again and taken by another
  live actor, **once**: a chunk whose retry also loses its actor, or a pool with no live actor
  left, stops with one :class:`~erag_dagster.core.errors.EnvironmentFault` line (what was generated
  is committed). A reader error inside an actor (an :class:`~erag_dagster.core.errors.InputError`
  or :class:`~erag_dagster.core.errors.EnvironmentFault`) is re-raised as itself; anything else
  stays a bug with Ray's traceback.

Connecting to Ray (and importing it: only there, when a pool starts) is
:mod:`.ray_session`'s job; this module schedules chunks on the actors and handles their loss.
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from erag_dagster.core.callbacks import Log, OnBatch
from erag_dagster.core.errors import EnvironmentFault, InputError
from erag_dagster.core.input_numbers import format_given
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.ray_actor import ReaderActor, actor_cause, load_error
from erag_dagster.labels.ray_session import NAMESPACE, connect, import_ray, is_client

__all__ = ["PoolStats", "RayReaderPool"]

#: Seconds to wait for the actors to start and load their readers (GPUs may need scaling up).
START_TIMEOUT_S = float(os.environ.get("ERAG_RAY_START_TIMEOUT", "900"))


@dataclass
class _Task:
    """One chunk on one actor: ``positions`` index the call's items."""

    actor: Any
    actor_name: str
    positions: list[int]
    attempt: int
    whole: bool = False
    received: set[int] = field(default_factory=set)


@dataclass
class PoolStats:
    """What a pool did: chunks run, actors lost, pairs queued again after an actor died."""

    chunks: int = 0
    actors_lost: int = 0
    pairs_retried: int = 0
    pids: list[int] = field(default_factory=list)


class RayReaderPool:
    """``spec.actors`` reader replicas on Ray for the reader ``name``/``config``.

    Use as a context manager: the first :meth:`answer` connects to Ray (see :mod:`.executor` for
    ``address``) and starts the actors; leaving kills them and, if this pool started the Ray
    cluster, shuts it down. ``fingerprint`` is the driver's reader fingerprint the actors must
    reproduce.
    """

    def __init__(
        self,
        spec: ExecutorSpec,
        name: str,
        config: Mapping[str, Any],
        fingerprint: str,
        *,
        log: Log | None = None,
    ) -> None:
        self.spec, self.name, self.fingerprint = spec, name, fingerprint
        self.config = {**dict(config), "num_threads": max(1, math.floor(spec.num_cpus))}
        self.config.pop("name", None)
        self.log = log or (lambda _msg: None)
        self.stats = PoolStats()
        self.actors: dict[str, Any] = {}
        self._ray: Any = None
        self._started_cluster = False
        self._client = False

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> RayReaderPool:
        return self

    def start(self) -> None:
        """Connect to Ray and start the actors (the first :meth:`answer` does it: a call whose
        pairs are all stored never touches Ray). Idempotent."""
        if self.actors:
            return
        ray = self._ray = import_ray()
        self._started_cluster = connect(ray, self.spec, self.log)
        self._client = is_client(ray)
        try:
            self._start_actors(ray)
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_actors(self, ray: Any) -> None:
        remote = ray.remote(
            num_cpus=self.spec.num_cpus,
            num_gpus=self.spec.num_gpus,
            max_restarts=0,
            max_task_retries=0,
        )(ReaderActor)
        tag = uuid.uuid4().hex[:8]
        for i in range(self.spec.actors):
            actor_name = f"erag-reader-{tag}-{i}"
            self.actors[actor_name] = remote.options(name=actor_name, namespace=NAMESPACE).remote(
                self.name, self.config
            )
        refs = {a.fingerprint.remote(): n for n, a in self.actors.items()}
        try:
            ready, waiting = ray.wait(list(refs), num_returns=len(refs), timeout=START_TIMEOUT_S)
        except Exception as exc:  # pragma: no cover - Ray internals
            raise EnvironmentFault(f"Ray reader actors did not start: {exc}") from None
        if waiting:
            raise EnvironmentFault(
                f"{len(waiting)} of {len(refs)} Ray reader actors not started after "
                f"{START_TIMEOUT_S:.0f} s: does the cluster have "
                f"{format_given(self.spec.num_cpus)} CPU and {format_given(self.spec.num_gpus)} "
                "GPU free per actor? (ERAG_RAY_START_TIMEOUT)"
            )
        for ref in ready:
            try:
                fingerprint, pid = ray.get(ref)
            except ray.exceptions.RayError as exc:
                raise load_error(exc, refs[ref], self.name) from None
            if fingerprint != self.fingerprint:
                raise EnvironmentFault(
                    f"Ray actor {refs[ref]} resolves reader {self.name!r} to fingerprint "
                    f"{fingerprint[:16]}, this process to {self.fingerprint[:16]} (a different "
                    "model file, library or dtype there): set device and dtype explicitly"
                )
            self.stats.pids.append(pid)
        self._wait_loaded(ray)
        self.log(
            f"Ray: {len(self.actors)} reader actors ready ({format_given(self.spec.num_cpus)} CPU, "
            f"{format_given(self.spec.num_gpus)} GPU each)"
        )

    def _wait_loaded(self, ray: Any) -> None:
        """Load every (fingerprint-checked) replica's weights; a load error is one line."""
        refs = {a.load.remote(): n for n, a in self.actors.items()}
        ready, waiting = ray.wait(list(refs), num_returns=len(refs), timeout=START_TIMEOUT_S)
        if waiting:
            raise EnvironmentFault(
                f"{len(waiting)} of {len(refs)} Ray reader actors had not loaded reader "
                f"{self.name!r} after {START_TIMEOUT_S:.0f} s (ERAG_RAY_START_TIMEOUT)"
            )
        for ref in ready:
            try:
                ray.get(ref)
            except ray.exceptions.RayError as exc:
                raise load_error(exc, refs[ref], self.name) from None

    def close(self) -> None:
        """Kill this pool's actors; shut Ray down if this pool started it. Idempotent."""
        ray = self._ray
        if ray is None:
            return
        for actor in self.actors.values():
            with contextlib.suppress(Exception):  # already dead, or the cluster is gone
                ray.kill(actor)
        self.actors = {}
        if self._started_cluster and ray.is_initialized():
            ray.shutdown()
        self._started_cluster = False

    # -- generation ----------------------------------------------------------------------------

    def answer(
        self,
        items: Sequence[tuple[Any, ...]],
        on_batch: OnBatch | None = None,
        *,
        chunk: int = 64,
        progress: Callable[[int, int], None] | None = None,
        method: str = "answer",
    ) -> list[Any]:
        """One output of ``reader.<method>`` per item, in input order, computed on the actors
        (``answer``: items are ``(question, passage)``; any of
        :data:`~erag_dagster.labels.ray_actor.METHODS`).

        ``on_batch(positions in items, outputs)`` receives every output exactly once, as it
        streams back; ``progress(done, total)`` runs after each finished chunk.
        """
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        if not items:
            return []
        self.start()
        ray = self._ray
        outputs: list[Any] = [None] * len(items)
        done = 0
        todo: deque[tuple[list[int], int]] = deque(
            (list(range(s, min(s + chunk, len(items)))), 0) for s in range(0, len(items), chunk)
        )
        idle = list(self.actors)
        running: dict[Any, _Task] = {}
        while todo or running:
            while todo and idle:
                actor_name = idle.pop(0)
                positions, attempt = todo.popleft()
                actor = self.actors[actor_name]
                chunk_items = [tuple(items[p]) for p in positions]
                if self._client:  # Ray Client cannot stream: the chunk comes back whole
                    handle = actor.answer_whole.remote(chunk_items, method)
                else:
                    handle = actor.answer.options(num_returns="streaming").remote(
                        chunk_items, method
                    )
                running[handle] = _Task(actor, actor_name, positions, attempt, self._client)
                self.stats.chunks += 1
            if not running:
                raise EnvironmentFault(
                    f"no live Ray reader actor left; {sum(len(p) for p, _ in todo)} pairs not "
                    "generated (the answers before were committed)"
                )
            ready, _ = ray.wait(list(running), num_returns=1)
            handle = ready[0]
            task = running[handle]
            try:
                if task.whole:
                    batches, finished = ray.get(handle), True
                else:
                    try:
                        batches, finished = [ray.get(next(handle))], False
                    except StopIteration:
                        batches, finished = [], True
            except ray.exceptions.RayActorError as exc:
                del running[handle]
                self._lost(task, todo, exc)
                continue
            except ray.exceptions.RayTaskError as exc:
                cause = actor_cause(exc)
                if isinstance(cause, InputError | EnvironmentFault):
                    raise cause from None
                raise
            for local, answers in batches:
                positions = [task.positions[p] for p in local]
                if any(p in task.received for p in positions):
                    raise RuntimeError(f"Ray actor {task.actor_name} sent an answer twice")
                task.received.update(positions)
                for p, answer in zip(positions, answers, strict=True):
                    outputs[p] = answer
                if on_batch is not None:
                    on_batch(positions, answers)
            if finished:
                del running[handle]
                idle.append(task.actor_name)
                done += len(task.positions)
                if progress is not None:
                    progress(done, len(items))
        return outputs

    def _lost(self, task: _Task, todo: deque[tuple[list[int], int]], exc: Exception) -> None:
        """An actor died: drop it and queue its chunk's unanswered pairs once more."""
        self.actors.pop(task.actor_name, None)
        self.stats.actors_lost += 1
        rest = [p for p in task.positions if p not in task.received]
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if task.attempt >= 1:
            raise EnvironmentFault(
                f"Ray reader actor {task.actor_name} died ({reason}) while retrying "
                f"{len(rest)} pairs that another actor had already lost; not retried again "
                "(the answers before were committed)"
            )
        self.stats.pairs_retried += len(rest)
        self.log(
            f"Ray reader actor {task.actor_name} died ({reason}); {len(task.received)} of its "
            f"{len(task.positions)} pairs had streamed back, {len(rest)} queued once more"
        )
        if rest:
            todo.appendleft((rest, task.attempt + 1))
