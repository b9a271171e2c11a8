"""The main job's terminal lines for every costly reader step: an estimate before, an ETA during.

eRAG labels, end-to-end passes, LLM-annotation baselines and likelihood labels all generate
through :func:`erag_dagster.labels.cached.generate_stored`; each passes a :class:`StepNotes` as
its ``estimate`` and ``progress`` hooks, so ``erag-dagster run`` says before the work what it
will cost — the same token counting as the labels (:func:`~erag_dagster.readers.accounting.
run_estimate`) — and, while it runs, how far it is and how long the rest should take:

    end_to_end (top 3): 30 pairs to generate, ~9,870 prompt tokens (329 per pair), ...
    end_to_end (top 3): 12/30 done, 0:41 elapsed, ETA 1:02

ETA policy: the remaining items times the mean seconds per item generated so far (items are
the step's unit: pairs, queries); none before the first item is done. A line at most every
:data:`NOTE_EVERY_S` seconds (the progress hook is called at least every 10 s), and one when
the step completes. Lines go to :data:`~erag_dagster.core.callbacks.NOTES` (dropped outside the
main job's relay).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from erag_dagster.core.callbacks import NOTES
from erag_dagster.readers.accounting import estimate_summary, run_estimate

NOTE_EVERY_S = 20.0
"""The least time between two ETA lines of one step (seconds)."""


def clock(seconds: float) -> str:
    """``m:ss`` of a non-negative duration in seconds."""
    whole = max(0, round(seconds))
    return f"{whole // 60}:{whole % 60:02d}"


class StepNotes:
    """Estimate and ETA lines of one reader step called ``what``.

    ``items(indices)`` gives the ``(question, text)`` the reader will read for the subjects at
    ``indices`` (what :func:`run_estimate` counts tokens of).
    """

    def __init__(
        self,
        what: str,
        reader: Any,
        items: Callable[[list[int]], Sequence[tuple[str, str]]],
        now: Callable[[], float] = time.monotonic,
        every_s: float = NOTE_EVERY_S,
    ) -> None:
        self.what, self._reader, self._items = what, reader, items
        self._now, self._every = now, every_s
        self._start = now()
        self._last_note: float | None = None

    def estimate(self, indices: list[int]) -> Mapping[str, Any]:
        """The ``estimate`` hook: counts the prompt tokens and writes the estimate line."""
        self._start = self._now()
        found = run_estimate(self._reader, list(self._items(indices)))
        if found:
            NOTES.info(f"{self.what}: {estimate_summary(found)}")
        return found

    def progress(self, done: int, total: int) -> None:
        """The ``progress`` hook: an ETA line at most every ``every_s`` seconds, and at the end."""
        now = self._now()
        last = done >= total
        if not last and self._last_note is not None and now - self._last_note < self._every:
            return
        self._last_note = now
        elapsed = now - self._start
        eta = eta_seconds(done, total, elapsed)
        left = "done" if last else f"ETA {clock(eta)}" if eta is not None else "ETA ?"
        NOTES.info(f"{self.what}: {done}/{total} done, {clock(elapsed)} elapsed, {left}")


def eta_seconds(done: int, total: int, elapsed: float) -> float | None:
    """Seconds left at the mean rate so far (``None`` before the first item is done)."""
    if done <= 0:
        return None
    return max(0, total - done) * elapsed / done


def chained(*hooks: Callable[[int, int], None] | None) -> Callable[[int, int], None]:
    """One progress hook calling each given hook (``None`` skipped) in order."""

    def call(done: int, total: int) -> None:
        for hook in hooks:
            if hook is not None:
                hook(done, total)

    return call
