"""Reranking cost and lift: the default reader scorer over a BM25 top-N on a few BEIR queries.

Retrieves BM25 top-``N`` for the first ``--queries`` judged queries (index under the storage
root, reused), reranks them with the registry's default reader (``P("yes")``) into a top-``k``,
and prints a table: first-stage vs reranked quality (nDCG@10, RR, R@k by default) with paired
p-values, then the cost: model load, seconds per query, documents (pairs) per second.

    python bench/rerank.py [--data ../shared/data/scifact/beir] [--queries 10] [--top-n 20]
                           [--k 10] [--relevance-level 1] [--dtype auto] [--threads 2]
                           [--quick] [--json PATH]

Use ``--data ../shared/data/beir-msmarco-dl19-subset --relevance-level 2`` for TREC DL 2019.
``--quick`` is a smoke run (2 queries, top 5 reranked into a top 5). ``--json PATH`` also writes
both tables as JSON rows (``-`` = stdout, the tables then go to stderr): ``{"bench": "rerank",
"settings": {...}, "tables": {"quality": [{"metric", "before", "after", "difference", "p_perm",
"p_t", "queries"}, ...], "cost": [{"cost", "value"}, ...]}}`` (see ``bench/benchjson.py``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import polars as pl
from benchjson import add_json_argument, text_stream, write_json

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import default_scorer, run_retriever
from erag_dagster.reports.tables import format_table
from erag_dagster.retrieval.rerank import lift_report, rerank

STATS = EvaluationConfig().statistics
"""The configuration's statistics (its defaults)."""


def main() -> None:
    here = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(here.parent / "shared/data/scifact/beir"))
    parser.add_argument("--queries", type=int, default=10, help="first N judged queries")
    parser.add_argument("--top-n", type=int, default=20, help="first-stage documents reranked")
    parser.add_argument("--k", type=int, default=10, help="documents kept after reranking")
    parser.add_argument("--relevance-level", type=int, default=1)
    parser.add_argument("--metrics", default="nDCG@10,RR,R@10")
    parser.add_argument("--dtype", default=None, help="reader dtype (default: registry's)")
    parser.add_argument("--device", default=None, help="reader device (default: registry's)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for the reader")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2 queries, top 5 reranked into top 5"
    )
    add_json_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.queries, args.top_n, args.k = 2, 5, 5

    ds = load_dataset(f"beir:{args.data}?max_questions={args.queries}")
    registry = load_registry()
    first = run_retriever(registry, "bm25", ds.corpus, ds.queries, args.top_n)
    overrides = {
        key: value
        for key, value in (
            ("dtype", args.dtype),
            ("device", args.device),
            ("num_threads", args.threads),
        )
        if value is not None
    }
    scorer = default_scorer(registry, overrides=overrides)
    started = time.perf_counter()
    scorer.load()
    load_seconds = time.perf_counter() - started
    result = rerank(first, ds.queries, ds.corpus, scorer, top_n=args.top_n, k=args.k)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    report = lift_report(
        ds.qrels, first, result, metrics, STATS, relevance_level=args.relevance_level
    )
    reader = scorer.reader
    data = Path(args.data)
    name = data.parent.name if data.name == "beir" else data.name  # scifact/beir -> scifact
    out = text_stream(args)
    quality = report.select("metric", "before", "after", "difference", "p_perm", "p_t", "queries")
    print(
        f"\n{name}: {result.queries} queries, BM25 top-{args.top_n} -> "
        f"reranked top-{args.k} by {reader.name} ({str(reader.dtype).removeprefix('torch.')}, "
        f"{reader.device}, {reader.spec.num_threads} threads, batch {reader.spec.batch_size}); "
        f"relevance level {args.relevance_level}; first stage cut to depth {args.k}",
        file=out,
    )
    print(format_table(quality), file=out)
    cost = pl.DataFrame(
        {
            "cost": ["model load (s)", "seconds per query", "documents per second", "pairs"],
            "value": [
                load_seconds,
                result.seconds_per_query,
                result.docs_per_second,
                float(result.pairs),
            ],
        }
    )
    print(file=out)
    print(format_table(cost, floatfmt=".3f"), file=out)
    write_json(args, "rerank", {"quality": quality, "cost": cost})


if __name__ == "__main__":
    main()
