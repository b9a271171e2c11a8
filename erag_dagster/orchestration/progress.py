"""Progress of the main job on the terminal: one line per finished step, with counts and an ETA.

A step here is one Dagster run of :func:`erag_dagster.orchestration.pipeline.materialize_all` (an
asset group, one partition). Each finished step prints ``[i/n] <assets> [<partition>] <seconds>s ·
elapsed <m:ss> · ETA <m:ss>``. Where the output stream is a terminal, a bar (``[####------]``) heads
the line and the running step is shown on a line redrawn in place; elsewhere (a file, a pipe, a
test) only the finished-step lines are written, so a log stays one line per step.

ETA policy: the remaining steps' time is estimated from the finished ones — a step whose assets
already ran for another partition is estimated at that assets' mean duration, any other step at
the mean of every finished step — so the ETA is a rough guide that sharpens as partitions finish;
until two steps have finished there is none (``ETA ?``: the first step, observing the inputs,
says nothing about the rest), and it is ``0:00`` once every step has finished.

Notes: a library step can put a line on the terminal while the job runs by logging an INFO
record to :data:`~erag_dagster.core.callbacks.NOTES` (the labeller's estimate before it generates,
issue #11: nobody starts a 10-hour labelling run by accident). Within :func:`relaying_notes`
each record is written as ``<running step's label>: <message>`` on its own line, before the
step's progress line; outside it (``erag-dagster label``, tests, the UI) ``NOTES`` has no
handler and drops them.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Hashable, Iterator
from typing import TextIO

from erag_dagster.core.callbacks import NOTES

BAR_WIDTH = 20


def clock(seconds: float) -> str:
    """``m:ss`` (or ``h:mm:ss`` from one hour) of a non-negative duration in seconds."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Counts finished steps of a planned job and writes their progress lines.

    ``write`` receives each finished-step line (without a newline); with ``tty=True`` it also
    receives the redraw strings (``\\r``-prefixed, no newline) of the running step and the bar.
    """

    def __init__(
        self,
        planned: list[Hashable],
        write: Callable[[str], None] = print,
        tty: bool = False,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._planned = list(planned)  # one entry per step: the group key of its assets
        self._write = write
        self._tty = tty
        self._now = now
        self._start = now()
        self._durations: dict[Hashable, list[float]] = {}
        self._done = 0
        self._step_start = self._start
        self._running: str | None = None

    @classmethod
    def to_stream(cls, planned: list[Hashable], stream: TextIO | None = None) -> Progress:
        """Progress written to ``stream`` (default stderr); a bar where it is a terminal."""
        out = stream or sys.stderr
        tty = bool(getattr(out, "isatty", lambda: False)())

        def write(text: str) -> None:
            out.write(text if text.startswith("\r") else text + "\n")
            out.flush()

        return cls(planned, write, tty=tty)

    @property
    def total(self) -> int:
        return len(self._planned)

    def started(self, label: str) -> None:
        """A step begins (``label``: its assets and partition); a terminal shows it running."""
        self._step_start = self._now()
        self._running = label
        if self._tty:
            self._write(self._running_line())

    def _running_line(self) -> str:
        return f"\r{self._bar(self._done)} {self._done + 1}/{self.total} {self._running} …\x1b[K"

    def note(self, text: str) -> None:
        """A line from inside the running step: ``<step label>: text`` (``text`` alone between
        steps); a terminal then redraws the running step under it."""
        line = f"{self._running}: {text}" if self._running else text
        if self._tty:
            self._write(f"\r{line}\x1b[K\n")
            if self._running:
                self._write(self._running_line())
        else:
            self._write(line)

    def finished(self, label: str) -> None:
        """The step begun by :meth:`started` finished: write its line."""
        now = self._now()
        seconds = now - self._step_start
        group = self._planned[self._done] if self._done < self.total else None
        self._durations.setdefault(group, []).append(seconds)
        self._done += 1
        self._running = None
        eta = self.eta()
        line = (
            f"[{self._done}/{self.total}] {label} {seconds:.1f}s · elapsed "
            f"{clock(now - self._start)} · ETA {clock(eta) if eta is not None else '?'}"
        )
        if self._tty:
            self._write(f"\r{self._bar(self._done)} {line}\x1b[K\n")
        else:
            self._write(line)

    def eta(self) -> float | None:
        """Estimated seconds until every planned step has finished (None until two have)."""
        if self._done >= self.total:
            return 0.0
        finished = [d for durations in self._durations.values() for d in durations]
        if len(finished) < 2:
            return None
        overall = sum(finished) / len(finished)
        remaining = 0.0
        for group in self._planned[self._done :]:
            same = self._durations.get(group)
            remaining += sum(same) / len(same) if same else overall
        return remaining

    def _bar(self, done: int) -> str:
        filled = round(BAR_WIDTH * done / self.total) if self.total else BAR_WIDTH
        return "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "]"


class _ToProgress(logging.Handler):
    """Writes each :data:`NOTES` record as a note of the latest tracker a factory made."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.tracker: Progress | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.tracker is not None:
            self.tracker.note(record.getMessage())


@contextlib.contextmanager
def relaying_notes(
    factory: Callable[[list[Hashable]], Progress] = Progress.to_stream,
) -> Iterator[Callable[[list[Hashable]], Progress]]:
    """A progress factory (for :func:`~erag_dagster.orchestration.pipeline.materialize_all`) whose
    trackers also write the :data:`NOTES` records logged while the ``with`` block runs."""
    handler = _ToProgress()

    def make(planned: list[Hashable]) -> Progress:
        handler.tracker = factory(planned)
        return handler.tracker

    level, propagate = NOTES.level, NOTES.propagate
    NOTES.addHandler(handler)
    NOTES.setLevel(logging.INFO)
    NOTES.propagate = False  # the terminal gets each note once, whatever the root logger does
    try:
        yield make
    finally:
        NOTES.removeHandler(handler)
        NOTES.setLevel(level)
        NOTES.propagate = propagate
