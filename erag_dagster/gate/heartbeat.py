"""Progress of a gate command on stderr: never silent for long, never a flood.

``erag-dagster baseline`` and ``compare`` label runs with the reader, which can take minutes.
:class:`Heartbeat` is the ``log`` they pass to retrieval and labelling:

- a message is written at once when the last line is at least ``min_gap`` seconds old
  (default 3 s); otherwise it is held, and the latest held message is written as soon as
  ``min_gap`` has passed — at most one line per ``min_gap``, and the newest news wins;
- when nothing has been written for ``quiet`` seconds (default 8 s, so a line comes at least
  every 10 s), a line ``<what>: still working (<elapsed>; last: <last message>)`` is written.

Each line is one line: messages are passed through :func:`erag_dagster.gate.escape.shown`.
``verbose=True`` writes every message at once (the ``--verbose`` flag), heartbeats still on.
Times are ``time.monotonic`` seconds; the background thread is a daemon, stopped by
:meth:`close` (or the ``with`` block).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from erag_dagster.gate.escape import shown


def _clock(seconds: float) -> str:
    whole = max(0, round(seconds))
    return f"{whole // 60}:{whole % 60:02d}"


class Heartbeat:
    """A throttled log with a heartbeat (module docstring)."""

    def __init__(
        self,
        write: Callable[[str], None],
        what: str,
        min_gap: float = 3.0,
        quiet: float = 8.0,
        verbose: bool = False,
        tick: float | None = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``tick``: seconds between the background thread's checks (:meth:`poll`); ``None``
        starts no thread (the caller polls). ``clock``: the time source (monotonic seconds)."""
        self._write, self._what = write, what
        self._min_gap, self._quiet, self._verbose = min_gap, quiet, verbose
        self._clock = clock
        self._lock = threading.Lock()
        self._start = self._last_line = clock()
        self._held: str | None = None
        self._latest = "starting"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if tick is not None:
            self._thread = threading.Thread(
                target=self._run, args=(tick,), name="gate-heartbeat", daemon=True
            )
            self._thread.start()

    def _emit(self, text: str, now: float) -> None:
        self._write(f"{self._what}: {shown(text)}")
        self._last_line = now

    def __call__(self, message: str) -> None:
        now = self._clock()
        with self._lock:
            self._latest = message
            if self._verbose or now - self._last_line >= self._min_gap:
                self._held = None
                self._emit(message, now)
            else:
                self._held = message

    def _run(self, tick: float) -> None:
        while not self._stop.wait(tick):
            self.poll()

    def poll(self) -> None:
        """Write the held message once ``min_gap`` has passed, or a heartbeat line after
        ``quiet`` seconds of silence (what the background thread does every ``tick``)."""
        now = self._clock()
        with self._lock:
            if self._held is not None and now - self._last_line >= self._min_gap:
                held, self._held = self._held, None
                self._emit(held, now)
            elif now - self._last_line >= self._quiet:
                elapsed = _clock(now - self._start)
                self._emit(f"still working ({elapsed}; last: {self._latest})", now)

    def close(self) -> None:
        """Stop the thread; a held message is written (the last news is never lost)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._held is not None:
                self._emit(self._held, self._clock())
                self._held = None

    def __enter__(self) -> Heartbeat:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
