"""Copy a label store into another (any backend to any backend): ``erag-dagster store copy``.

Every row of every table is read in key order, ``chunk`` rows at a time, and inserted if
absent, one transaction per chunk, tables in :data:`COPY_ORDER` (a score's generation and gold
answers are stored before it). So a copy is idempotent (a second copy inserts nothing), never
overwrites a row the target already has (first answer wins, as for every write), and a copy
interrupted half-way is completed by running it again. The source is opened read-only; a
version-1 source is read as it is and written at the current schema version.
"""

from __future__ import annotations

from dataclasses import dataclass

from erag_dagster.errors import InputError
from erag_dagster.labels.store import COPY_ORDER, open_store, redact_url
from erag_dagster.labels.store_url import parse_store

__all__ = ["CopyCount", "copy_store"]


@dataclass(frozen=True)
class CopyCount:
    """Rows of one table: ``read`` from the source, ``added`` to the target (new keys)."""

    table: str
    read: int
    added: int


def copy_store(source: str, target: str, chunk: int = 10_000) -> list[CopyCount]:
    """Copy store ``source`` into ``target`` (paths or URLs; the target is created if absent).
    Returns one :class:`CopyCount` per table. The same store on both sides is an
    :class:`InputError`."""
    if parse_store(source) == parse_store(target):
        raise InputError(f"{redact_url(source)}: store copy needs two different stores")
    counts = []
    with open_store(source, read_only=True) as src, open_store(target) as dst:
        for table in COPY_ORDER:
            read = added = 0
            for rows in src.iter_rows(table, chunk):
                read += len(rows)
                added += dst.insert_rows(table, rows)
            counts.append(CopyCount(table.name, read, added))
    return counts
