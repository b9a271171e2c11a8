#!/usr/bin/env python3
"""Table 1 for the labelling methods beyond the paper, on one dataset, with BM25 and the default
reader (``--retriever``, ``--reader`` for others): eRAG (generation), the label methods of
``--methods`` (default eRAG likelihood and signed utility) and every baseline of the default
run's Table 1 (provenance judgments, answer containment, semantic similarity to the answer and
to the question, LLM annotation), each under P@k, Success@k, RR, AP, both nDCG ideals and
UDCG@k, against end-to-end quality at depth k (Kendall tau-b and Spearman with 95% bootstrap
CIs).

It runs the project's own functions (``run_retriever``, ``label_run``, ``baseline_label_set``
with the ``likelihood`` and ``signed`` label methods, ``evaluate_end_to_end``,
``label_methods_table``) with one label store, and writes into ``--out``:

* ``labels.parquet`` — ``method, query_id, doc_id, rank, label`` (every method's labels);
* ``end_to_end.parquet`` — ``query_id, k, score``;
* ``correlation_table.parquet`` — the correlation table, printed as Table 1 too.

The first two are what ``reproductions/label_methods.yaml`` recomputes its figures from
(``tests/reproductions.py``, kind ``label_table1``). Semantic similarity uses the registry's
first dense encoder (no reader pass); LLM annotation one reader prefill per pair (P(yes), kept
in the label store); ``--no-annotation`` leaves it out (``baseline_label_set`` logs the line).
``--reader`` names the registry reader (default: the registry's first).

With a label-output metric (``accuracy``: yes/no/maybe, SUPPORTS/REFUTES) one more row,
``eRAG (contains)``, holds the same generated eRAG answers scored with answer containment (the
gold label occurs anywhere in the answer, ``contains``) instead of the label read from the
answer's first tokens: a re-scoring of the stored answers, no reader call. Every row is
correlated with the same end-to-end ``--metric``.

    python scripts/measure_label_methods.py --dataset sample --out reproductions/data/sample
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.likelihood import LABEL_METRICS
from erag_dagster.labels.store import LabelStore
from erag_dagster.meta.correlation_report import label_methods_table
from erag_dagster.meta.end_to_end import evaluate_end_to_end
from erag_dagster.meta.system_outputs import baseline_label_set
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.reports.tables import format_table1
from erag_dagster.retrieval.encoder import encoder_from_config
from erag_dagster.retrieval.runs import top_k

STATS = EvaluationConfig().statistics
"""The configuration's statistics (its defaults)."""

#: Table-1 row of the eRAG answers scored with answer containment (label-output metrics).
CONTAINS_ROW = "eRAG (contains)"


class _WithoutAnnotation:
    """The reader, saying it cannot give P(yes): ``baseline_label_set`` then skips LLM
    annotation (its documented hook, as for a server without logprobs); all else delegates."""

    def __init__(self, reader) -> None:
        self._reader = reader

    def __getattr__(self, name: str):
        return getattr(self._reader, name)

    def p_yes_unavailable(self) -> str:
        return "left out by --no-annotation"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, help="label store (default: <out>/labels.sqlite)")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--metric", default="f1")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--reader", help="registry reader (default: the registry's first)")
    parser.add_argument(
        "--preset",
        choices=("span", "label"),
        help="the reader's prompt_preset (erag_dagster/readers/presets.py; default: its entry's)",
    )
    parser.add_argument("--retriever", default="bm25", help="registry retriever (default: bm25)")
    parser.add_argument(
        "--methods",
        default="likelihood,signed",
        help="label methods beyond eRAG, comma-separated (meta/label_methods.py LABEL_METHODS)",
    )
    parser.add_argument(
        "--no-annotation",
        action="store_true",
        help="leave out LLM annotation (saves a prefill per pair)",
    )
    args = parser.parse_args(argv)
    ds = load_dataset(args.dataset)
    registry = load_registry()
    entry = registry.readers[args.reader] if args.reader else next(iter(registry.readers.values()))
    preset = {"prompt_preset": args.preset} if args.preset else {}
    reader = reader_from_config(entry.name, {**entry.config, "dtype": args.dtype, **preset})
    store = LabelStore(str(args.store or args.out / "labels.sqlite"))
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    methods = [m for m in args.methods.split(",") if m]
    run = top_k(run_retriever(registry, args.retriever, ds.corpus, ds.queries, args.k), args.k)
    erag = label_run(run, ds.queries, ds.corpus, reader, args.metric, store).labels
    print(f"eRAG labels {time.perf_counter() - began:.0f} s", file=sys.stderr)
    rescored = []
    if args.metric in LABEL_METRICS:  # the same stored answers, scored by answer containment
        contains = label_run(run, ds.queries, ds.corpus, reader, "contains", store).labels
        rescored.append(contains.with_columns(method=pl.lit(CONTAINS_ROW)))
    others = baseline_label_set(
        run, ds.queries, ds.corpus, ds.qrels, encoder_from_config(registry.first_config("dense")),
        _WithoutAnnotation(reader) if args.no_annotation else reader, store,
        metric=args.metric, relevance_level=registry.evaluation.relevance_level, methods=methods,
        log=lambda line: print(f"[{time.perf_counter() - began:.0f} s] {line}", file=sys.stderr),
    )  # fmt: skip
    print(f"eRAG and baseline labels {time.perf_counter() - began:.0f} s", file=sys.stderr)
    labels = pl.concat(
        [
            erag.select(pl.lit("eRAG").alias("method"), "query_id", "doc_id", "rank", "label"),
            *(f.select("method", "query_id", "doc_id", "rank", "label") for f in rescored),
            others.select("method", "query_id", "doc_id", "rank", "label"),
        ]
    )
    e2e = evaluate_end_to_end(
        run, ds.queries, ds.corpus, reader, args.metric, args.k, store=store
    ).scores.select("query_id", "k", "score")
    print(f"all labels and end-to-end {time.perf_counter() - began:.0f} s", file=sys.stderr)
    labels.write_parquet(args.out / "labels.parquet")
    e2e.write_parquet(args.out / "end_to_end.parquet")
    table = label_methods_table(labels, e2e, args.k, args.dataset, STATS)
    table.write_parquet(args.out / "correlation_table.parquet")
    for stat in ("kendall_tau", "spearman_rho"):
        print(
            f"\n{stat} ({ds.queries.height} queries, {entry.name} {args.dtype}, {args.metric}, "
            f"{args.retriever} top {args.k})"
        )
        print(format_table1(table, stat, markdown=True, digits=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
