"""Progress that is never silent for long: a report at least every ``every_s`` seconds.

A reader step (one generator call of :func:`~.cached.generate_stored`) can take minutes on a
CPU — 64 pairs of a 1-billion-parameter model, or one model batch of long passages — so a
report after each step alone leaves the user without news for that long (145 s was seen).
:class:`Ticker` wraps a ``progress(done, total)`` callback (:data:`erag_dagster.core.callbacks.
Progress`): the engine calls it after each step as before, and a daemon thread calls it again
with the current count whenever ``every_s`` seconds have passed since the last call. Calls are
serialised (one at a time, from either thread), so a callback need not be thread-safe. The
count is read from ``count()`` (pairs generated so far; read without a lock: an ``int``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from erag_dagster.core.callbacks import Progress

__all__ = ["PROGRESS_EVERY_S", "Ticker"]

PROGRESS_EVERY_S = 10.0
"""The longest silence, in seconds, between two progress reports while a reader generates."""


class Ticker:
    """``progress`` called after each step and at least every ``every_s`` seconds between.

    ``every_s`` > 0 (seconds); ``tick``: how often the thread looks at the clock (seconds, at
    most ``every_s``). Use as a context manager around the generation; the thread stops on exit.
    """

    def __init__(
        self,
        progress: Progress,
        total: int,
        count: Callable[[], int],
        every_s: float = PROGRESS_EVERY_S,
        tick: float = 0.5,
    ) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0, got {every_s}")
        self._progress, self._total, self._count = progress, total, count
        self._every_s, self._tick = every_s, min(tick, every_s)
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress-ticker", daemon=True)

    def __call__(self, done: int) -> None:
        """Report ``done`` of the total now (the engine's own report after a step)."""
        with self._lock:
            self._last = time.monotonic()
            self._progress(done, self._total)

    def _run(self) -> None:
        while not self._stop.wait(self._tick):
            with self._lock:
                if time.monotonic() - self._last >= self._every_s:
                    self._last = time.monotonic()
                    self._progress(min(self._count(), self._total), self._total)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
