"""The paper's Table 2 on this machine: end-to-end vs eRAG at two batching levels.

For the same reader and the same BM25 top-k lists: wall time and peak memory (RSS on CPU,
torch.cuda.max_memory_allocated on a GPU) of end-to-end evaluation (one prompt with k
documents per query), eRAG with query-level batching (one batch = a query's k documents) and
eRAG with document-level batching (batch size 1), for k in {10, 50}. Each cell runs in a fresh
process; ratios are against end-to-end at the same k.

    python bench/efficiency.py [--dataset sample] [--queries 5] [--ks 10,50] [--device auto]
"""

from __future__ import annotations

import argparse
import os

import polars as pl

from erag_dagster.data.loaders import load_dataset
from erag_dagster.meta.efficiency import measure_efficiency
from erag_dagster.meta.end_to_end import context_lists
from erag_dagster.registry import load_registry
from erag_dagster.reports.tables import format_table
from erag_dagster.retrieval.service import run_retriever


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="sample")
    parser.add_argument("--queries", type=int, default=5)
    parser.add_argument("--ks", default="10,50")
    parser.add_argument("--reader", help="registry reader (default: the first)")
    parser.add_argument("--device", help="override the reader's device (auto|cpu|cuda:N)")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    registry = load_registry()
    entry = registry.reader(args.reader) if args.reader else next(iter(registry.readers.values()))
    config = dict(entry.config)
    if args.device:
        config["device"] = args.device
    ds = load_dataset(args.dataset)
    queries = ds.queries.head(args.queries)
    run = run_retriever(registry, "bm25", ds.corpus, queries, max(ks))
    contexts = context_lists(run, queries, ds.corpus, max(ks))
    items = list(zip(contexts["question"].to_list(), contexts["passages"].to_list(), strict=True))
    table = measure_efficiency(entry.name, config, items, ks=ks)
    threads = os.environ.get("ERAG_TORCH_THREADS", "2")
    print(
        f"\n{args.dataset}: {len(items)} queries, BM25 top-{max(ks)}, reader {entry.name} "
        f"({config.get('device', 'auto')}, {threads} CPU threads)"
    )
    print(
        format_table(
            table.select(
                "k", "mode", "documents", "seconds", "seconds_per_query", "peak_memory_mib",
                "memory_kind", "time_vs_end_to_end", "memory_vs_end_to_end",
            ).sort("k", pl.col("mode").replace_strict(
                {"end_to_end": 0, "erag_query_batch": 1, "erag_doc_batch": 2}, default=3
            )),
            floatfmt=".2f",
        )
    )  # fmt: skip


if __name__ == "__main__":
    main()
