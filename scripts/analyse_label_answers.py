#!/usr/bin/env python3
"""Why eRAG labels trail answer containment on a label-set task (issue 36): the reader's answers,
the label words in the passages and the likelihood's mass, on one retriever's top k.

    python scripts/analyse_label_answers.py --dataset jsonl:DIR --store LABELS.sqlite \\
        --labels-from OUT/labels.parquet --out ANALYSIS.json [--retriever bm25] [--k 3]

Reads what ``scripts/measure_label_methods.py --metric accuracy`` left (its label store, so the
generated per-document, end-to-end and closed-book answers cost no reader call, and its
``labels.parquet`` for the ``containment`` baseline's labels) and computes, over the queries:

* **answers** — each answer's label (its first normalised token when it is a label of the set,
  else ``other``) per gold class, for the per-document (eRAG), end-to-end and closed-book answers;
* **prior-dominated answers** — the share of queries whose k per-document answers all carry
  the same label, and the share of per-document answers equal to the query's closed-book label
  (what the reader says with no passage);
* **label words in the passages** — end-to-end accuracy by the number of the top k passages
  that contain the gold label word (the ``containment`` labels), and by gold class;
* **likelihood mass** — the mean of ``P(y | q, d)`` over the label set (teacher-forced, the
  likelihood label's formula, one prefill per pair, computed here and cached in
  ``<out>.mass.parquet``) and of the closed-book ``P(y | q)``, per gold class.

Prints the figures and writes them as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl

from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.likelihood import label_set
from erag_dagster.labels.signed import closed_book_answers
from erag_dagster.labels.store import LabelStore
from erag_dagster.meta.end_to_end import evaluate_end_to_end
from erag_dagster.metrics.downstream import normalize_answer
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.passages import run_with_passages
from erag_dagster.retrieval.runs import top_k


def answer_label(answer: str, labels: tuple[str, ...]) -> str:
    """The first normalised token of ``answer`` when it is one of ``labels``, else ``other``."""
    tokens = normalize_answer(answer or "").split()
    return tokens[0] if tokens and tokens[0] in labels else "other"


def softmax(sums: dict[str, float]) -> dict[str, float]:
    """``exp(S(y)) / Σ exp(S)`` over the label set (summed token log-probs ``S``)."""
    top = max(sums.values())
    norm = sum(math.exp(s - top) for s in sums.values())
    return {y: math.exp(s - top) / norm for y, s in sums.items()}


def mass(reader, items: list[tuple[str, str]], labels: tuple[str, ...]) -> list[dict[str, float]]:
    """Per ``(question, passage)``: ``P(y | q, passage)`` over ``labels`` (one prefill each)."""
    flat = [(q, p, f" {y}") for q, p in items for y in labels]
    log_probs = reader.continuation_log_probs(flat)
    out = []
    for i in range(len(items)):
        part = log_probs[i * len(labels) : (i + 1) * len(labels)]
        out.append(softmax({y: sum(lp) for y, lp in zip(labels, part, strict=True)}))
    return out


def _share(counter: Counter, total: int) -> dict[str, float]:
    return {key: round(n / total, 3) for key, n in sorted(counter.items())} if total else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--labels-from", type=Path, required=True, help="labels.parquet")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--retriever", default="bm25")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    ds = load_dataset(args.dataset)
    registry = load_registry()
    entry = next(iter(registry.readers.values()))
    reader = reader_from_config(entry.name, {**entry.config, "dtype": args.dtype})
    store = LabelStore(str(args.store))
    labels = label_set(ds.queries, "accuracy") or ()
    run = top_k(run_retriever(registry, args.retriever, ds.corpus, ds.queries, args.k), args.k)
    gold = {q: a[0] for q, a in ds.queries.select("query_id", "answers").rows()}
    erag = label_run(run, ds.queries, ds.corpus, reader, "accuracy", store).labels
    e2e = evaluate_end_to_end(run, ds.queries, ds.corpus, reader, "accuracy", args.k, store=store)
    e2e_rows = e2e.scores.filter(pl.col("k") == args.k)
    closed = dict(closed_book_answers(ds.queries, reader, store).rows())
    closed_label = {q: answer_label(a, labels) for q, a in closed.items()}

    per_doc: dict[str, Counter] = defaultdict(Counter)
    by_query: dict[str, list[str]] = defaultdict(list)
    for qid, answer in erag.select("query_id", "answer").rows():
        lab = answer_label(answer, labels)
        per_doc[gold[qid]][lab] += 1
        by_query[qid].append(lab)
    same = sum(len(set(v)) == 1 for v in by_query.values())
    as_closed = sum(lab == closed_label[q] for q, v in by_query.items() for lab in v)
    n_pairs = sum(len(v) for v in by_query.values())
    e2e_answers: dict[str, Counter] = defaultdict(Counter)
    closed_answers: dict[str, Counter] = defaultdict(Counter)
    for qid, answer in e2e_rows.select("query_id", "answer").rows():
        e2e_answers[gold[qid]][answer_label(answer, labels)] += 1
        closed_answers[gold[qid]][closed_label[qid]] += 1
    score = dict(e2e_rows.select("query_id", "score").rows())

    contains = pl.read_parquet(args.labels_from).filter(pl.col("method") == "containment")
    n_contain = dict(
        contains.group_by("query_id").agg((pl.col("label") > 0).sum().alias("n")).rows()
    )
    by_n: dict[int, list[float]] = defaultdict(list)
    by_class: dict[str, list[float]] = defaultdict(list)
    for qid, s in score.items():
        by_n[int(n_contain.get(qid, 0))].append(s)
        by_class[gold[qid]].append(s)

    cache = args.out.with_suffix(".mass.parquet")
    pairs = run_with_passages(erag.select("query_id", "doc_id", "rank"), ds.corpus).join(
        ds.queries.select("query_id", "question"), on="query_id"
    )
    if cache.exists():
        masses = pl.read_parquet(cache)
    else:
        items = pairs.select("question", "passage").rows()
        questions = ds.queries.filter(pl.col("query_id").is_in(list(by_query)))
        closed_items = [(q, "") for q in questions["question"]]
        with_doc = mass(reader, items, labels)
        prior = mass(reader, closed_items, labels)
        masses = pl.concat(
            [
                pairs.select("query_id", "doc_id").with_columns(
                    **{y: pl.Series([m[y] for m in with_doc]) for y in labels}
                ),
                questions.select("query_id").with_columns(
                    doc_id=pl.lit(""), **{y: pl.Series([m[y] for m in prior]) for y in labels}
                ),
            ]
        )
        masses.write_parquet(cache)
    masses = masses.with_columns(gold=pl.col("query_id").replace_strict(gold))
    mean_mass = {
        f"{kind}|{g}": {y: round(float(part[y].mean()), 3) for y in labels}
        for kind, frame in (
            ("with_doc", masses.filter(pl.col("doc_id") != "")),
            ("closed_book", masses.filter(pl.col("doc_id") == "")),
        )
        for g, part in ((g, frame.filter(pl.col("gold") == g)) for g in labels)
        if part.height
    }
    argmax = masses.filter(pl.col("doc_id") != "").with_columns(
        top=pl.concat_list(list(labels)).list.arg_max()
    )
    top_share = Counter(labels[i] for i in argmax["top"].to_list())

    figures = {
        "queries": len(by_query),
        "pairs": n_pairs,
        "gold_classes": dict(sorted(Counter(gold[q] for q in by_query).items())),
        "per_doc_answer_labels_by_gold": {g: dict(sorted(c.items())) for g, c in per_doc.items()},
        "e2e_answer_labels_by_gold": {g: dict(sorted(c.items())) for g, c in e2e_answers.items()},
        "closed_book_labels_by_gold": {
            g: dict(sorted(c.items())) for g, c in closed_answers.items()
        },
        "queries_all_docs_same_label": round(same / len(by_query), 3),
        "per_doc_answers_equal_closed_book": round(as_closed / n_pairs, 3),
        "e2e_accuracy_by_gold": {g: round(sum(v) / len(v), 3) for g, v in by_class.items()},
        "e2e_accuracy_by_docs_containing_gold": {
            str(n): [round(sum(v) / len(v), 3), len(v)] for n, v in sorted(by_n.items())
        },
        "mean_label_mass": mean_mass,
        "likelihood_argmax_share": _share(top_share, argmax.height),
    }
    args.out.write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
