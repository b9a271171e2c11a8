"""The ``openai`` reader through a real server: labeller vs a bare concurrent client, and the cache.

Starts ``transformers serve`` on loopback (tests/openai_server.py: the packaged SmolLM2 reader,
CPU, one thread) and, in one run, against that same server and with the same prompts:

* **bare client**: the ``openai`` package with a thread pool of ``--concurrency`` workers
  sending one chat request per pair (the reader's exact messages, ``temperature: 0``,
  ``seed``, ``max_tokens``) — the floor any labeller pays;
* **labeller**: ``label_run`` with ``backend: openai`` at the same concurrency into a fresh
  label store (prompts, retries, usage accounting, store commits, scoring included);

each timed ``--rounds`` times alternating which goes first (best kept), and prints pairs/s and
the ratio labeller / bare (target ≥ 0.9). Then the **cache check**: a second retriever's run
(half of the first run's pairs plus new ones) is labelled into the first run's store, and the
chat requests the *server* logged (uvicorn's access log) are counted: they must equal the
second run's unseen pairs.

    python bench/openai_reader.py [--pairs 48] [--depth 4] [--concurrency 4] [--rounds 2]
                                  [--quick] [--json PATH]

``--quick``: 12 pairs, one round (a smoke run; its ratio means little). ``--json PATH`` writes
the tables as JSON rows (bench/benchjson.py). On a shared 2-core machine the figures are noisy;
the server (one torch thread, one request at a time: ``transformers serve`` without continuous
batching) is the bottleneck, so the ratio measures the labeller's overhead per request.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import polars as pl
from benchjson import add_json_argument, text_stream, write_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from erag_dagster.data.loaders import load_dataset
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import LabelStore
from erag_dagster.readers.extraction import extract_answer
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.passages import reader_passages
from erag_dagster.readers.prompts import build_messages
from erag_dagster.reports.tables import format_table
from tests.openai_server import running_server


def runs(pairs: int, depth: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``corpus, queries, run_a, run_b`` from the embedded sample: ``pairs // depth`` queries,
    each with its own document then the next ones in corpus order; run B keeps the first half of
    each query's A list and adds as many documents A did not have."""
    ds = load_dataset("sample")
    docs = ds.corpus.get_column("doc_id").to_list()
    chosen = ds.qrels.unique("query_id", keep="first", maintain_order=True).head(pairs // depth)
    rows_a, rows_b = [], []
    for qid, own in chosen.select("query_id", "doc_id").rows():
        start = docs.index(own)
        ring = [docs[(start + i) % len(docs)] for i in range(2 * depth)]
        list_a, list_b = ring[:depth], ring[: depth // 2] + ring[depth : 2 * depth - depth // 2]
        rows_a += [(qid, d, r) for r, d in enumerate(list_a, start=1)]
        rows_b += [(qid, d, r) for r, d in enumerate(list_b, start=1)]
    schema = {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64}
    run_a = pl.DataFrame(rows_a, schema=schema, orient="row")
    run_b = pl.DataFrame(rows_b, schema=schema, orient="row")
    queries = ds.queries.join(chosen.select("query_id"), on="query_id", how="semi")
    return ds.corpus, queries, run_a, run_b


def bare_client(server, spec, items: list[tuple[str, str]], concurrency: int) -> float:
    """Seconds for the ``openai`` package alone to get every answer, ``concurrency`` in flight."""
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)

    def one(item: tuple[str, str]) -> str:
        response = client.chat.completions.create(
            model=server.model,
            messages=build_messages(spec, item[0], item[1]),
            temperature=0,
            seed=spec.seed,
            max_tokens=spec.max_new_tokens,
        )
        return extract_answer(response.choices[0].message.content or "")

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        answers = list(pool.map(one, items))
    seconds = time.perf_counter() - began
    client.close()
    assert len(answers) == len(items)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=48, help="pairs in run A (default 48)")
    parser.add_argument("--depth", type=int, default=4, help="documents per query (default 4)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smoke run: 12 pairs, one round")
    add_json_argument(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.pairs, args.rounds = 12, 1
    out = text_stream(args)
    corpus, queries, run_a, run_b = runs(args.pairs, args.depth)
    passages = dict(zip(corpus["doc_id"], reader_passages(corpus), strict=True))
    questions = dict(zip(queries["query_id"], queries["question"], strict=True))
    items = [(questions[q], passages[d]) for q, d in run_a.select("query_id", "doc_id").rows()]

    with (
        tempfile.TemporaryDirectory(prefix="erag-bench-openai-") as tmp,
        running_server(Path(tmp)) as server,
    ):
        config = {
            "backend": "openai", "base_url": server.base_url, "model": server.model,
            "answer_prefix": "", "concurrency": args.concurrency,
        }  # fmt: skip
        reader = reader_from_config("bench", config).load()
        bare_client(server, reader.spec, items[:2], args.concurrency)  # warm-up
        best = {"bare client": float("inf"), "labeller": float("inf")}
        for round_ in range(args.rounds):
            order = ["bare client", "labeller"][:: 1 if round_ % 2 == 0 else -1]
            for side in order:
                if side == "bare client":
                    seconds = bare_client(server, reader.spec, items, args.concurrency)
                else:
                    store = LabelStore(Path(tmp) / f"labels-{round_}.sqlite")
                    began = time.perf_counter()
                    result = label_run(run_a, queries, corpus, reader, "em", store)
                    seconds = time.perf_counter() - began
                    assert result.judged_now == len(items)
                best[side] = min(best[side], seconds)
        # the cache: run B into the last run-A store; requests counted at the server
        before = server.requests()
        b_result = label_run(run_b, queries, corpus, reader, "em", store)
        sent = server.requests() - before
        unseen = run_b.join(run_a, on=["query_id", "doc_id"], how="anti").height

    methods = pl.DataFrame(
        {
            "method": list(best),
            "pairs": [len(items)] * 2,
            "seconds": [round(s, 2) for s in best.values()],
            "pairs/s": [round(len(items) / s, 3) for s in best.values()],
        }
    )
    ratio = best["bare client"] / best["labeller"]
    summary = [
        {"measure": "labeller / bare client (pairs/s)", "value": round(ratio, 3)},
        {"measure": "target", "value": ">= 0.9"},
        {"measure": "run B pairs", "value": run_b.height},
        {"measure": "run B pairs unseen in run A", "value": unseen},
        {"measure": "run B pairs judged now", "value": b_result.judged_now},
        {"measure": "chat requests the server logged for run B", "value": sent},
        {"measure": "cache check", "value": "ok" if sent == unseen else "FAILED"},
    ]
    print(
        f"openai reader vs bare openai client, concurrency {args.concurrency}, "
        f"{len(items)} pairs, best of {args.rounds} round(s)",
        file=out,
    )
    print(format_table(methods), file=out)
    shown = [{"measure": row["measure"], "value": str(row["value"])} for row in summary]
    print(format_table(pl.DataFrame(shown)), file=out)
    write_json(args, "openai_reader", {"methods": methods, "summary": summary})
    return 0 if sent == unseen else 1


if __name__ == "__main__":
    sys.exit(main())
