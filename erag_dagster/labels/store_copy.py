"""Copy a label store into another (any backend to any backend): ``erag-dagster store copy``.

Every row of every table is read in key order, ``chunk`` rows at a time, and inserted if
absent, one transaction per chunk, tables in :data:`COPY_ORDER` (a score's generation and gold
answers are stored before it). So a copy is idempotent (a second copy inserts nothing), never
overwrites a row the target already has (first answer wins, as for every write), and a copy
interrupted half-way is completed by running it again. The source is opened read-only; a
version-1 source is read as it is and written at the current schema version. The same store on
both sides (also through a symlink or hard link) is refused; a reader's ``spec_json`` is
masked on the way (:meth:`LabelStoreBase.insert_rows`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from erag_dagster.core.errors import InputError, concerning
from erag_dagster.labels.store import COPY_ORDER, LabelStoreBase, open_store, redact_url
from erag_dagster.labels.store_url import StoreTarget, parse_store

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
    if _same_store(parse_store(source), parse_store(target)):
        raise InputError(f"{redact_url(source)}: store copy needs two different stores")
    with concerning(redact_url(source)):  # a fault names the store it concerns
        src = open_store(source, read_only=True)
    with src:
        with concerning(redact_url(target)):
            dst = open_store(target)
        with dst:
            counts = _copy(src, dst, chunk)
    return counts


def _copy(src: LabelStoreBase, dst: LabelStoreBase, chunk: int) -> list[CopyCount]:
    counts = []
    for table in COPY_ORDER:
        read = added = 0
        for rows in src.iter_rows(table, chunk):
            read += len(rows)
            added += dst.insert_rows(table, rows)
        counts.append(CopyCount(table.name, read, added))
    return counts


def _same_store(a: StoreTarget, b: StoreTarget) -> bool:
    """Two settings naming one store: equal, or two SQLite paths that resolve (symlinks, hard
    links) to one file."""
    if a == b:
        return True
    if a.kind != "sqlite" or b.kind != "sqlite":
        return False
    first, second = Path(a.where), Path(b.where)
    if first.resolve() == second.resolve():
        return True
    try:
        return first.exists() and second.exists() and os.path.samefile(first, second)
    except OSError:
        return False
