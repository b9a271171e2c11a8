#!/usr/bin/env python3
"""Choose a packaged reader's span prompt and ``max_new_tokens`` on data: the tuning split of
the embedded sample (docs/label-methods.md, "Prompts chosen on data").

**Tuning split**: the 90 embedded questions that the default run does NOT evaluate (every
question but those of the registry's ``evaluation.dataset``, ``sample?spread_questions=30``),
less the worked example's question (none: the example comes from another SQuAD article). Its
documents: the union of BM25's and dense retrieval's top 3 (what the default run labels), each
(question, document) pair answered once per prompt variant.

**Variants** (:data:`VARIANTS`): system prompt × answer prefix × zero or one worked example.
Each is generated once with ``max_new_tokens = --cap`` (32), every row stopped once its answer
line is complete (:func:`~erag_dagster.readers.extraction.line_final`), and the token ids are
kept in a label store (``--store``; a rerun reads them, nothing is generated twice). Greedy
decoding of a prefix does not depend on what follows, so every ``max_new_tokens`` N <= cap and
both cut policies (sentence or clause) are read from the same ids: the answer at N is
``extract_answer(decode(ids[:N]))``, cut when it is not final by then.

**Per cell** (variant × cut policy × N): the label of each pair (token F1 with the golds), the
label-vs-judgment AUC with its 95% bootstrap CI over questions (the fit diagnostics' own
:func:`~erag_dagster.meta.fit.separation`, 1000 resamples, seed 0), pooled over the pairs and
per retriever; the share of answers cut; words per answer; prompt tokens and decode steps per
pair (decode steps: the tokens up to the answer's end under the policy, what the reader with
the answer stop decodes); and the paired bootstrap CI of its AUC minus the baseline's (the
packaged prompt with the first-line post-processing of version 1 and N = 16, the "before").

**Output** (``--out``): ``results_<reader>.json`` (every cell's figures and the chosen one) and
``cells_<reader>.parquet`` (every cell's label, judgment and cut flag per pair: what
``reproductions/prompt_tuning.yaml`` recomputes its quoted figures from).

**Rule** (fixed before the figures were read): among the cells with at most 10% of answers cut
(the fit warning's bound), the highest pooled AUC; cells within 0.005 of it are ties, broken by
fewer prompt + decode tokens per pair, then by the smaller N.

    ERAG_TORCH_THREADS=1 .venv/bin/python scripts/tune_prompts.py --reader smollm2-135m \\
        --out reproductions/data/prompt_tuning
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.labels.cached import Subject, generate_stored, task_fingerprint
from erag_dagster.labels.store import LabelStore
from erag_dagster.meta.fit import label_auc, separation
from erag_dagster.metrics.downstream import token_f1
from erag_dagster.readers.extraction import answer_final, extract_answer, line_final
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.passages import run_with_passages
from erag_dagster.stats.correlation import percentile_interval, resample_blocks
from erag_dagster.stats.settings import Statistics

STATS = EvaluationConfig().statistics
"""The project's default statistics (1000 resamples, seed 0, 95% intervals)."""

ROOT = Path(__file__).resolve().parents[1]
TASK = "raw_answer_tokens/v1 line_final"
RETRIEVERS = ("bm25", "dense")
DEPTH = 3
CAPS = (8, 12, 16, 24, 32)
BASELINE = ("packaged", "sentence_v1", 16)

SYSTEM_PACKAGED = (
    "You answer questions about a passage. Reply with a short answer of a few words copied "
    "from the passage, not a sentence."
)
SYSTEM_SPAN = (
    "Answer the question with the shortest span copied from the passage: a name, a number, a "
    "date or a short phrase. Write only that span."
)
#: The worked example: SQuAD v1.1 dev, article "Normans" (not in the embedded sample), its
#: paragraph's first two sentences and one of its questions.
EXAMPLE = {
    "question": "Who was the Norse leader?",
    "passage": (
        "The Normans (Norman: Nourmands; French: Normands; Latin: Normanni) were the people who "
        "in the 10th and 11th centuries gave their name to Normandy, a region in France. They "
        'were descended from Norse ("Norman" comes from "Norseman") raiders and pirates from '
        "Denmark, Iceland and Norway who, under their leader Rollo, agreed to swear fealty to "
        "King Charles III of West Francia."
    ),
    "answer": "Rollo",
}


@dataclass(frozen=True)
class Variant:
    name: str
    system_prompt: str
    answer_prefix: str
    example: bool

    def keys(self) -> dict:
        return {
            "system_prompt": self.system_prompt,
            "answer_prefix": self.answer_prefix,
            "few_shot": [EXAMPLE] if self.example else [],
        }


VARIANTS = {
    v.name: v
    for v in (
        Variant("packaged", SYSTEM_PACKAGED, "The answer is:", False),
        Variant("packaged+example", SYSTEM_PACKAGED, "The answer is:", True),
        Variant("packaged/answer:", SYSTEM_PACKAGED, "Answer:", False),
        Variant("packaged/answer:+example", SYSTEM_PACKAGED, "Answer:", True),
        Variant("span", SYSTEM_SPAN, "The answer is:", False),
        Variant("span+example", SYSTEM_SPAN, "The answer is:", True),
        Variant("span/answer:", SYSTEM_SPAN, "Answer:", False),
        Variant("span/answer:+example", SYSTEM_SPAN, "Answer:", True),
    )
}


def postprocess_v1(text: str) -> str:
    """The post-processing of extraction version 1 (the "before"): strip, one leading ``:``,
    the first non-empty line, one final ``.``."""
    answer = text.lstrip()
    if answer.startswith(":"):
        answer = answer[1:].lstrip()
    lines = [line.strip() for line in answer.splitlines() if line.strip()]
    answer = lines[0] if lines else ""
    return answer[:-1].strip() if answer.endswith(".") else answer.strip()


def first_line_done(text: str) -> bool:
    """Version 1's stop: the first non-empty line has ended."""
    answer = text.lstrip()
    if answer.startswith(":"):
        answer = answer[1:].lstrip()
    if not answer:
        return False
    first = answer.splitlines(keepends=True)[0]
    return first != first.splitlines()[0]


POLICIES = {
    "sentence_v1": (postprocess_v1, first_line_done),
    "sentence": (
        lambda t: extract_answer(t, clause=False),
        lambda t: answer_final(t, clause=False),
    ),
    "clause": (lambda t: extract_answer(t, clause=True), lambda t: answer_final(t, clause=True)),
}


def tuning_split(registry) -> tuple:
    """The sample with only the questions the default run does not evaluate."""
    every = load_dataset("sample")
    default = load_dataset(registry.evaluation.dataset)
    keep = every.queries.join(default.queries.select("query_id"), on="query_id", how="anti")
    qrels = every.qrels.join(keep.select("query_id"), on="query_id", how="semi")
    return every.corpus, keep, qrels


def pairs_of(registry, corpus, queries, retrievers=RETRIEVERS) -> pl.DataFrame:
    runs = []
    for name in retrievers:
        run = run_retriever(registry, name, corpus, queries, DEPTH)
        runs.append(
            run.filter(pl.col("rank") <= DEPTH).with_columns(pl.lit(name).alias("retriever"))
        )
    run = pl.concat([r.select("query_id", "doc_id", "rank", "retriever") for r in runs])
    with_text = run_with_passages(run, corpus)
    return with_text.join(
        queries.select(pl.col("query_id").cast(pl.String), "question", "answers"),
        on="query_id",
        how="left",
    )


def generate_variant(entry, variant: Variant, cap: int, pairs: pl.DataFrame, store) -> dict:
    """Token ids per distinct (query, doc) of ``pairs`` for ``variant`` (stored), and timing."""
    config = {**entry.config, **variant.keys(), "max_new_tokens": cap}
    reader = reader_from_config(entry.name, config)
    distinct = pairs.unique(["query_id", "doc_id"], keep="first", maintain_order=True).sort(
        pl.col("question").str.len_chars() + pl.col("passage").str.len_chars()
    )
    subjects = [
        Subject(q, question, d, passage)
        for q, d, question, passage in distinct.select(
            "query_id", "doc_id", "question", "passage"
        ).rows()
    ]
    fingerprint = task_fingerprint(reader.fingerprint, TASK)

    def generate(part: list[int]) -> list[str]:
        items = [(subjects[i].question, subjects[i].text) for i in part]
        return [json.dumps(ids) for ids in reader.generated_tokens(items, line_final)]

    began = time.perf_counter()
    out = generate_stored(
        subjects, generate, store, fingerprint, f"{entry.name}:{variant.name}",
        {"reader": reader.identity(), "task": TASK}, step=64,
    )  # fmt: skip
    seconds = time.perf_counter() - began
    prompt_tokens = reader.estimate_prompt_tokens([(s.question, s.text) for s in subjects])
    tokenizer = reader._ensure().tokenizer
    ids = {
        (s.query_id, s.subject_id): json.loads(o)
        for s, o in zip(subjects, out.outputs, strict=True)
    }
    prompts = {(s.query_id, s.subject_id): n for s, n in zip(subjects, prompt_tokens, strict=True)}
    return {
        "ids": ids,
        "prompt_tokens": prompts,
        "decode": lambda row: tokenizer.decode(row, skip_special_tokens=True),
        "generated": out.generated,
        "seconds": seconds if out.generated else None,
    }


def first_final(gen: dict, policy: str) -> dict:
    """Per pair: the count of generated tokens after which the answer is final under
    ``policy`` (``None``: never, within the generated ids), and whether the row ended with
    EOS before the cap without its line being complete."""
    _, final = POLICIES[policy]
    decode = gen["decode"]
    out = {}
    for key, row in gen["ids"].items():
        at = next((i for i in range(1, len(row) + 1) if final(decode(row[:i]))), None)
        out[key] = at
    return out


def cell_frame(pairs: pl.DataFrame, gen: dict, policy: str, n: int, cap: int, firsts: dict):
    """One row per pair of ``pairs``: answer, label, cut, words, decode steps, prompt tokens."""
    extract, _ = POLICIES[policy]
    decode = gen["decode"]
    rows = []
    for qid, did, answers in pairs.select("query_id", "doc_id", "answers").rows():
        key = (qid, did)
        row = gen["ids"][key]
        at = firsts[key]
        eos = len(row) < cap and at is None  # the row ended (EOS) before its answer was final
        head = row[:n]
        answer = extract(decode(head))
        cut = (at is None or at > n) and not (eos and len(row) <= n)
        steps = min(at, n) if at is not None else min(len(row), n)
        rows.append((qid, did, answer, token_f1(answer, answers), cut, len(answer.split()), steps,
                     gen["prompt_tokens"][key]))  # fmt: skip
    return pl.DataFrame(
        rows,
        schema=["query_id", "doc_id", "answer", "label", "cut", "words", "steps", "prompt_tokens"],
        orient="row",
    )


def paired_auc_ci(a: pl.DataFrame, b: pl.DataFrame, stats: Statistics):
    """AUC(a) − AUC(b) with its paired bootstrap CI over questions (the same resamples;
    ``stats``: resamples, seed and the interval's level)."""
    qids = a.get_column("query_id").unique(maintain_order=True).to_list()
    idx = {q: np.flatnonzero(a.get_column("query_id").to_numpy() == q) for q in qids}
    la, lb = a.get_column("label").to_numpy(), b.get_column("label").to_numpy()
    rel = a.get_column("relevant").to_numpy()
    diff = label_auc(la, rel) - label_auc(lb, rel)
    rng = np.random.default_rng(stats.seed)
    draws = []
    for block in resample_blocks(rng, len(qids), stats.resamples):
        for row in block:
            ix = np.concatenate([idx[qids[q]] for q in row])
            d = label_auc(la[ix], rel[ix]) - label_auc(lb[ix], rel[ix])
            if not math.isnan(d):
                draws.append(d)
    low, high = percentile_interval(draws, stats.confidence)
    return diff, low, high


TABLE_CAPS = (16, 24, 32)


def markdown_table(results: dict) -> str:
    """The docs table of one reader's ``results_<reader>.json``: the *before* (packaged
    prompt, extraction version 1, 16 tokens), then each variant with the chosen cut policy at
    :data:`TABLE_CAPS` tokens, and the chosen cell cut at the first sentence only; the chosen
    cell in bold."""
    chosen = results.get("chosen") or {}
    policy = chosen.get("policy", "clause")
    head = (
        "| prompt | extraction | max_new_tokens | AUC [95% CI] | Δ AUC vs before [95% CI] "
        "| answers cut | words per answer | decode steps | prompt tokens |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    rows = []
    for r in results["cells"]:
        before = (r["variant"], r["policy"], r["max_new_tokens"]) == BASELINE
        other_policy = (
            r["variant"] == chosen.get("variant")
            and r["policy"] == "sentence"
            and r["max_new_tokens"] == chosen.get("max_new_tokens")
        )  # the chosen cell with the first sentence only: the cut policy's choice
        kept = r["policy"] == policy and r["max_new_tokens"] in TABLE_CAPS
        if not (before or kept or other_policy):
            continue
        bold = all(r[k] == chosen.get(k) for k in ("variant", "policy", "max_new_tokens"))
        mark = "**" if bold else ""
        extraction = "first line (v1, before)" if r["policy"] == "sentence_v1" else r["policy"]
        delta = (
            "—"
            if before
            else f"{r['auc_vs_before']:+.3f} [{r['auc_vs_before_low']:+.3f}, "
            f"{r['auc_vs_before_high']:+.3f}]"
        )
        rows.append(
            f"| {mark}{r['variant']}{mark} | {extraction} | {r['max_new_tokens']} | "
            f"{mark}{r['auc']:.2f} [{r['auc_low']:.2f}, {r['auc_high']:.2f}]{mark} | {delta} | "
            f"{r['cut_share']:.2f} | {r['words']:.1f} | {r['decode_steps']:.1f} | "
            f"{r['prompt_tokens']:.0f} |"
        )
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reader", required=True, help="registry reader name")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=ROOT / ".tuning" / "labels.sqlite")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--cap", type=int, default=32)
    parser.add_argument(
        "--table",
        action="store_true",
        help="print the docs table of --out's results_<reader>.json (no model) and stop",
    )
    parser.add_argument(
        "--retrievers",
        default=",".join(RETRIEVERS),
        help="whose top 3 are answered (default: bm25,dense)",
    )
    args = parser.parse_args(argv)
    if args.table:
        results = json.loads((args.out / f"results_{args.reader}.json").read_text())
        print(markdown_table(results))
        return 0
    registry = load_registry()
    entry = registry.readers[args.reader]
    corpus, queries, qrels = tuning_split(registry)
    retrievers = tuple(args.retrievers.split(","))
    pairs = pairs_of(registry, corpus, queries, retrievers)
    relevant = qrels.filter(pl.col("relevance") >= 1).select(
        pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String),
        pl.lit(True).alias("relevant"),
    )  # fmt: skip
    pairs = pairs.join(relevant, on=["query_id", "doc_id"], how="left").with_columns(
        pl.col("relevant").fill_null(False)
    )
    distinct = pairs.unique(["query_id", "doc_id"], keep="first", maintain_order=True).sort(
        "query_id", "doc_id"
    )
    args.store.parent.mkdir(parents=True, exist_ok=True)
    store = LabelStore(str(args.store))
    args.out.mkdir(parents=True, exist_ok=True)
    timings_path = args.out / f"timings_{args.reader}.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    print(
        f"{args.reader}: {queries.height} tuning questions, {distinct.height} distinct pairs "
        f"({int(distinct['relevant'].sum())} judged relevant)",
        file=sys.stderr,
    )
    results = []
    frames: dict = {}
    for name in args.variants.split(","):
        variant = VARIANTS[name]
        gen = generate_variant(entry, variant, args.cap, distinct, store)
        if gen["seconds"] is not None and gen["generated"] == distinct.height:
            timings[name] = {"seconds": gen["seconds"], "pairs": gen["generated"]}
            timings_path.write_text(json.dumps(timings, indent=1, sort_keys=True) + "\n")
        print(f"  {name}: {gen['generated']} generated, {gen['seconds']}", file=sys.stderr)
        for policy in POLICIES:
            firsts = first_final(gen, policy)
            for n in CAPS:
                if n > args.cap:
                    continue
                cell = cell_frame(distinct, gen, policy, n, args.cap, firsts).join(
                    distinct.select("query_id", "doc_id", "relevant"), on=["query_id", "doc_id"]
                )
                frames[(name, policy, n)] = cell
                sep = separation(cell.select("query_id", "label", "relevant"), STATS)
                per = {}
                for retriever in retrievers:
                    sub = pairs.filter(pl.col("retriever") == retriever).select(
                        "query_id", "doc_id"
                    )
                    s = separation(
                        cell.join(sub, on=["query_id", "doc_id"], how="semi").select(
                            "query_id", "label", "relevant"
                        ),
                        STATS,
                    )
                    per[retriever] = [s.auc, s.low, s.high]
                results.append({
                    "reader": args.reader, "variant": name, "policy": policy, "max_new_tokens": n,
                    "auc": sep.auc, "auc_low": sep.low, "auc_high": sep.high,
                    "auc_by_retriever": per,
                    "cut_share": float(cell["cut"].mean()),
                    "words": float(cell["words"].mean()),
                    "mean_label_relevant": sep.mean_relevant, "mean_label_other": sep.mean_other,
                    "decode_steps": float(cell["steps"].mean()),
                    "prompt_tokens": float(cell["prompt_tokens"].mean()),
                    "capture_seconds": timings.get(name, {}).get("seconds"),
                })  # fmt: skip
    pl.concat(
        [
            cell.select(
                pl.lit(name).alias("variant"),
                pl.lit(policy).alias("policy"),
                pl.lit(n, dtype=pl.Int64).alias("max_new_tokens"),
                "query_id",
                "doc_id",
                "label",
                "relevant",
                "cut",
                "words",
                "steps",
                "prompt_tokens",
            )
            for (name, policy, n), cell in frames.items()
        ]
    ).write_parquet(args.out / f"cells_{args.reader}.parquet")
    base = frames.get(BASELINE)
    for row in results:
        if base is not None:
            d, lo, hi = paired_auc_ci(
                frames[(row["variant"], row["policy"], row["max_new_tokens"])], base, STATS
            )
            row.update(auc_vs_before=d, auc_vs_before_low=lo, auc_vs_before_high=hi)
    eligible = [r for r in results if r["cut_share"] <= 0.10 and r["policy"] != "sentence_v1"]
    best = max(r["auc"] for r in eligible) if eligible else math.nan
    ties = [r for r in eligible if r["auc"] >= best - 0.005]
    ties.sort(key=lambda r: (r["prompt_tokens"] + r["decode_steps"], r["max_new_tokens"]))
    chosen = ties[0] if ties else None
    (args.out / f"results_{args.reader}.json").write_text(
        json.dumps(
            {
                "reader": args.reader,
                "questions": queries.height,
                "pairs": distinct.height,
                "relevant": int(distinct["relevant"].sum()),
                "cells": results,
                "chosen": chosen,
            },
            indent=1,
        )
        + "\n"
    )
    for r in sorted(results, key=lambda r: -r["auc"])[:25]:
        print(
            f"{r['variant']:<26} {r['policy']:<11} N={r['max_new_tokens']:<3} "
            f"AUC {r['auc']:.3f} [{r['auc_low']:.3f}, {r['auc_high']:.3f}] "
            f"cut {r['cut_share']:.0%} words {r['words']:.1f} steps {r['decode_steps']:.1f} "
            f"prompt {r['prompt_tokens']:.0f}"
            + (
                f" Δ {r['auc_vs_before']:+.3f} [{r['auc_vs_before_low']:+.3f}, "
                f"{r['auc_vs_before_high']:+.3f}]"
                if "auc_vs_before" in r
                else ""
            )
        )
    print("chosen:", json.dumps(chosen))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
