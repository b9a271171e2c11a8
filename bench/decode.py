"""Decoding cost: each row dropped once its answer is final, against transformers' ``generate``.

On the default run's eRAG prompts (the embedded sample's 30 spread questions, BM25's top 3 each:
one question and one document per prompt), for each reader named, in one process with one
loaded reader, it times ``reader.answer`` with the project's decode loop
(:func:`erag_dagster.readers.greedy_decode.greedy_decode`: a row leaves the batch as soon as it
has ended) and with ``generate`` (``decode_with_generate``: every row stays to its batch's end),
``--rounds`` times, alternating which goes first (the best time of each kept: a shared machine
drifts by more than the difference), and prints seconds, the ratio and how many answers differ
(the loop promises the same answers: this must print 0).

    python bench/decode.py [--readers smollm2-135m,gemma3-270m] [--prompts 48] [--rounds 2]
                           [--quick] [--json PATH]

``--quick`` is a smoke run (8 prompts, one round). ``--json PATH`` also writes the table as JSON
rows (``-`` = stdout, the table then goes to stderr): ``{"bench": "decode", "settings": {...},
"tables": {"decode": [{"reader", "prompts", "max_new_tokens", "generate_s", "loop_s", "ratio",
"answers_differ"}, ...]}}`` (see ``bench/benchjson.py``).
"""

from __future__ import annotations

import argparse
import time

import polars as pl
from benchjson import add_json_argument, text_stream, write_json

from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.reports.tables import format_table
from erag_dagster.retrieval.runs import top_k


def erag_prompts(count: int) -> list[tuple[str, str]]:
    """``(question, document)`` pairs of the default run's BM25 top 3, in run order, the first
    ``count``."""
    registry = load_registry()
    ds = load_dataset(registry.evaluation.dataset)
    run = top_k(run_retriever(registry, "bm25", ds.corpus, ds.queries, 3), 3)
    text = dict(ds.corpus.select("doc_id", "text").rows())
    question = dict(ds.queries.select("query_id", "question").rows())
    pairs = run.select("query_id", "doc_id").rows()
    return [(question[q], text[d]) for q, d in pairs][:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", default="smollm2-135m,gemma3-270m")
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 prompts, one round")
    add_json_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.prompts, args.rounds = 8, 1
    items = erag_prompts(args.prompts)
    registry = load_registry()
    rows = []
    for name in [n for n in args.readers.split(",") if n]:
        reader = reader_from_config(name, dict(registry.readers[name].config)).load()
        best = {True: float("inf"), False: float("inf")}
        answers: dict[bool, list[str]] = {}
        for round_ in range(args.rounds):
            for with_generate in (round_ % 2 == 0, round_ % 2 == 1):
                reader.decode_with_generate = with_generate
                began = time.perf_counter()
                answers[with_generate] = reader.answer(items)
                best[with_generate] = min(best[with_generate], time.perf_counter() - began)
        differ = sum(a != b for a, b in zip(answers[True], answers[False], strict=True))
        rows.append(
            {
                "reader": name,
                "prompts": len(items),
                "max_new_tokens": reader.spec.max_new_tokens,
                "generate_s": best[True],
                "loop_s": best[False],
                "ratio": best[False] / best[True],
                "answers_differ": differ,
            }
        )
        reader.close()
    table = pl.DataFrame(rows)
    out = text_stream(args)
    print(
        f"\ndecode: the default run's eRAG prompts, best of {args.rounds} round(s) each, "
        "alternating; ratio = loop / generate (below 1: the loop is faster)",
        file=out,
    )
    print(format_table(table, floatfmt=".2f"), file=out)
    write_json(args, "decode", {"decode": table})


if __name__ == "__main__":
    main()
