#!/usr/bin/env python3
"""Which label setting separates judged-relevant documents best on long answers?

    python scripts/make_long_answer_set.py --out DIR
    nice -n 10 python scripts/measure_long_answers.py --data DIR --out DIR/results.json

Labels every (query, document) pair of the long-answer set (``make_long_answer_set.py``: one
gold passage and three others per question) with the packaged SmolLM2 reader under each
setting — ``max_new_tokens`` 16 (the packaged default) and 64, the default prompt, and 64
with a prompt asking for the answer sentence — and scores the same answers with ``f1``,
``rougel`` and ``contains`` (one generation per setting: the label store keeps the answers and
re-scores them). For every cell it prints and writes the fit diagnostics of
:mod:`erag_dagster.meta.fit`: the AUC of label vs judgment with its 95 % bootstrap CI over
queries (1000 resamples, seed 0), the share of cut answers, mean answer and gold lengths, and
the mean label of gold and other passages. The project's own functions throughout
(``load_dataset``, ``label_run``, ``fit_diagnostics``); the packaged
registry is read, never changed. Results go to ``--out`` as JSON (one object per cell).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import LabelStore
from erag_dagster.meta.fit import fit_diagnostics
from erag_dagster.readers.factory import reader_from_config

STATS = EvaluationConfig().statistics
"""The configuration's statistics (its defaults)."""

SENTENCE_PROMPT = (
    "You answer questions about a passage. Reply with the one sentence of the passage that "
    "answers the question, copied exactly."
)
#: name -> overrides of the packaged reader's config.
SETTINGS: dict[str, dict[str, object]] = {
    "16 tokens": {"max_new_tokens": 16},
    "64 tokens": {"max_new_tokens": 64},
    "64 tokens, sentence prompt": {"max_new_tokens": 64, "system_prompt": SENTENCE_PROMPT},
}
METRICS = ("f1", "rougel", "contains")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="make_long_answer_set.py --out")
    parser.add_argument("--out", required=True, type=Path, help="results JSON")
    parser.add_argument("--reader", default="smollm2-135m")
    parser.add_argument("--settings", help="comma-separated subset of the settings' names")
    args = parser.parse_args()
    ds = load_dataset(f"jsonl:{args.data}")
    run = pl.read_csv(
        args.data / "run.trec", separator=" ", has_header=False,
        new_columns=["query_id", "q0", "doc_id", "rank", "score", "tag"],
        schema_overrides={"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64},
    ).select("query_id", "doc_id", "rank")  # fmt: skip
    entry = load_registry().readers[args.reader]
    names = args.settings.split(",") if args.settings else list(SETTINGS)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        store = LabelStore(str(Path(tmp) / "labels.sqlite"))
        for name in names:
            config = {**entry.config, **SETTINGS[name]}
            reader = reader_from_config(entry.name, config)
            began = time.perf_counter()
            for metric in METRICS:
                labels = label_run(run, ds.queries, ds.corpus, reader, metric, store).labels
                fit = fit_diagnostics(
                    labels,
                    ds.queries,
                    ds.qrels,
                    reader=entry.name,
                    retriever=name,
                    metric=metric,
                    max_new_tokens=int(config["max_new_tokens"]),
                    count_tokens=reader.count_tokens,
                    relevance_level=1,
                    stats=STATS,
                    label_methods=(),
                    verdict_labels="eRAG",
                    expected={},
                )
                row = {"setting": name, "seconds": round(time.perf_counter() - began, 1)}
                row.update(fit.as_dict())
                results.append(row)
                sep = fit.separation
                print(
                    f"{name:28} {metric:8} {sep.text if sep else '-'}; gold {sep.mean_relevant:.3f}"
                    f" other {sep.mean_other:.3f}; cut {fit.cut_share:.0%}; words "
                    f"{fit.mean_answer_words:.1f} vs {fit.mean_gold_words:.1f}",
                    flush=True,
                )
            reader.close()
            args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
