"""Callback types shared by the library modules (a leaf: imports nothing of erag_dagster).

* :data:`Log` — one progress line for a person (``print``, ``context.log.info``).
* :data:`OnBatch` — called by a reader after each model batch with the batch's item indices
  (positions in the call's input) and their outputs, so callers can commit answers as they come.
"""

from collections.abc import Callable, Sequence

Log = Callable[[str], None]
OnBatch = Callable[[list[int], Sequence[str | None]], None]
