"""Callback types shared by the library modules (a leaf: imports nothing of erag_dagster).

* :data:`Log` — one progress line for a person (``print``, ``context.log.info``).
* :data:`Progress` — ``(done, total)`` pairs generated, at least every 10 s while a reader works.
* :data:`OnBatch` — called by a reader after each model batch with the batch's item indices
  (positions in the call's input) and their outputs, so callers can commit answers as they come.
* :data:`NOTES` — a line for the main job's terminal from inside a step (an INFO record):
  :func:`erag_dagster.orchestration.progress.relaying_notes` writes it above the progress line;
  outside that relay the logger has no handler and is below its level, so the record is dropped. A
  logger and not a callback because the step's caller (a Dagster asset) is not the terminal's owner.
"""

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence

Log = Callable[[str], None]
#: ``progress(done, total)``: pairs generated so far of those to generate, called after each
#: reader step and at least every 10 s while a reader works (:mod:`erag_dagster.labels.ticker`).
Progress = Callable[[int, int], None]
OnBatch = Callable[[list[int], Sequence[str | None]], None]
#: Lines for the terminal from inside a step (INFO records); see the module docstring. The
#: name is the progress module's, whose relay is the one consumer.
NOTES = logging.getLogger("erag_dagster.orchestration.progress")


class _ToWrite(logging.Handler):
    def __init__(self, write: Log) -> None:
        super().__init__(logging.INFO)
        self.write = write

    def emit(self, record: logging.LogRecord) -> None:
        self.write(record.getMessage())


@contextlib.contextmanager
def notes_to(write: Log) -> Iterator[None]:
    """While the ``with`` block runs, every :data:`NOTES` record goes to ``write`` (a command
    outside the main job's relay — ``erag-dagster retrieve`` — says what a step noted, such as
    queries a run file had that were left out)."""
    handler = _ToWrite(write)
    level, propagate = NOTES.level, NOTES.propagate
    NOTES.addHandler(handler)
    NOTES.setLevel(logging.INFO)
    NOTES.propagate = False
    try:
        yield
    finally:
        NOTES.removeHandler(handler)
        NOTES.setLevel(level)
        NOTES.propagate = propagate
