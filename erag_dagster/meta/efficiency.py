"""Cost of evaluation: end-to-end vs eRAG at two batching levels (the paper's Table 2).

Three ways to spend the same reader on the same queries and top-``k`` lists:

* ``end_to_end`` — one prompt per query holding its ``k`` documents (what end-to-end
  evaluation costs);
* ``erag_query_batch`` — eRAG with query-level batching: one batch = one query's ``k``
  (question, document) pairs;
* ``erag_doc_batch`` — eRAG with document-level batching: batch size 1;
* ``erag_doc_batch_plain`` (not in the default :data:`MODES`; ``bench/efficiency.py --plain``)
  — the same with the reader's ``share_prefix`` and ``stop_at_line_end`` off: every prompt
  prefilled whole and every answer decoded to ``max_new_tokens``, i.e. the reader before those
  two savings, for a side-by-side comparison (the same answers).

How it is timed, so that a figure is a measurement and not one noisy draw:

* Each (mode, k) cell runs in a fresh process (``multiprocessing`` spawn), so its peak memory is
  its own: peak RSS (``VmHWM``, MiB) on CPU, ``torch.cuda.max_memory_allocated`` (MiB) on a GPU.
  The model is loaded and warmed up before the clock starts; wall time counts generation only.
* Every cell is timed in ``rounds`` repeated rounds, and the order of the cells alternates
  between rounds (:func:`round_orders`), so warm-up, neighbour load and clock drift fall on
  every cell alike. The table reports the **median** over rounds with its range (min, max).
* Prefill vs decode: each cell is timed twice in its process, with the reader's
  ``max_new_tokens`` and with 1 new token (prompt prefill plus one step). ``prefill_share`` =
  the 1-token time / the full time (median over rounds): near 1, prompt processing dominates
  (long contexts: end-to-end at large k); near 0, decoding does (many short prompts).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import resource
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.core.errors import InputError

MODES = ("end_to_end", "erag_query_batch", "erag_doc_batch")
PLAIN_MODE = "erag_doc_batch_plain"
#: Reader settings of :data:`PLAIN_MODE` (batch size 1 as ``erag_doc_batch``).
PLAIN_SETTINGS = {"share_prefix": False, "stop_at_line_end": False}


def _peak_rss_mib() -> float:
    """This process's peak resident set (MiB): ``VmHWM`` from /proc, which starts afresh at
    ``exec`` (``ru_maxrss`` does not: it keeps the forking parent's peak), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _time_mode(reader: Any, mode: str, k: int, items: list[tuple[str, list[str]]]) -> float:
    """Seconds to run ``mode`` at depth ``k`` over ``items`` (generation only)."""
    started = time.perf_counter()
    for question, passages in items:
        top = passages[:k]
        if mode == "end_to_end":
            reader.answer_with_context(question, top)
        else:
            reader.answer([(question, p) for p in top])
    return time.perf_counter() - started


def _child(payload: dict[str, Any]) -> dict[str, Any]:
    """Runs in a spawned process: load the reader, warm up, time one mode with the reader's
    ``max_new_tokens`` and then with 1 new token (prefill)."""
    import torch

    from erag_dagster.readers.factory import reader_from_config

    mode, k = payload["mode"], payload["k"]
    config = dict(payload["config"])
    config["batch_size"] = k if mode == "erag_query_batch" else 1
    if mode == PLAIN_MODE:
        config.update(PLAIN_SETTINGS)
    reader = reader_from_config(payload["name"], config)
    items: list[tuple[str, list[str]]] = payload["items"]
    reader.answer([(items[0][0], items[0][1][0])])  # load + warm up outside the clock
    on_cuda = str(getattr(reader, "device", "cpu")).startswith("cuda")
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    seconds = _time_mode(reader, mode, k, items)
    peak = torch.cuda.max_memory_allocated() / 2**20 if on_cuda else _peak_rss_mib()
    reader.spec = dataclasses.replace(reader.spec, max_new_tokens=1)
    prefill_seconds = _time_mode(reader, mode, k, items)
    return {
        "round": payload["round"],
        "mode": mode,
        "k": k,
        "queries": len(items),
        "documents": sum(min(k, len(ps)) for _, ps in items),
        "seconds": seconds,
        "prefill_seconds": prefill_seconds,
        "peak_memory_mib": peak,
        "memory_kind": "cuda_max_allocated" if on_cuda else "peak_rss",
    }


def round_orders(cells: Sequence[Any], rounds: int) -> list[list[Any]]:
    """The order of ``cells`` in each of ``rounds`` rounds: round ``r`` rotates the list by
    ``r`` and reverses it on odd rounds, so across rounds no cell is always first or last.
    ``rounds`` < 1 gives no round."""
    cells = list(cells)
    orders = []
    for r in range(max(rounds, 0)):
        shift = r % len(cells) if cells else 0
        order = cells[shift:] + cells[:shift]
        orders.append(order[::-1] if r % 2 else order)
    return orders


def summarise_rounds(timings: pl.DataFrame) -> pl.DataFrame:
    """One row per (mode, k) from per-round rows (``round, mode, k, queries, documents,
    seconds, prefill_seconds, peak_memory_mib, memory_kind``): ``rounds``, ``seconds`` (median),
    ``seconds_min``, ``seconds_max``, ``seconds_per_query`` (median / queries),
    ``prefill_share`` (median of prefill_seconds / seconds), ``peak_memory_mib`` (median), and
    ``time_vs_end_to_end`` / ``memory_vs_end_to_end``: ratios of medians to the end-to-end cell
    of the same k (null when no end-to-end cell was timed)."""
    table = (
        timings.group_by("mode", "k", maintain_order=True)
        .agg(
            pl.len().alias("rounds"),
            pl.col("queries").first(),
            pl.col("documents").first(),
            pl.col("seconds").median(),
            pl.col("seconds").min().alias("seconds_min"),
            pl.col("seconds").max().alias("seconds_max"),
            (pl.col("prefill_seconds") / pl.col("seconds")).median().alias("prefill_share"),
            pl.col("peak_memory_mib").median(),
            pl.col("memory_kind").first(),
        )
        .with_columns(seconds_per_query=pl.col("seconds") / pl.col("queries"))
    )
    e2e = table.filter(pl.col("mode") == "end_to_end").select(
        "k", e2e_seconds="seconds", e2e_memory="peak_memory_mib"
    )
    return (
        table.join(e2e, on="k", how="left")
        .with_columns(
            time_vs_end_to_end=pl.col("seconds") / pl.col("e2e_seconds"),
            memory_vs_end_to_end=pl.col("peak_memory_mib") / pl.col("e2e_memory"),
        )
        .drop("e2e_seconds", "e2e_memory")
    )


def measure_efficiency(
    reader_name: str,
    reader_config: dict[str, Any],
    items: Sequence[tuple[str, Sequence[str]]],
    ks: Sequence[int] = (10, 50),
    modes: Sequence[str] = MODES,
    rounds: int = 3,
) -> pl.DataFrame:
    """Time every (mode, k) on ``items`` = [(question, ranked passages)] in ``rounds``
    alternating rounds, each cell in a new process; :func:`summarise_rounds` of the timings.

    Every query needs at least max(ks) passages (the table compares equal work).
    """
    if not items:
        raise InputError("efficiency measurement needs at least one query")
    if rounds < 1:
        raise InputError(f"efficiency rounds must be >= 1, got {rounds}")
    known = (*MODES, PLAIN_MODE)
    unknown = set(modes) - set(known)
    if unknown:
        raise InputError(f"unknown efficiency mode(s) {sorted(unknown)}; known: {known}")
    short = [q for q, ps in items if len(ps) < max(ks)]
    if short:
        raise InputError(
            f"efficiency needs {max(ks)} passages per query; query {short[0]!r} has fewer"
        )
    payload_items = [(q, list(ps)) for q, ps in items]
    rows = []
    ctx = mp.get_context("spawn")
    cells = [(mode, k) for k in ks for mode in modes]
    for r, order in enumerate(round_orders(cells, rounds)):
        for mode, k in order:
            payload = {
                "round": r,
                "mode": mode,
                "k": k,
                "name": reader_name,
                "config": reader_config,
                "items": payload_items,
            }
            # A one-worker executor per cell: a fresh process each time. Its shutdown stops
            # the worker with a sentinel, not a signal, so it also ends where SIGTERM is ignored
            # (nohup'd or daemonised parents pass SIG_IGN on; Pool.terminate then hangs).
            with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
                rows.append(pool.submit(_child, payload).result())
    return summarise_rounds(pl.DataFrame(rows))  # round 0 ran the cells in declared order


def efficiency_items(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    depth: int,
    n_queries: int,
) -> list[tuple[str, list[str]]]:
    """The timed workload: the first ``n_queries`` queries (by ``query_id``) with at least
    ``depth`` retrieved documents in ``run``, as ``(question, top-depth passages)``.

    Empty when no query is that deep (raise the retrieval depth to measure).
    """
    from erag_dagster.meta.end_to_end import context_lists

    deep = run.group_by("query_id").agg(pl.len().alias("n")).filter(pl.col("n") >= depth)
    chosen = deep.sort("query_id").head(n_queries).get_column("query_id").to_list()
    if not chosen:
        return []
    contexts = context_lists(
        run.filter(pl.col("query_id").is_in(chosen)),
        queries.filter(pl.col("query_id").is_in(chosen)),
        corpus,
        depth,
    )
    return list(zip(contexts["question"].to_list(), contexts["passages"].to_list(), strict=True))


def efficiency_report(
    reader_name: str,
    reader_config: dict[str, Any],
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    ks: Sequence[int],
    n_queries: int,
    rounds: int = 3,
    modes: Sequence[str] = MODES,
) -> pl.DataFrame:
    """:func:`measure_efficiency` on :func:`efficiency_items` at ``max(ks)``; an empty frame
    when no query has ``max(ks)`` retrieved documents."""
    items = efficiency_items(run, queries, corpus, max(ks), n_queries)
    if not items:
        return pl.DataFrame()
    return measure_efficiency(reader_name, reader_config, items, ks=ks, modes=modes, rounds=rounds)
