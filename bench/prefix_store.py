"""Stored prompt prefixes against none, side by side, on the default run's own reader inputs.

On a CPU in float32 the transformers reader prefills each prompt from the longest token prefix
it has already computed (``erag_dagster/readers/prefix_store.py``). This bench times one
reader's three phases of the default run — eRAG answers (one passage each), P(yes) (LLM
annotation) and end-to-end answers over the top 3 — with the store (``share_prefix: auto``,
the default) and with no sharing at all (``share_prefix: false``), in ``--rounds`` rounds whose
side order alternates, one process, the store emptied before every round. Phases run in the
run's order (eRAG, P(yes), end-to-end) so the end-to-end phase may read what the eRAG phase
stored, as in a run. It prints seconds per phase and side (sum over rounds), the prefill
positions each side fed, and the ratio stored / none; answers are checked equal.

    python bench/prefix_store.py [--reader smollm2-135m] [--pairs 64] [--lists 24] [--rounds 2]
                                 [--json PATH]
"""

from __future__ import annotations

import argparse
import time

import polars as pl
from benchjson import add_json_argument, text_stream, write_json
from run_time import run_inputs

from erag_dagster.readers.factory import reader_from_config
from erag_dagster.registry import load_registry

SIDES = {"stored prefixes": {}, "no sharing": {"share_prefix": False}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reader", default="smollm2-135m")
    parser.add_argument("--pairs", type=int, default=64, help="first N label pairs")
    parser.add_argument("--lists", type=int, default=24, help="first N top-3 lists")
    parser.add_argument("--rounds", type=int, default=2)
    add_json_argument(parser)
    args = parser.parse_args()
    out = text_stream(args)
    pairs, lists = run_inputs(None)
    pairs, top3 = pairs[: args.pairs], lists.get(3, [])[: args.lists]
    config = load_registry().reader(args.reader).config
    readers = {
        side: reader_from_config(args.reader, {**config, **extra}) for side, extra in SIDES.items()
    }
    for reader in readers.values():
        reader.answer(pairs[:2])  # load and warm up outside the clock
    phases = {
        "eRAG answers": lambda r: r.answer(pairs),
        "P(yes)": lambda r: r.yes_probability(pairs),
        "end-to-end top 3": lambda r: r.answer_with_contexts(top3),
    }
    rows, outputs = [], {}
    for rnd in range(args.rounds):
        order = list(readers) if rnd % 2 == 0 else list(readers)[::-1]
        for side in order:
            reader = readers[side]
            reader.forget_prefixes()
            for phase, work in phases.items():
                reader.reset_timings()
                began = time.perf_counter()
                outputs[(side, phase)] = work(reader)
                seconds = time.perf_counter() - began
                fed = sum(t.padded_tokens for t in reader.timings)
                rows.append({"phase": phase, "side": side, "seconds": seconds, "fed": fed})
    for phase in ("eRAG answers", "end-to-end top 3"):
        if outputs[("stored prefixes", phase)] != outputs[("no sharing", phase)]:
            print(f"{phase}: the answers differ between the sides", file=out)
            return 1
    table = (
        pl.DataFrame(rows)
        .group_by("phase", "side", maintain_order=True)
        .agg(pl.col("seconds").sum(), pl.col("fed").first().alias("prefill positions"))
    )
    wide = table.pivot(on="side", index="phase", values="seconds").with_columns(
        ratio=pl.col("stored prefixes") / pl.col("no sharing")
    )
    total = wide.select(pl.col("stored prefixes").sum() / pl.col("no sharing").sum()).item()
    print(
        f"{args.reader}: {len(pairs)} pairs, {len(top3)} top-3 lists, {args.rounds} rounds "
        f"(seconds summed over rounds)",
        file=out,
    )
    with pl.Config(tbl_rows=20, tbl_hide_dataframe_shape=True):
        print(table.with_columns(pl.col("seconds").round(1)), file=out)
        print(wide.with_columns(pl.exclude("phase").round(3)), file=out)
    print(f"all phases: stored / none = {total:.3f}", file=out)
    write_json(args, "prefix_store", {"phases": table, "ratios": wide})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
