#!/usr/bin/env python3
"""Table 1 for labels without gold answers (issue 46), on a dataset that has gold answers.

On one dataset, with one reader and the top ``--k`` of one retriever (``--retriever``, default
bm25), it labels the same lists with: eRAG against the gold answers (the paper's method), eRAG
against each reference of ``--references`` (``evaluation.reference`` values, e.g.
``self@bm25,self@union,reader:gemma3-270m@union``; the union reads the runs of ``--union``,
default bm25 and dense), and the two baselines that need no gold answer (``semantic_question``:
cosine of the document to the question, MiniLM; ``llm_annotation``: the reader's P(yes) that the
document is relevant). Each row is correlated with the reader's end-to-end quality at depth
``--k`` (its answer from the top ``k`` together, scored against the gold answers: the only
place gold enters), per query, Kendall tau-b and Spearman with 95% bootstrap CIs
(``label_methods_table``).

Splits: the queries of the spec, in its order, alternate between a *tuning* half (even
positions) and a *held-out* half (odd); a setting is chosen on the tuning half only and the
held-out half is what docs/label-methods.md reports. It writes into ``--out``:

* ``tuning/`` and ``heldout/``: ``labels.parquet`` (``method, query_id, doc_id, rank, label``)
  and ``end_to_end.parquet`` (``query_id, k, score``) of that half — what
  ``reproductions/no_gold.yaml`` recomputes its Table-1 figures from (kind ``label_table1``);
* ``references.parquet``: ``reference, split, query_id, reference_answer, gold_score`` (the
  reference answer scored against the gold answers with ``--metric``: its agreement with gold,
  kind ``reference_agreement``);
* ``correlation_<half>.parquet``: the two tables, printed as Table 1 too;
* with ``--compare RETRIEVER``: ``systems.parquet`` (``method, retriever, split, query_id,
  metric, value``): per-query list metrics of both retrievers' lists under eRAG-with-gold and
  under each reference, and their end-to-end quality (``method`` ``end_to_end``, metric
  ``e2e``) — the paired difference between the two retrievers under each labelling, next to
  the end-to-end one, shows whether a reference favours the retriever whose documents made it
  (kind ``system_difference``).

Every reader output goes through the label store (``--store``, default ``<out>/labels.sqlite``),
so a rerun, or a second script over the same store, generates only what it lacks. Runs the
project's own functions (``run_retriever``, ``label_run``, ``make_references``,
``baseline_label_set``, ``evaluate_end_to_end``, ``label_methods_table``).

    python scripts/measure_no_gold.py --dataset "sample?spread_questions=60" --out DIR
        [--reader NAME] [--dtype float32] [--metric f1] [--k 3] [--compare dense]
        [--preset label] [--max-new-tokens N] [--system-prompt TEXT] [--store PATH]

``--preset``, ``--max-new-tokens`` and ``--system-prompt`` override the registry reader's keys
of those names (the label-set preset for yes/no sets; 64 tokens and a sentence prompt for long
answers, as docs/label-methods.md recommends for each).
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
from erag_dagster.evaluation.references import make_references
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import LabelStore
from erag_dagster.meta.correlation_report import label_methods_table
from erag_dagster.meta.end_to_end import evaluate_end_to_end
from erag_dagster.meta.system_outputs import baseline_label_set
from erag_dagster.metrics.downstream import get_downstream_metric
from erag_dagster.metrics.list_metrics import evaluate_labels, labels_from_frame
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.reports.tables import format_table1
from erag_dagster.retrieval.encoder import encoder_from_config
from erag_dagster.retrieval.runs import top_k

#: The baselines that need no gold answer (the others of ``baseline_label_set`` do, or need
#: judgments): the Table-1 rows a team without gold could use instead.
NO_GOLD_BASELINES = ("semantic_question", "llm_annotation")
SPLITS = ("tuning", "heldout")


def method_name(reference: str) -> str:
    """The Table-1 row of labels against ``reference``: ``eRAG vs self@union``."""
    return f"eRAG vs {reference}"


def split_of(query_ids: list[str]) -> pl.DataFrame:
    """``query_id, split``: even positions tuning, odd positions held out."""
    return pl.DataFrame(
        {"query_id": query_ids, "split": [SPLITS[i % 2] for i in range(len(query_ids))]},
        schema={"query_id": pl.String, "split": pl.String},
    )


def systems_frame(
    lists: dict[tuple[str, str], pl.DataFrame], ends: dict[str, pl.DataFrame], k: int
) -> pl.DataFrame:
    """``method, retriever, query_id, metric, value``: P@k and nDCG@k of every labelled list
    (``lists``: (method, retriever) → labels) and each retriever's end-to-end score
    (``ends``; method ``end_to_end``, metric ``e2e``)."""
    metrics = [f"P@{k}", f"nDCG@{k}"]
    rows = []
    for (method, retriever), labels in lists.items():
        report = evaluate_labels(labels_from_frame(labels), metrics)
        for qid, values in report.per_query.items():
            rows += [(method, retriever, qid, m, float(values[m])) for m in metrics]
    for retriever, scores in ends.items():
        rows += [
            ("end_to_end", retriever, qid, "e2e", float(v))
            for qid, v in scores.select("query_id", "score").rows()
        ]
    schema = {"method": pl.String, "retriever": pl.String, "query_id": pl.String,
              "metric": pl.String, "value": pl.Float64}  # fmt: skip
    return pl.DataFrame(rows, schema=schema, orient="row")


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
    parser.add_argument("--retriever", default="bm25", help="the lists labelled (bm25)")
    parser.add_argument("--union", default="bm25,dense", help="the runs a @union reads")
    parser.add_argument(
        "--references",
        default="self@bm25,self@union",
        help="evaluation.reference values, comma-separated (each a Table-1 row)",
    )
    parser.add_argument("--preset", help="the reader's prompt_preset (span, label)")
    parser.add_argument("--max-new-tokens", type=int, help="the reader's max_new_tokens")
    parser.add_argument("--system-prompt", help="the reader's system_prompt")
    parser.add_argument("--no-annotation", action="store_true", help="leave out llm_annotation")
    parser.add_argument(
        "--compare", help="a second retriever whose lists are labelled too (systems.parquet)"
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()

    def say(line: str) -> None:
        print(f"[{time.perf_counter() - began:.0f} s] {line}", file=sys.stderr)

    ds = load_dataset(args.dataset)
    registry = load_registry()

    def build(name: str):
        entry = registry.readers[name]
        overrides = {
            "prompt_preset": args.preset,
            "max_new_tokens": args.max_new_tokens,
            "system_prompt": args.system_prompt,
        }
        given = {key: value for key, value in overrides.items() if value is not None}
        return reader_from_config(entry.name, {**entry.config, "dtype": args.dtype, **given})

    reader = build(args.reader or next(iter(registry.readers)))
    store = LabelStore(str(args.store or args.out / "labels.sqlite"))
    args.out.mkdir(parents=True, exist_ok=True)
    extra = [args.compare] if args.compare else []
    names = list(dict.fromkeys([args.retriever, *[n for n in args.union.split(",") if n], *extra]))
    runs = {}
    for name in names:
        key = registry.retriever(name).partition_key
        runs[name] = top_k(run_retriever(registry, name, ds.corpus, ds.queries, args.k), args.k)
        say(f"retrieved {name} ({key})")
    run = runs[args.retriever]
    erag = label_run(run, ds.queries, ds.corpus, reader, args.metric, store).labels
    say("eRAG labels against gold")
    parts = [erag.select(pl.lit("eRAG").alias("method"), "query_id", "doc_id", "rank", "label")]
    hidden = ds.queries.with_columns(answers=pl.lit([], dtype=pl.List(pl.String)))
    score = get_downstream_metric(args.metric)
    golds = dict(ds.queries.select("query_id", "answers").rows())
    agreement = []
    union = {n: runs[n] for n in args.union.split(",") if n}
    compared = [args.retriever, *extra]
    lists: dict[tuple[str, str], pl.DataFrame] = {("eRAG", args.retriever): erag}
    if args.compare:
        lists[("eRAG", args.compare)] = label_run(
            runs[args.compare], ds.queries, ds.corpus, reader, args.metric, store
        ).labels
    for reference in [r for r in args.references.split(",") if r]:
        config = EvaluationConfig().with_overrides(
            "measure", k=args.k, label_k=args.k, reference=reference
        )
        refs = make_references(
            config, registry, hidden, ds.corpus, reader, union, store,
            reader_for=build, executor=None, producer=None, log=say,
        )  # fmt: skip
        assert refs is not None
        for name in compared:
            lists[(method_name(reference), name)] = label_run(
                runs[name], hidden, ds.corpus, reader, args.metric, store, references=refs.frame
            ).labels
        labels = lists[(method_name(reference), args.retriever)]
        row = pl.lit(method_name(reference)).alias("method")
        parts.append(labels.select(row, "query_id", "doc_id", "rank", "label"))
        agreement += [
            (reference, qid, answer, float(score(answer, golds[qid])))
            for qid, answer in refs.frame.select("query_id", "reference_answer").rows()
        ]
        say(f"labels against {reference}")
    others = baseline_label_set(
        run, ds.queries, ds.corpus, ds.qrels, encoder_from_config(registry.first_config("dense")),
        _WithoutAnnotation(reader) if args.no_annotation else reader, store,
        metric=args.metric, relevance_level=EvaluationConfig().relevance_level, log=say,
    )  # fmt: skip
    parts.append(
        others.filter(pl.col("method").is_in(NO_GOLD_BASELINES)).select(
            "method", "query_id", "doc_id", "rank", "label"
        )
    )
    labels = pl.concat(parts)
    e2e = evaluate_end_to_end(
        run, ds.queries, ds.corpus, reader, args.metric, args.k, store=store
    ).scores.select("query_id", "k", "score")
    say("end-to-end answers")
    splits = split_of(ds.queries.get_column("query_id").cast(pl.String).to_list())
    if args.compare:
        ends = {args.retriever: e2e}
        ends[args.compare] = evaluate_end_to_end(
            runs[args.compare], ds.queries, ds.corpus, reader, args.metric, args.k, store=store
        ).scores
        systems_frame(lists, ends, args.k).join(splits, on="query_id").select(
            "method", "retriever", "split", "query_id", "metric", "value"
        ).write_parquet(args.out / "systems.parquet")
        say("the compared retriever's labels and end-to-end answers")
    pl.DataFrame(
        agreement,
        schema={"reference": pl.String, "query_id": pl.String, "reference_answer": pl.String,
                "gold_score": pl.Float64},
        orient="row",
    ).join(splits, on="query_id").select(
        "reference", "split", "query_id", "reference_answer", "gold_score"
    ).write_parquet(args.out / "references.parquet")  # fmt: skip
    for half in SPLITS:
        kept = splits.filter(pl.col("split") == half).select("query_id")
        folder = args.out / half
        folder.mkdir(exist_ok=True)
        mine = labels.join(kept, on="query_id", how="semi")
        ends = e2e.join(kept, on="query_id", how="semi")
        mine.write_parquet(folder / "labels.parquet")
        ends.write_parquet(folder / "end_to_end.parquet")
        table = label_methods_table(mine, ends, args.k, args.dataset, EvaluationConfig().statistics)
        table.write_parquet(args.out / f"correlation_{half}.parquet")
        print(f"\n## {half} half: {kept.height} queries ({args.dataset}, {reader.name}, "
              f"{args.metric}, {args.retriever} top {args.k})")  # fmt: skip
        print(format_table1(table, "kendall_tau", markdown=True, digits=2))
    found = pl.read_parquet(args.out / "references.parquet")
    print("\nagreement of each reference with gold (mean score per split):")
    print(found.group_by("reference", "split").agg(pl.col("gold_score").mean()).sort("reference"))
    if args.compare:
        table = pl.read_parquet(args.out / "systems.parquet")
        print(f"\nmean {args.compare} - {args.retriever} per labelling (per split):")
        print(
            table.pivot(
                "retriever", index=["method", "split", "query_id", "metric"], values="value"
            )
            .with_columns((pl.col(args.compare) - pl.col(args.retriever)).alias("difference"))
            .group_by("method", "metric", "split")
            .agg(pl.col("difference").mean())
            .sort("split", "metric", "method")
        )
    say("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
