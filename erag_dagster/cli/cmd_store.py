"""The label-store commands of ``erag-dagster``: ``audit``, ``import-recovery``, ``store copy``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from erag_dagster.core.errors import InputError, concerning

if TYPE_CHECKING:
    from erag_dagster.labels.recovery import RecoveryFile


def cmd_audit(args: argparse.Namespace) -> int:
    from erag_dagster.labels.store import open_store, redact_url, resolve_store
    from erag_dagster.labels.store_url import parse_store

    target = parse_store(resolve_store(args.store, writable=False))
    path = redact_url(target.where)
    if target.kind == "sqlite" and not Path(target.where).exists():  # a folder: named below
        raise InputError(f"{path}: no label store here (run labelling first or pass --store)")
    with concerning(path):
        rows = open_store(args.store, read_only=True).audit(args.query, args.doc)
    if rows.height == 0:
        raise InputError(f"no stored label for query {args.query!r} and document {args.doc!r}")
    if args.json:
        print(json.dumps(rows.to_dicts(), indent=2, default=str))
    else:
        for row in rows.to_dicts():
            print("-" * 72)
            for key, value in row.items():
                print(f"{key:>22}: {value}")
    return 0


def cmd_import_recovery(args: argparse.Namespace) -> int:
    """Insert the answers of a label-store recovery file (written when the store stayed locked
    or the disk was full) into an existing store; ``--create`` starts a new one. Every line is
    checked before anything is written (:mod:`erag_dagster.labels.recovery`)."""
    from erag_dagster.labels.recovery import read_recovery_file
    from erag_dagster.labels.store import open_store, redact_url, resolve_store

    path = redact_url(resolve_store(args.store))
    with concerning(path, args.file):
        file = read_recovery_file(args.file, args.accept_undigested)  # checked before the store
        exists = _store_exists(args.store)
        if not exists and not args.create:
            raise InputError(
                f"{path}: no label store here; import-recovery adds answers to an existing store "
                "(check --store for a typo), or pass --create to start a new one"
            )
        _check_readers(file, args.store, exists, path)  # on a read-only open: before any write
        with open_store(args.store) as store:
            done = store.import_recovery_file(file)
    kept = f", {done.kept} stored with another answer (kept: the first answer wins)"
    print(
        f"{args.file}: {done.added} answers added to {path}, {done.same} already stored"
        + (kept if done.kept else "")
    )
    return 0


def _check_readers(file: RecoveryFile, store: str | None, exists: bool, path: str) -> None:
    """Every fingerprint of ``file`` known to the store ``store`` (opened read-only) or vouched
    for by the file (a store about to be created, ``exists`` False, knows none)."""
    from erag_dagster.labels.store import open_store
    from erag_dagster.labels.store_base import recovery_readers

    if not exists:
        recovery_readers(file, lambda _fingerprint: None, path)
        return
    with open_store(store, read_only=True) as opened:
        recovery_readers(file, opened.reader_identity, path)


def _store_exists(store: str | None) -> bool:
    """Whether the store ``store`` names holds a label store (an SQLite file: exists and is not
    empty; a server: its tables exist). Opens nothing for writing and creates nothing."""
    from erag_dagster.labels.store import open_store, resolve_store
    from erag_dagster.labels.store_base import NoLabelStore
    from erag_dagster.labels.store_url import parse_store

    target = parse_store(resolve_store(store))
    if target.kind == "sqlite" and not Path(target.where).exists():
        return False
    try:
        with open_store(store, read_only=True) as opened:
            return opened.schema_version() > 0
    except NoLabelStore:
        return False


def cmd_store_copy(args: argparse.Namespace) -> int:
    """Copy every row of one label store into another (insert-if-absent; counts printed)."""
    from erag_dagster.labels.store import redact_url
    from erag_dagster.labels.store_copy import copy_store

    source, target = redact_url(args.source), redact_url(args.target)
    with concerning(source, target):
        counts = copy_store(args.source, args.target, chunk=args.chunk)
    for count in counts:
        print(f"{count.table}: {count.read} read, {count.added} added")
    added = sum(c.added for c in counts)
    print(f"copied {source} -> {target}: {added} rows added (rows already there kept)")
    return 0
