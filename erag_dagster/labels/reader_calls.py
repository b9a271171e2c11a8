"""Where one partition's reader calls run: in this process, or on one Ray pool shared by its tasks.

Every reader task of a partition generates through :class:`ReaderCalls`: eRAG answers
(:func:`~erag_dagster.labels.labeller.label_run`), end-to-end answers
(:mod:`erag_dagster.meta.end_to_end`), closed-book answers (:mod:`erag_dagster.labels.signed`),
LLM-annotation P(yes) (:mod:`erag_dagster.meta.baselines`) and likelihood log-probabilities
(:mod:`erag_dagster.labels.likelihood`). With the ``generation`` executor ``inprocess`` (the
default) a call is the reader's own method; with ``ray`` it is sharded over the reader replicas
of one :class:`~erag_dagster.labels.ray_pool.RayReaderPool`, started on the first call that has
something to generate and shared by every later task of the same :func:`reader_calls` block
(an asset's partition loads its replicas once). The store, keys, commit policy and ``None``
policy stay :func:`~erag_dagster.labels.cached.generate_stored`'s either way: only where the
reader runs changes, so both executors give the same outputs (tested in ``tests/ray_cases.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from erag_dagster.core.callbacks import Log, OnBatch
from erag_dagster.core.errors import InputError
from erag_dagster.labels.cached import accepts_on_batch
from erag_dagster.labels.executor import ExecutorSpec

__all__ = ["ReaderCalls", "reader_calls", "spec_dict"]


def spec_dict(reader: Any) -> dict[str, Any] | None:
    """The reader's registry spec as a mapping (what a Ray actor rebuilds it from), or ``None``
    for a reader not built from one."""
    spec = getattr(reader, "spec", None)
    to_dict = getattr(spec, "to_dict", None)
    return to_dict() if callable(to_dict) else None


class ReaderCalls:
    """Calls of one reader's batch methods, in this process or on a lazily started Ray pool.

    ``executor`` ``None`` or not on Ray: in-process. Close it (or use :func:`reader_calls`) to
    stop the pool's actors.
    """

    def __init__(self, reader: Any, executor: ExecutorSpec | None = None, log: Log | None = None):
        self.reader, self.executor = reader, executor
        self.log = log or (lambda _msg: None)
        self._pool: Any = None

    @property
    def on_ray(self) -> bool:
        return self.executor is not None and self.executor.on_ray

    def streams(self, method: str) -> bool:
        """Whether ``method`` reports outputs per model batch (``on_batch``): always on Ray (the
        pool streams each chunk back), in-process when the reader's method takes ``on_batch``."""
        return self.on_ray or accepts_on_batch(getattr(self.reader, method))

    def step(self, in_process: int, total: int) -> int:
        """The engine's step (subjects per generator call): ``in_process`` in this process;
        on Ray one call over all ``total`` subjects, which the pool cuts into chunks of the
        in-process size, so the actors work in parallel and commits still stream."""
        return max(1, total) if self.on_ray else in_process

    def __call__(
        self,
        method: str,
        items: Sequence[Any],
        on_batch: OnBatch | None = None,
        *,
        chunk: int = 64,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[Any]:
        """``reader.<method>(items)``: one output per item, input order. On Ray the items are
        cut into chunks of ``chunk`` (idle actors take the next) and ``progress(done, total)``
        runs after each chunk; ``on_batch`` receives outputs as they come, both ways."""
        if not self.on_ray:
            call = getattr(self.reader, method)
            if on_batch is not None and accepts_on_batch(call):
                return list(call(items, on_batch=on_batch))
            return list(call(items))
        return self._ray_pool().answer(
            items, on_batch, chunk=chunk, progress=progress, method=method
        )

    def _ray_pool(self) -> Any:
        if self._pool is None:
            from erag_dagster.labels.ray_pool import RayReaderPool

            spec = spec_dict(self.reader)
            if spec is None:
                raise InputError(
                    f"reader {self.reader.name!r}: the ray executor needs a reader built from a "
                    "registry spec"
                )
            assert self.executor is not None
            self._pool = RayReaderPool(
                self.executor, self.reader.name, spec, self.reader.fingerprint, log=self.log
            )
        return self._pool

    def close(self) -> None:
        """Stop the pool's actors (and a cluster it started); say what an actor loss cost."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        pool.close()
        if pool.stats.actors_lost:
            self.log(
                f"Ray: {pool.stats.actors_lost} actor(s) lost, {pool.stats.pairs_retried} pairs "
                "generated again elsewhere"
            )


@contextmanager
def reader_calls(
    reader: Any, executor: ExecutorSpec | ReaderCalls | None, log: Log | None = None
) -> Iterator[ReaderCalls]:
    """:class:`ReaderCalls` for ``reader``: ``executor`` itself when it already is one (its
    opener closes it: tasks of one partition share its pool), else a new one, closed on exit."""
    if isinstance(executor, ReaderCalls):
        yield executor
        return
    calls = ReaderCalls(reader, executor, log)
    try:
        yield calls
    finally:
        calls.close()
