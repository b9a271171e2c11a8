"""One reader replica on a Ray actor, and how its errors reach the driver.

:class:`ReaderActor` is the class Ray wraps (its methods run in the actor process): it builds
its reader from the driver reader's spec through the in-process factory (:func:`build_reader`),
reports the reader's fingerprint before loading weights, and runs one of :data:`METHODS` on a
chunk of items, yielding outputs per model batch (a Ray streaming generator) or, for Ray Client,
the chunk whole. A reader error inside an actor (an :class:`~erag_dagster.core.errors.InputError` or
:class:`~erag_dagster.core.errors.EnvironmentFault`) reaches the driver as itself
(:func:`actor_cause`, :func:`load_error`); anything else stays a bug with Ray's traceback.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Mapping
from typing import Any

from erag_dagster.core.errors import EnvironmentFault, InputError
from erag_dagster.labels.cached import accepts_on_batch
from erag_dagster.readers.factory import reader_from_config

__all__ = ["METHODS", "ReaderActor", "actor_cause", "build_reader", "load_error"]


def build_reader(name: str, config: Mapping[str, Any]) -> Any:
    """A reader from its registry spec, through the factory in-process readers use (any
    backend: transformers, openai, vllm)."""
    return reader_from_config(name, dict(config))


#: The reader methods a pool runs (each takes a list of items; ``on_batch`` where it streams).
METHODS = ("answer", "answer_with_contexts", "yes_probability", "continuation_log_probs")


class ReaderActor:
    """One reader replica (the class Ray wraps; its methods run in the actor process).

    The reader is built (identity only) when the actor starts and loaded by :meth:`load`, so a
    replica whose fingerprint differs from the driver's is refused before it loads any weights.
    """

    def __init__(self, name: str, config: dict[str, Any]) -> None:
        self.reader = build_reader(name, config)

    def fingerprint(self) -> tuple[str, int]:
        return self.reader.fingerprint, os.getpid()

    def load(self) -> None:
        load = getattr(self.reader, "load", None)
        if callable(load):
            load()

    def answer_whole(self, items: list[tuple[Any, ...]], method: str = "answer") -> list[Any]:
        """:meth:`answer`'s batches as one list (for Ray Client, which cannot stream)."""
        return list(self.answer(items, method))

    def answer(self, items: list[tuple[Any, ...]], method: str = "answer") -> Any:
        """Yields ``(positions in items, outputs)`` of ``reader.<method>(items)`` per model
        batch (one yield if the method cannot stream), then ends; a reader error is raised to
        the driver. ``method`` is one of :data:`METHODS`."""
        if method not in METHODS:
            raise ValueError(f"reader method {method!r} is not one a pool runs: {METHODS}")
        call = getattr(self.reader, method)
        if not accepts_on_batch(call):
            yield list(range(len(items))), list(call(items))
            return
        inbox: queue.SimpleQueue[tuple[str, Any, Any]] = queue.SimpleQueue()

        def work() -> None:
            try:
                outputs = call(
                    items, on_batch=lambda pos, outs: inbox.put(("batch", list(pos), list(outs)))
                )
                inbox.put(("done", outputs, None))
            except BaseException as exc:  # handed to the driver below
                inbox.put(("error", exc, None))

        threading.Thread(target=work, daemon=True).start()
        sent: set[int] = set()
        while True:
            kind, first, second = inbox.get()
            if kind == "error":
                raise first
            if kind == "done":
                rest = [p for p in range(len(items)) if p not in sent]
                if rest:
                    yield rest, [first[p] for p in rest]
                return
            sent.update(first)
            yield first, second


def load_error(exc: BaseException, actor: str, reader: str) -> Exception:
    """What a failed actor start or load raises: the reader's own one-line error, else one
    :class:`EnvironmentFault` line."""
    cause = actor_cause(exc)
    if isinstance(cause, InputError | EnvironmentFault):
        return cause
    first = (str(cause).strip().splitlines() or [type(cause).__name__])[-1]
    return EnvironmentFault(f"Ray reader actor {actor} could not load reader {reader!r}: {first}")


def actor_cause(exc: BaseException) -> BaseException:
    """The exception a Ray task raised inside the actor (Ray wraps it), else ``exc``."""
    return getattr(exc, "cause", None) or exc
