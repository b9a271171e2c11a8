#!/usr/bin/env python3
"""Reproduce the SQLite label-store corruption seen once in the daemon test (docs/setup.md).

Three processes at a time each open a fresh :class:`SqliteLabelStore` per round and write 20
generation rows with ``insert_rows``; with ``--close`` each round closes its store, without it
the previous round's store is dropped and garbage-collected (what a run process does with
``LabelStoreResource.open()``). Then ``PRAGMA integrity_check``; exit 1 when it fails.
Measured on the 2-core AMD EPYC, SQLite 3.40.1, before the fix in
``labels/store_url._refuse_foreign`` (which read the file's header with a plain open/close, and
so released this process's SQLite locks on it): ``--close`` intact, without it corrupt on every
try; a plain ``sqlite3`` loop in the same pattern intact. After the fix: intact both ways.

    .venv/bin/python scripts/stress_label_store.py [--close] [--waves 4]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def worker(path: str, seed: int, rounds: int, close: bool) -> None:
    sys.path.insert(0, str(REPO))
    from erag_dagster.labels.store_sqlite import SqliteLabelStore
    from erag_dagster.labels.tables import GENERATIONS

    rnd = random.Random(seed)
    for _ in range(rounds):
        store = SqliteLabelStore(path)
        rows = [
            (f"k{rnd.randrange(2000)}", "fp", "q", "qh", "d", "th",
             "answer " * rnd.randrange(1, 200), 0.1, f"r{seed}", "t")
            for _ in range(20)
        ]  # fmt: skip
        store.insert_rows(GENERATIONS, rows)
        if close:
            store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--close", action="store_true", help="close each round's store")
    parser.add_argument("--waves", type=int, default=4, help="waves of 3 processes")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), 40, args.close)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "labels.sqlite")
        sys.path.insert(0, str(REPO))
        from erag_dagster.labels.store_sqlite import SqliteLabelStore

        SqliteLabelStore(path).close()
        extra = ["--close"] if args.close else []
        for wave in range(args.waves):
            procs = [
                subprocess.Popen(
                    [sys.executable, __file__, *extra, "--worker", path, str(wave * 10 + p)],
                    stderr=subprocess.DEVNULL,
                )
                for p in range(3)
            ]
            for proc in procs:
                proc.wait()
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            result = conn.execute("PRAGMA integrity_check").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            result = str(exc)
        print(f"integrity_check ({'close' if args.close else 'garbage-collected'}): {result[:200]}")
        return 0 if result == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
