"""Label store throughput: PostgreSQL vs SQLite, same keys, same batches, one run.

For ``--keys`` generation rows (64-hex keys, realistic answers) it measures on each backend,
through the store's own API (``put_generations``, ``lookup_generations``), with ``--batch`` rows
per call (one transaction per call, as the labeller commits):

* **insert** — new keys, rows per second;
* **insert again** — the same rows once more (every key present: insert-if-absent skips them);
* **lookup hit** — stored keys, rows found per second;
* **lookup miss** — keys never stored, keys per second (what a fresh run asks first).

and prints them side by side with the PostgreSQL / SQLite ratio. SQLite runs with WAL and
``synchronous=FULL``; the PostgreSQL server is a throwaway Debian PostgreSQL on loopback
(tests/postgres_server.py, ``fsync=on``; default settings otherwise) unless ``--pg-url`` names
a server (the bench creates, then drops, a database ``erag_bench_store`` there). Both run on
this machine, so the network is loopback: a remote server adds a round trip per call.

    python bench/store.py [--keys 100000] [--batch 1000] [--pg-url URL] [--quick] [--json PATH]

``--quick`` is a smoke run (5 000 keys). ``--json PATH`` also writes the table as JSON rows
(``-`` = stdout, the table then goes to stderr): ``{"bench": "store", "settings": {...},
"tables": {"throughput": [{"operation", "sqlite rows/s", "postgres rows/s",
"postgres / sqlite"}, ...]}}`` (see ``bench/benchjson.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
from benchjson import add_json_argument, text_stream, write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from erag_dagster.core.hashing import sha256_text  # noqa: E402
from erag_dagster.labels.store import LabelStoreBase, open_store  # noqa: E402
from erag_dagster.reports.tables import format_table  # noqa: E402
from tests.postgres_server import postgres_server  # noqa: E402


def generations(start: int, stop: int) -> pl.DataFrame:
    """Rows ``start..stop-1``: sha256 keys and hashes, a short answer, like real labels."""
    ids = range(start, stop)
    return pl.DataFrame(
        {
            "generation_key": [sha256_text(f"key {i}") for i in ids],
            "reader_fingerprint": ["f" * 64] * len(ids),
            "query_id": [f"q{i // 10}" for i in ids],
            "question_hash": [sha256_text(f"question {i // 10}") for i in ids],
            "doc_id": [f"doc-{i}" for i in ids],
            "text_hash": [sha256_text(f"text {i}") for i in ids],
            "answer": [f"answer number {i}" for i in ids],
            "gen_seconds": [0.25] * len(ids),
        }
    )


def timed(calls: list[Callable[[], int]]) -> tuple[float, int]:
    """Seconds for all ``calls`` in turn, and the sum of what they return."""
    began = time.perf_counter()
    total = sum(call() for call in calls)
    return time.perf_counter() - began, total


def measure(store: LabelStoreBase, keys: int, batch: int) -> dict[str, float]:
    """Rows per second of each operation (module docstring) on one store."""
    frames = [generations(i, min(i + batch, keys)) for i in range(0, keys, batch)]
    missing = [generations(keys + i, keys + min(i + batch, keys)) for i in range(0, keys, batch)]
    rates = {}
    seconds, added = timed([lambda f=f: store.put_generations(f) for f in frames])
    assert added == keys, f"{added} of {keys} inserted"
    rates["insert"] = keys / seconds
    seconds, added = timed([lambda f=f: store.put_generations(f) for f in frames])
    assert added == 0
    rates["insert again (all present)"] = keys / seconds
    hit = [f.get_column("generation_key") for f in frames]
    seconds, found = timed([lambda k=k: store.lookup_generations(k).height for k in hit])
    assert found == keys
    rates["lookup hit"] = keys / seconds
    miss = [f.get_column("generation_key") for f in missing]
    seconds, found = timed([lambda k=k: store.lookup_generations(k).height for k in miss])
    assert found == 0
    rates["lookup miss"] = keys / seconds
    return rates


@contextlib.contextmanager
def postgres_database(url: str | None) -> Iterator[str]:
    """A fresh database ``erag_bench_store`` on ``url``'s server, or on a throwaway server."""
    import psycopg

    with contextlib.ExitStack() as stack:
        if url is None:
            url = stack.enter_context(postgres_server()).url()
        base, _, _ = url.rpartition("/")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS erag_bench_store WITH (FORCE)")
            conn.execute("CREATE DATABASE erag_bench_store")
        try:
            yield f"{base}/erag_bench_store"
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DROP DATABASE IF EXISTS erag_bench_store WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000, help="generation rows")
    parser.add_argument("--batch", type=int, default=1000, help="rows per call (transaction)")
    parser.add_argument("--pg-url", default=None, help="a server (default: a throwaway one)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 5000 keys")
    add_json_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.keys = 5000
    out = text_stream(args)
    results = {}
    with tempfile.TemporaryDirectory() as tmp, postgres_database(args.pg_url) as url:
        for name, target in (("sqlite", str(Path(tmp) / "labels.sqlite")), ("postgres", url)):
            with open_store(target) as store:
                results[name] = measure(store, args.keys, args.batch)
    table = pl.DataFrame(
        [
            {
                "operation": op,
                "sqlite rows/s": results["sqlite"][op],
                "postgres rows/s": results["postgres"][op],
                "postgres / sqlite": results["postgres"][op] / results["sqlite"][op],
            }
            for op in results["sqlite"]
        ]
    )
    print(f"label store, {args.keys} keys, {args.batch} rows per call", file=out)
    print(format_table(table, floatfmt=".2f"), file=out)
    write_json(args, "store", {"throughput": table})


if __name__ == "__main__":
    main()
