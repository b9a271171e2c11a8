"""Where the default run's time goes: each reader's work, phase by phase, on the run's own pairs.

The default run (``erag-dagster run``: the packaged registry, 30 embedded questions, three
retrievers, two readers) spends its time in a few reader phases. This bench rebuilds exactly
the run's reader inputs — the top ``label_k`` documents of every retriever's run (pairs shared
by two retrievers counted once, as the label store does) and the top-``k`` lists of every
end-to-end depth — and times, per reader, in one process with no label store:

* ``convert``: the one-off GGUF → safetensors conversion (into an empty temporary model cache;
  set-up does it, ``scripts/setup.sh``), and ``load``: loading the converted folder;
* ``eRAG labels``: the greedy answer from each document alone (``reader.answer``), and the
  same prompts with one new token — the **prefill** floor; ``decode`` = the difference;
* ``LLM annotation``: P("yes") of each pair (one prefill each; ``yes_probability``);
* ``end-to-end k=N``: the answer from the top-N documents together, for every depth of
  ``e2e_ks`` above 1 (depth 1 is the eRAG prompt of the top document: taken from the store);
* ``other``: with ``--pipeline``, a cold ``erag-dagster run`` into a temporary Dagster home
  (conversions cached) is timed in the same process tree, and ``other`` is its wall time minus
  the reader phases above (indexing, retrieval, Dagster, the label store, the reports).

Each phase is timed ``--rounds`` times (best kept; the phases alternate within a round). The
shares are what a faster kernel, fewer tokens or less work would save; the table prints
seconds and the share of the reader total.

    python bench/run_time.py [--readers smollm2-135m,gemma3-270m] [--rounds 1] [--pipeline]
                             [--quick] [--json PATH]

``--quick``: 4 questions instead of the run's 30 (a smoke run). ``--json PATH``: the table as
JSON rows (``bench/benchjson.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl
from benchjson import add_json_argument, text_stream, write_json

from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.orchestration.resources import EvalSettings
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.model_cache import close_all_readers
from erag_dagster.readers.passages import run_with_passages

ROOT = Path(__file__).resolve().parents[1]


def best_of(rounds: int, work: Callable[[], object]) -> float:
    """The shortest of ``rounds`` wall times of ``work()`` (s)."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def run_inputs(questions: int | None) -> tuple[list[tuple[str, str]], dict[int, list]]:
    """The default run's reader inputs: unique ``(question, passage)`` pairs of every
    retriever's top ``label_k``, and per end-to-end depth the unique ``(question, passages)``
    lists."""
    registry = load_registry()
    params = EvalSettings().resolve()
    spec = params.dataset
    if questions is not None:
        spec = f"sample?spread_questions={questions}"
    ds = load_dataset(spec)
    runs = [
        run_retriever(registry, name, ds.corpus, ds.queries, params.k)
        for name in registry.retrievers
    ]
    question = dict(ds.queries.select("query_id", "question").rows())
    pairs: dict[tuple[str, str], tuple[str, str]] = {}
    lists: dict[int, dict[tuple, tuple[str, list[str]]]] = {k: {} for k in params.e2e_ks}
    for run in runs:
        shown = run_with_passages(run.filter(pl.col("rank") <= max(params.e2e_ks)), ds.corpus)
        for qid, doc, rank, passage in shown.select("query_id", "doc_id", "rank", "passage").rows():
            if rank <= params.label_k:
                pairs[(qid, doc)] = (question[qid], passage)
        ranked = shown.sort("query_id", "rank").group_by("query_id", maintain_order=True)
        for (qid,), group in ranked:
            for k in params.e2e_ks:
                top = group.filter(pl.col("rank") <= k)
                key = (qid, *top["doc_id"].to_list())
                lists[k][key] = (question[qid], top["passage"].to_list())
    return list(pairs.values()), {k: list(v.values()) for k, v in lists.items() if k > 1}


def time_reader(name: str, config: dict, pairs, lists, rounds: int) -> list[dict]:
    """Seconds per phase for one registry reader."""
    rows = []
    cache = Path(tempfile.mkdtemp(prefix="erag-bench-models-"))
    previous = os.environ.get("ERAG_MODEL_CACHE")
    os.environ["ERAG_MODEL_CACHE"] = str(cache)
    try:
        fresh = reader_from_config(name, config)
        started = time.perf_counter()
        fresh._ensure()
        rows.append({"reader": name, "phase": "convert + load", "seconds": 0.0})
        rows[-1]["seconds"] = time.perf_counter() - started
    finally:
        if previous is None:
            os.environ.pop("ERAG_MODEL_CACHE", None)
        else:
            os.environ["ERAG_MODEL_CACHE"] = previous
        shutil.rmtree(cache, ignore_errors=True)
    close_all_readers()  # else the next reader reuses the model loaded above: load would read 0 s
    reader = reader_from_config(name, config)
    started = time.perf_counter()
    reader._ensure()
    rows.append({"reader": name, "phase": "load (converted)", "seconds": 0.0})
    rows[-1]["seconds"] = time.perf_counter() - started
    rows[0]["seconds"] -= rows[1]["seconds"]
    rows[0]["phase"] = "convert"
    prefill = reader_from_config(name, {**config, "max_new_tokens": 1})
    prefill._ensure()
    generation = best_of(rounds, lambda: reader.answer(pairs))
    floor = best_of(rounds, lambda: prefill.answer(pairs))
    rows += [
        {"reader": name, "phase": f"eRAG labels ({len(pairs)} pairs)", "seconds": generation},
        {"reader": name, "phase": "  of which prefill (1 new token)", "seconds": floor},
        {"reader": name, "phase": "  of which decode", "seconds": max(0.0, generation - floor)},
    ]
    rows.append(
        {
            "reader": name,
            "phase": f"LLM annotation ({len(pairs)} pairs)",
            "seconds": best_of(rounds, lambda: reader.yes_probability(pairs)),
        }
    )
    for k, items in sorted(lists.items()):
        rows.append(
            {
                "reader": name,
                "phase": f"end-to-end k={k} ({len(items)} lists)",
                "seconds": best_of(rounds, lambda items=items: reader.answer_with_contexts(items)),
            }
        )
    return rows


def cold_pipeline_seconds() -> float:
    """Wall time of a cold ``erag-dagster run`` (empty storage and Dagster home; conversions
    cached), in a child process."""
    with tempfile.TemporaryDirectory(prefix="erag-bench-run-") as home:
        shutil.copy(ROOT / "deploy" / "local" / "dagster.yaml", Path(home) / "dagster.yaml")
        env = {**os.environ, "DAGSTER_HOME": home, "ERAG_STORAGE": str(Path(home) / "storage")}
        started = time.perf_counter()
        subprocess.run(
            [str(Path(sys.executable).parent / "erag-dagster"), "run"],
            env=env, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--readers", help="comma-separated registry readers (default: all)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pipeline", action="store_true", help="also time a cold default run")
    parser.add_argument("--quick", action="store_true", help="4 questions (a smoke run)")
    add_json_argument(parser)
    args = parser.parse_args()
    out = text_stream(args)
    registry = load_registry()
    names = args.readers.split(",") if args.readers else list(registry.readers)
    pairs, lists = run_inputs(4 if args.quick else None)
    rows = []
    for name in names:
        rows += time_reader(name, registry.reader(name).config, pairs, lists, args.rounds)
    table = pl.DataFrame(rows)
    reader_phases = table.filter(~pl.col("phase").str.starts_with("  "))
    total = float(reader_phases["seconds"].sum())
    if args.pipeline and not args.quick:
        run = cold_pipeline_seconds()
        convert = float(table.filter(pl.col("phase") == "convert")["seconds"].sum())
        other = run - (total - convert)
        table = pl.concat(
            [
                table,
                pl.DataFrame(
                    [
                        {"reader": "-", "phase": "cold default run (converted)", "seconds": run},
                        {"reader": "-", "phase": "  of which not the reader", "seconds": other},
                    ]
                ),
            ]
        )
    table = table.with_columns(
        share=pl.when(pl.col("reader") != "-").then(pl.col("seconds") / total)
    )
    print(
        f"Where the default run's reader time goes ({len(pairs)} label pairs; "
        f"best of {args.rounds}; share of {total:.1f} s)",
        file=out,
    )
    with pl.Config(tbl_rows=100, tbl_hide_dataframe_shape=True, fmt_str_lengths=60):
        print(table.with_columns(pl.col("seconds", "share").round(3)), file=out)
    write_json(args, "run_time", {"phases": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
