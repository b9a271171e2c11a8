"""The paper's Table 2 on this machine: end-to-end vs eRAG at two batching levels.

For the same reader and the same BM25 top-k lists: wall time and peak memory (RSS on CPU,
torch.cuda.max_memory_allocated on a GPU) of end-to-end evaluation (one prompt with k
documents per query), eRAG with query-level batching (one batch = a query's k documents) and
eRAG with document-level batching (batch size 1), for k in {10, 50}. Each cell runs in a fresh
process, in ``--rounds`` repeated rounds whose cell order alternates; the table gives the median
seconds with the range over rounds, and the share of the time that is prompt prefill (the same
cell timed with 1 new token). Ratios are of medians, against end-to-end at the same k. The
workload and the measurement are the ``efficiency_report`` asset's own
(:func:`erag_dagster.meta.efficiency.efficiency_report`: the first ``--queries`` queries by id
with ``max(ks)`` retrieved documents).

    python bench/efficiency.py [--dataset sample] [--queries 10] [--ks 10,50] [--rounds 3]
                               [--device auto] [--plain] [--quick] [--json PATH]

``--plain`` adds ``erag_doc_batch_plain``: batch size 1 with the reader's ``share_prefix`` and
``stop_at_line_end`` off (the reader before those savings; the same answers).

``--quick`` is a smoke run (1 query, k = 2 and 4, 2 rounds). ``--json PATH`` also writes the
table as JSON rows (``-`` = stdout, the table then goes to stderr): ``{"bench": "efficiency",
"settings": {...}, "tables": {"rows": [{"k", "mode", "documents", "rounds", "seconds",
"seconds_min", "seconds_max", "seconds_per_query", "prefill_share", "peak_memory_mib",
"memory_kind", "time_vs_end_to_end", "memory_vs_end_to_end"}, ...]}}``
(see ``bench/benchjson.py``).
"""

from __future__ import annotations

import argparse
import os

import polars as pl
from benchjson import add_json_argument, text_stream, write_json

from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.meta.efficiency import MODES, PLAIN_MODE, efficiency_report
from erag_dagster.reports.tables import format_table

MODE_ORDER = {"end_to_end": 0, "erag_query_batch": 1, "erag_doc_batch": 2, PLAIN_MODE: 3}
COLUMNS = (
    "k", "mode", "documents", "rounds", "seconds", "seconds_min", "seconds_max",
    "seconds_per_query", "prefill_share", "peak_memory_mib", "memory_kind",
    "time_vs_end_to_end", "memory_vs_end_to_end",
)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="sample")
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--ks", default="10,50")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per cell")
    parser.add_argument("--reader", help="registry reader (default: the first)")
    parser.add_argument("--device", help="override the reader's device (auto|cpu|cuda:N)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 1 query, k = 2 and 4, 2 rounds"
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help=f"also time {PLAIN_MODE}: batch size 1 without prefix sharing or line stop",
    )
    add_json_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.queries, args.ks, args.rounds = 1, "2,4", 2
    try:
        ks = [int(k) for k in args.ks.split(",")]
    except ValueError:
        parser.error(f"--ks must be comma-separated integers, got {args.ks!r}")
    if args.queries < 1 or args.rounds < 1 or min(ks) < 1:
        parser.error("--queries, --rounds and every k must be >= 1")
    registry = load_registry()
    entry = registry.reader(args.reader) if args.reader else next(iter(registry.readers.values()))
    config = dict(entry.config)
    if args.device:
        config["device"] = args.device
    ds = load_dataset(args.dataset)
    run = run_retriever(registry, "bm25", ds.corpus, ds.queries, max(ks))
    modes = (*MODES, PLAIN_MODE) if args.plain else MODES
    table = efficiency_report(
        entry.name, config, run, ds.queries, ds.corpus, ks, args.queries, args.rounds, modes
    )
    if table.is_empty():
        parser.exit(2, f"efficiency: no query has {max(ks)} retrieved documents\n")
    n_queries = int(table.get_column("queries")[0])
    table = table.select(COLUMNS).sort(
        "k", pl.col("mode").replace_strict(MODE_ORDER, default=len(MODE_ORDER))
    )
    threads = os.environ.get("ERAG_TORCH_THREADS", "2")
    out = text_stream(args)
    print(
        f"\n{args.dataset}: {n_queries} queries, BM25 top-{max(ks)}, reader {entry.name} "
        f"({config.get('device', 'auto')}, {threads} CPU threads)",
        file=out,
    )
    print(format_table(table, floatfmt=".2f"), file=out)
    write_json(args, "efficiency", {"rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
