"""The reader on a GPU: one short check that prints one table (throughput, determinism, Table 2).

Made for a GPU machine lent briefly (one H100 or H200, ~15 minutes in all) whose image has torch,
transformers, safetensors and numpy but no dagster, polars, pyserini or faiss: the check imports
none of them (``tests/test_gpu_check.py`` runs it with those imports blocked). It runs the
project's own reader (``readers/transformers_reader.py``: prompt building, greedy decoding, the
float32 margin guard) and downstream metric (``metrics/downstream.py``) on fixed pairs of the
embedded sample, read with the standard library: the questions, and the BM25 top-50 lists of the
first queries by id in ``bench/gpu_check_bm25.trec`` (the project's BM25, written by
``--write-run``; the workload of ``bench/efficiency.py``).

Sections (one row each in the printed table; every figure also in ``--json``):

* **throughput** — the reader's answers to ``--pairs`` (question, document) pairs per reader
  and dtype: pairs/s at batch 1 and at the best of ``--batch-sizes``, each the median of the
  two orders timed below (the labels' token F1, microseconds a pair, is computed once, untimed);
  ``--compare`` adds the same script's figures from another machine (this CPU).
* **determinism** — the same pairs answered at every batch size, in input order and reversed,
  in float32 and in bfloat16: pairs whose answer is equal in every layout, and the margin-guard
  re-decodes (float32 only: ``readers/exact_greedy.py``); with ``--compare``, float32 answers
  equal to the other machine's.
* **table2** — the paper's Table 2: end-to-end (one prompt with k documents) vs eRAG with
  query-level batching (a query's k documents in one batch) vs document-level batching
  (batch size 1), over ``--table2-queries`` queries at each k of ``--ks``: median wall time of
  ``--rounds`` rounds whose cell order alternates (as ``meta/efficiency.py``), peak memory
  (``torch.cuda.max_memory_allocated`` on a GPU, model included, and the part above the loaded
  model; not measured on CPU), and the ratios end-to-end / eRAG next to the paper's.

Usage (docs/benchmarks.md, "The reader on a GPU", has the device procedure)::

    python bench/gpu_check.py --device cpu --json cpu.json          # here: the CPU side
    python bench/gpu_check.py --pack .gpu_pack                      # here: weights in chunks
    python3 bench/gpu_check.py --pack-dir .gpu_pack --status        # device: chunks so far
    python3 bench/gpu_check.py --pack-dir .gpu_pack --readers smollm2-135m \\
        --compare .gpu_pack/cpu.json --json $OUT/gpu_check.json     # device: the check
    python bench/gpu_check.py --write-run                           # here: the BM25 lists

Bad input (an unknown reader, a missing chunk, a compare file of other pairs) is one line and
exit 2; a missing GPU when ``--device cuda`` is asked for too. ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_PATH = ROOT / "erag_dagster" / "data" / "sample" / "squad-v1.1-dev-sample.json"
REGISTRY_PATH = ROOT / "erag_dagster" / "registry.yaml"
RUN_PATH = ROOT / "bench" / "gpu_check_bm25.trec"
RUN_DEPTH = 50
RUN_QUERIES = 16
DEFAULT_READERS = ("smollm2-135m", "gemma3-270m")
DTYPES = ("float32", "bfloat16")
ORDERS = ("forward", "reversed")
MODES = ("end_to_end", "erag_query_batch", "erag_doc_batch")
PAPER = {
    "source": "Salemi & Zamani, SIGIR 2024: T5 Fusion-in-Decoder on an A100",
    "speedup": 2.47,  # end-to-end time / eRAG time, on average
    "memory_ratio_max": 50.0,  # end-to-end GPU memory / eRAG GPU memory, at most ("up to 50x")
}
BLOCKED = ("dagster", "polars", "pyserini", "faiss")


def _bootstrap(pack_dir: Path | None) -> None:
    """Make the project importable from its working tree (the GPU machine does not install it)
    and put a pack's ``site/`` (the ``gguf`` package) on the path."""
    if importlib.util.find_spec("erag_dagster") is None:
        sys.path.insert(0, str(ROOT))
    bench = str(Path(__file__).resolve().parent)
    if bench not in sys.path:
        sys.path.insert(0, bench)
    if pack_dir is not None and (pack_dir / "site").is_dir():
        sys.path.insert(0, str((pack_dir / "site").resolve()))


# -- the workload (standard library only) ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Query:
    """A sample question with its gold answers and BM25 ranking (doc ids, best first)."""

    query_id: str
    question: str
    golds: tuple[str, ...]
    ranking: tuple[str, ...]


def load_sample(path: Path = SAMPLE_PATH) -> tuple[dict[str, str], dict[str, tuple[str, list]]]:
    """The embedded SQuAD slice as the project reads it (``data/formats/squad.py``): passages
    by doc id ``<title>_<paragraph index>`` as the reader sees them (``reader_passage``: title
    with ``_`` shown as spaces, newline, paragraph), and queries by id: (question stripped, gold
    answers non-blank, exact duplicates removed, first-seen order)."""
    from erag_dagster.core.input_files import load_json
    from erag_dagster.readers.prompts import reader_passage

    data = load_json(path)
    passages: dict[str, str] = {}
    queries: dict[str, tuple[str, list]] = {}
    for article in data["data"]:
        title = article["title"]
        for index, paragraph in enumerate(article["paragraphs"]):
            doc_id = f"{title}_{index}"
            passages[doc_id] = reader_passage(title.replace("_", " "), paragraph["context"])
            for qa in paragraph.get("qas", []):
                golds: list[str] = []
                for answer in qa.get("answers", []):
                    text = answer.get("text")
                    if isinstance(text, str) and text.strip() and text not in golds:
                        golds.append(text)
                queries[str(qa["id"])] = (qa["question"].strip(), golds)
    return passages, queries


def load_run(path: Path = RUN_PATH) -> dict[str, list[str]]:
    """A TREC run (``qid Q0 docid rank score tag``) as doc ids per query, by rank; a malformed
    line is an InputError naming ``file:line``."""
    from erag_dagster.core.errors import InputError, where
    from erag_dagster.core.input_files import text_lines

    ranked: dict[str, list[tuple[int, str]]] = {}
    for number, line in text_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6 or not fields[3].isdigit():
            raise InputError(f"{where(path, number)}: not a TREC run line: {line.strip()[:80]!r}")
        ranked.setdefault(fields[0], []).append((int(fields[3]), fields[2]))
    return {q: [d for _, d in sorted(rows)] for q, rows in ranked.items()}


def workload(depth: int, n_queries: int) -> list[Query]:
    """The first ``n_queries`` queries by id with at least ``depth`` ranked documents (as
    ``meta/efficiency.py`` picks them); an InputError when fewer exist."""
    from erag_dagster.core.errors import InputError

    passages, queries = load_sample()
    run = load_run()
    chosen = []
    for query_id in sorted(run):
        ranking = run[query_id]
        if len(ranking) < depth:
            continue
        if query_id not in queries or any(d not in passages for d in ranking):
            raise InputError(f"{RUN_PATH}: query {query_id!r} or its documents not in the sample")
        question, golds = queries[query_id]
        chosen.append(Query(query_id, question, tuple(golds), tuple(ranking)))
        if len(chosen) == n_queries:
            return chosen
    raise InputError(
        f"{RUN_PATH}: {len(chosen)} queries have {depth} documents, {n_queries} asked for "
        "(fewer --pairs or --table2-queries, or a deeper run: --write-run)"
    )


def fixed_pairs(n_pairs: int, per_query: int) -> list[tuple[Query, str]]:
    """``n_pairs`` (query, doc id) pairs: the top ``per_query`` documents of each query in id
    order, until ``n_pairs`` are taken."""
    need = -(-n_pairs // per_query)
    pairs = [(q, d) for q in workload(per_query, need) for d in q.ranking[:per_query]]
    return pairs[:n_pairs]


# -- readers ------------------------------------------------------------------------------------


def registry_readers(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The ``readers`` entries of ``erag_dagster/registry.yaml`` named ``names`` (as written:
    the reader spec validates them)."""
    from erag_dagster.core.errors import InputError
    from erag_dagster.core.input_files import load_yaml

    readers = (load_yaml(REGISTRY_PATH) or {}).get("readers") or {}
    unknown = [n for n in names if n not in readers]
    if unknown:
        raise InputError(
            f"{REGISTRY_PATH}: no reader {unknown[0]!r}; readers: {', '.join(sorted(readers))}"
        )
    return {n: dict(readers[n]) for n in names}


def make_reader(name: str, config: dict[str, Any], **overrides: Any) -> Any:
    """The project's reader for one registry entry with ``overrides`` (device, dtype, model,
    batch_size); readers with the same weights, dtype and device share one loaded model."""
    from erag_dagster.readers.factory import reader_from_config

    return reader_from_config(name, {**config, **overrides})


def _sync(reader: Any) -> None:
    import torch

    if reader.device.type == "cuda":
        torch.cuda.synchronize(reader.device)


def _timed(reader: Any, call: Any) -> tuple[Any, float]:
    _sync(reader)
    began = time.perf_counter()
    value = call()
    _sync(reader)
    return value, time.perf_counter() - began


# -- throughput and determinism -----------------------------------------------------------------


def measure_layouts(
    name: str,
    config: dict[str, Any],
    pairs: list[tuple[Query, str]],
    batch_sizes: Sequence[int],
    dtype: str,
    log: Any,
) -> dict[str, Any]:
    """Answer ``pairs`` at every batch size in both orders (after one untimed pass at the
    largest batch size, which loads the model and warms it up): per layout the seconds, the
    answers (in pair order) and the margin-guard re-decodes; token F1 labels of the first."""
    from erag_dagster.metrics.downstream import get_downstream_metric

    passages, _ = load_sample()
    items = [(q.question, passages[d]) for q, d in pairs]
    warm = make_reader(name, config, dtype=dtype, batch_size=max(batch_sizes))
    warm.answer(items)
    layouts = []
    for size in batch_sizes:
        for order in ORDERS:
            reader = make_reader(name, config, dtype=dtype, batch_size=size)
            todo = items if order == "forward" else items[::-1]
            answers, seconds = _timed(reader, lambda r=reader, t=todo: r.answer(t))
            if order == "reversed":
                answers = answers[::-1]
            layouts.append(
                {
                    "batch_size": size,
                    "order": order,
                    "seconds": seconds,
                    "pairs_per_s": len(items) / seconds,
                    "re_decodes": reader.guard_counts["reference"],
                    "guarded": bool(reader.guarded),
                    "answers": answers,
                }
            )
            log(f"{name} {dtype} batch {size} {order}: {len(items) / seconds:.2f} pairs/s")
    metric = get_downstream_metric("f1")
    first = layouts[0]["answers"]
    labels = [metric(a, q.golds) for a, (q, _) in zip(first, pairs, strict=True)]
    equal_all = sum(len({lay["answers"][i] for lay in layouts}) == 1 for i in range(len(items)))
    return {
        "reader": name,
        "dtype": dtype,
        "device": str(warm.device),
        "pairs": len(items),
        "layouts": layouts,
        "equal_in_every_layout": equal_all,
        "labels_f1": labels,
        "mean_label_f1": statistics.fmean(labels) if labels else 0.0,
    }


def throughput_summary(run: dict[str, Any]) -> dict[str, Any]:
    """Pairs/s per batch size (median of the two orders), batch 1 and the best batch size."""
    sizes = sorted({lay["batch_size"] for lay in run["layouts"]})
    rate = {
        s: statistics.median(lay["pairs_per_s"] for lay in run["layouts"] if lay["batch_size"] == s)
        for s in sizes
    }
    best = max(sizes, key=lambda s: rate[s])
    return {"per_batch_size": rate, "batch_1": rate.get(1), "best_batch": best, "best": rate[best]}


# -- Table 2 ------------------------------------------------------------------------------------


def round_orders(cells: Sequence[Any], rounds: int) -> list[list[Any]]:
    """Round ``r`` rotates the cells by ``r`` and reverses odd rounds (the rule of
    ``meta/efficiency.round_orders``, which this polars-free script cannot import)."""
    cells = list(cells)
    orders = []
    for r in range(rounds):
        shift = r % len(cells) if cells else 0
        order = cells[shift:] + cells[:shift]
        orders.append(order[::-1] if r % 2 else order)
    return orders


def _run_mode(reader: Any, mode: str, k: int, items: list[tuple[str, list[str]]]) -> None:
    """One cell's work, as ``meta/efficiency._time_mode``: one k-document prompt per query
    (end-to-end) or one answer per (query, document) pair."""
    for question, passages in items:
        top = passages[:k]
        if mode == "end_to_end":
            reader.answer_with_context(question, top)
        else:
            reader.answer([(question, p) for p in top])


def measure_table2(
    name: str,
    config: dict[str, Any],
    queries: list[Query],
    ks: Sequence[int],
    rounds: int,
    log: Any,
) -> list[dict[str, Any]]:
    """Every (mode, k) cell timed in ``rounds`` alternating rounds in this process (the model
    loaded and warmed up first); per cell the median seconds with min/max and the median peak
    memory: ``torch.cuda.max_memory_allocated`` since the cell began (MiB, the loaded model
    included) and the part above what was allocated when it began; None on CPU."""
    import torch

    passages, _ = load_sample()
    items = [(q.question, [passages[d] for d in q.ranking[: max(ks)]]) for q in queries]
    batch = {"end_to_end": 1, "erag_query_batch": None, "erag_doc_batch": 1}
    make_reader(name, config, batch_size=1).answer([(items[0][0], items[0][1][0])])
    timings: dict[tuple[str, int], list[tuple[float, float | None, float | None]]] = {}
    for order in round_orders([(m, k) for k in ks for m in MODES], rounds):
        for mode, k in order:
            reader = make_reader(name, config, batch_size=batch[mode] or k)
            cuda = reader.device.type == "cuda"
            if cuda:
                torch.cuda.synchronize(reader.device)
                base = torch.cuda.memory_allocated(reader.device)
                torch.cuda.reset_peak_memory_stats(reader.device)
            _, seconds = _timed(reader, lambda r=reader, m=mode, k=k: _run_mode(r, m, k, items))
            peak = torch.cuda.max_memory_allocated(reader.device) if cuda else None
            above = None if peak is None else (peak - base) / 2**20
            timings.setdefault((mode, k), []).append(
                (seconds, None if peak is None else peak / 2**20, above)
            )
            log(f"table2 {mode} k={k}: {seconds:.2f} s")
    rows = []
    for (mode, k), cell in timings.items():
        seconds = [c[0] for c in cell]
        peaks = [c[1] for c in cell if c[1] is not None]
        aboves = [c[2] for c in cell if c[2] is not None]
        rows.append(
            {
                "reader": name,
                "dtype": config.get("dtype", "auto"),
                "k": k,
                "mode": mode,
                "queries": len(items),
                "rounds": len(cell),
                "seconds": statistics.median(seconds),
                "seconds_min": min(seconds),
                "seconds_max": max(seconds),
                "peak_mib": statistics.median(peaks) if peaks else None,
                "peak_above_model_mib": statistics.median(aboves) if aboves else None,
            }
        )
    for row in rows:
        e2e = next(r for r in rows if r["k"] == row["k"] and r["mode"] == "end_to_end")
        row["speedup_vs_end_to_end"] = e2e["seconds"] / row["seconds"]
        row["memory_ratio_vs_end_to_end"] = _ratio(e2e["peak_mib"], row["peak_mib"])
        row["working_memory_ratio_vs_end_to_end"] = _ratio(
            e2e["peak_above_model_mib"], row["peak_above_model_mib"]
        )
    return sorted(rows, key=lambda r: (r["k"], MODES.index(r["mode"])))


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return None if top is None or bottom is None or bottom <= 0 else top / bottom


# -- the one table ------------------------------------------------------------------------------


def table_rows(result: dict[str, Any], compare: dict[str, Any] | None) -> list[dict[str, str]]:
    """The printed table: one row per figure, ``section, reader, dtype, what, value, compare``
    (``compare``: the other machine's figure from ``--compare``, or the paper's ratios)."""
    rows: list[dict[str, str]] = []
    other = _compare_index(compare)
    for run in result.get("runs", []):
        reader, dtype, n = run["reader"], run["dtype"], run["pairs"]
        t = throughput_summary(run)
        theirs = other.get((reader, dtype))
        their_t = throughput_summary(theirs) if theirs else None
        label = f"[{theirs['device']}]" if theirs else ""
        rows.append(
            _row("throughput", reader, dtype, f"pairs/s, batch 1 ({n} pairs)",
                 f"{t['batch_1']:.2f}", f"{their_t['batch_1']:.2f} {label}" if their_t else "")
        )  # fmt: skip
        rows.append(
            _row("throughput", reader, dtype, f"pairs/s, best batch ({t['best_batch']})",
                 f"{t['best']:.2f}",
                 f"{their_t['best']:.2f} at {their_t['best_batch']} {label}" if their_t else "")
        )  # fmt: skip
        layouts = run["layouts"]
        sizes = "/".join(str(s) for s in sorted({lay["batch_size"] for lay in layouts}))
        re_decodes = sum(lay["re_decodes"] for lay in layouts)
        guard = f"{re_decodes} re-decodes" if layouts[0]["guarded"] else "no guard"
        same = ""
        if theirs and len(theirs["layouts"]) and theirs["pairs"] == n:
            equal = sum(
                a == b
                for a, b in zip(layouts[0]["answers"], theirs["layouts"][0]["answers"], strict=True)
            )
            same = f"{equal}/{n} equal to {label}"
        rows.append(
            _row("determinism", reader, dtype,
                 f"answers equal, batch {sizes} x 2 orders",
                 f"{run['equal_in_every_layout']}/{n} ({guard})", same)
        )  # fmt: skip
    table2 = result.get("table2") or []
    for row in table2:
        value = f"{row['seconds']:.2f} s [{row['seconds_min']:.2f}, {row['seconds_max']:.2f}]"
        if row["peak_mib"] is not None:
            value += f", {row['peak_mib']:.0f} MiB (+{row['peak_above_model_mib']:.0f})"
        ratio = f"e2e/this: time {row['speedup_vs_end_to_end']:.2f}x"
        if row["memory_ratio_vs_end_to_end"] is not None:
            ratio += f", memory {row['memory_ratio_vs_end_to_end']:.2f}x"
            ratio += f" (+part {row['working_memory_ratio_vs_end_to_end']:.2f}x)"
        if row["mode"] == "end_to_end":
            ratio = ""
        what = f"k={row['k']} {row['mode']} ({row['queries']} q, {row['rounds']} rounds)"
        rows.append(_row("table2", row["reader"], row["dtype"], what, value, ratio))
    if table2:
        paper = (
            f"{PAPER['speedup']}x faster on average, up to {PAPER['memory_ratio_max']:.0f}x "
            "less GPU memory"
        )
        rows.append(_row("table2", "paper", "", "eRAG vs end-to-end", paper, PAPER["source"]))
    return rows


def _row(section: str, reader: str, dtype: str, what: str, value: str, other: str) -> dict:
    return {
        "section": section,
        "reader": reader,
        "dtype": dtype,
        "what": what,
        "value": value,
        "compare": other,
    }


def _compare_index(compare: dict[str, Any] | None) -> dict[tuple[str, str], dict[str, Any]]:
    if not compare:
        return {}
    return {(run["reader"], run["dtype"]): run for run in compare.get("runs", [])}


def format_rows(rows: list[dict[str, str]]) -> str:
    """Left-aligned columns separated by two spaces, a header line and a rule."""
    if not rows:
        return "(no rows)"
    columns = list(rows[0])
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(width[c]) for c in columns).rstrip()]
    lines.append("  ".join("-" * width[c] for c in columns))
    lines += ["  ".join(r[c].ljust(width[c]) for c in columns).rstrip() for r in rows]
    return "\n".join(lines)


def environment(device: str) -> dict[str, Any]:
    """What ran the check: Python, torch, transformers, the device and CUDA's float32 settings."""
    import torch
    import transformers

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": device,
        "cpu_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
        env["matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        env["cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
    return env


def write_json(path: Path | None, result: dict[str, Any]) -> None:
    """``result`` as JSON at ``path`` (atomically: a temporary file renamed), after every
    section, so a run cut short still leaves what it measured."""
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


def load_compare(path: Path, pairs: list[tuple[Query, str]]) -> dict[str, Any]:
    """An earlier ``--json`` of this script (another machine), checked to hold the same pairs."""
    from erag_dagster.core.errors import InputError
    from erag_dagster.core.input_files import load_json

    data = load_json(path)
    if not isinstance(data, dict) or data.get("bench") != "gpu_check":
        raise InputError(f"{path}: not a --json file of bench/gpu_check.py")
    mine = [[q.query_id, d] for q, d in pairs]
    if data.get("pairs") != mine:
        raise InputError(f"{path}: its pairs differ from this run's (use the same --pairs)")
    return data


# -- the command --------------------------------------------------------------------------------


def _ints(text: str, flag: str) -> list[int]:
    from erag_dagster.core.errors import InputError

    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise InputError(f"{flag} must list integers >= 1, got {text!r}")
    return values


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--readers", default=",".join(DEFAULT_READERS), help="registry readers")
    p.add_argument("--pairs", type=int, default=64, help="fixed (question, document) pairs")
    p.add_argument("--per-query", type=int, default=8, help="documents per question in pairs")
    p.add_argument("--batch-sizes", default="1,16,64")
    p.add_argument("--dtypes", default=",".join(DTYPES), help="float32,bfloat16 (determinism)")
    p.add_argument("--ks", default="10,50", help="Table 2 depths")
    p.add_argument("--table2-queries", type=int, default=5)
    p.add_argument("--table2-reader", help="Table 2's reader (default: the first of --readers)")
    p.add_argument("--rounds", type=int, default=3, help="alternating Table 2 rounds")
    p.add_argument("--max-new-tokens", type=int, help="override the readers' (dry runs)")
    p.add_argument("--sections", default="throughput,table2", help="throughput (with "
                   "determinism) and/or table2")  # fmt: skip
    p.add_argument("--compare", type=Path, help="an earlier --json of this script to compare")
    p.add_argument("--json", type=Path, help="also write every figure as JSON to PATH")
    p.add_argument("--pack", type=Path, help="write the readers' weights pack into DIR; exit")
    p.add_argument("--chunk-mib", type=int, default=56, help="pack chunk size (MiB)")
    p.add_argument("--pack-dir", type=Path, help="run the readers from this pack (device)")
    p.add_argument("--status", action="store_true", help="with --pack-dir: chunks so far; exit")
    p.add_argument("--write-run", action="store_true", help=f"rewrite {RUN_PATH.name}; exit")
    p.add_argument("--debug", action="store_true", help="tracebacks instead of one line")
    return p.parse_args(argv)


def run_check(args: argparse.Namespace) -> int:
    """The check itself (argument parsing and one-line errors are :func:`main`'s)."""
    from erag_dagster.core.devices import resolve_device
    from erag_dagster.core.errors import InputError

    names = [n.strip() for n in args.readers.split(",") if n.strip()]
    configs = registry_readers(names)
    if args.pack is not None:
        import gpu_pack

        manifest = gpu_pack.write_pack(args.pack, configs, args.chunk_mib)
        print(gpu_pack.plan_text(args.pack, manifest), end="")
        return 0
    if args.write_run:
        write_run()
        print(f"wrote {RUN_PATH}")
        return 0
    checks: dict[str, Any] = {}
    if args.pack_dir is not None:
        import gpu_pack

        if args.status:
            print("\n".join(gpu_pack.pack_summary(args.pack_dir, names)))
            return 0
        manifest = gpu_pack.load_manifest(args.pack_dir)
        for name in names:
            folder, checks[name] = gpu_pack.unpack_reader(args.pack_dir, name, manifest)
            configs[name]["model"] = str(folder.resolve())
            print(f"{name}: unpacked, checks {json.dumps(checks[name])}", file=sys.stderr)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    if sections - {"throughput", "table2"}:
        raise InputError(f"--sections: unknown {sorted(sections - {'throughput', 'table2'})}")
    sizes = _ints(args.batch_sizes, "--batch-sizes")
    if 1 not in sizes:
        raise InputError(
            f"--batch-sizes must include 1 (the batch-1 row), got {args.batch_sizes!r}"
        )
    ks = _ints(args.ks, "--ks")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if args.pairs < 1 or args.per_query < 1 or args.table2_queries < 1 or args.rounds < 1:
        raise InputError("--pairs, --per-query, --table2-queries and --rounds must be >= 1")
    device = str(resolve_device(args.device))
    for config in configs.values():
        config["device"] = device
        if args.max_new_tokens is not None:
            config["max_new_tokens"] = args.max_new_tokens
    pairs = fixed_pairs(args.pairs, args.per_query)
    compare = load_compare(args.compare, pairs) if args.compare else None
    result: dict[str, Any] = {
        "bench": "gpu_check",
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "environment": environment(device),
        "pack_checks": checks,
        "pairs": [[q.query_id, d] for q, d in pairs],
        "runs": [],
        "table2": [],
    }

    def log(message: str) -> None:
        print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    if "throughput" in sections:
        for name in names:
            for dtype in dtypes:
                run = measure_layouts(name, configs[name], pairs, sizes, dtype, log)
                result["runs"].append(run)
                write_json(args.json, result)
    if "table2" in sections:
        name = args.table2_reader or names[0]
        if name not in configs:
            raise InputError(f"--table2-reader {name!r} is not one of --readers")
        queries = workload(max(ks), args.table2_queries)
        result["table2"] = measure_table2(name, configs[name], queries, ks, args.rounds, log)
    rows = table_rows(result, compare)
    result["tables"] = {"rows": rows}
    write_json(args.json, result)
    env = result["environment"]
    print(
        f"bench/gpu_check.py on {env.get('gpu', 'CPU')} ({device}; torch {env['torch']}, "
        f"transformers {env['transformers']}, python {env['python']})"
    )
    print(format_rows(rows))
    return 0


def write_run(path: Path = RUN_PATH) -> None:
    """Write ``path`` (default :data:`RUN_PATH`): the project's BM25 (registry ``bm25``, through
    ``run_retriever``, as ``bench/efficiency.py``) top-``RUN_DEPTH`` of the first
    ``RUN_QUERIES`` sample queries by id that have that many. Needs the full environment."""
    import polars as pl

    from erag_dagster.config.registry import load_registry
    from erag_dagster.data.loaders import load_dataset
    from erag_dagster.evaluation.retrievers import run_retriever

    ds = load_dataset("sample")
    run = run_retriever(load_registry(), "bm25", ds.corpus, ds.queries, RUN_DEPTH)
    deep = run.group_by("query_id").agg(pl.len().alias("n")).filter(pl.col("n") >= RUN_DEPTH)
    chosen = deep.sort("query_id").head(RUN_QUERIES).get_column("query_id")
    rows = run.filter(pl.col("query_id").is_in(chosen.to_list())).sort("query_id", "rank")
    lines = [
        f"{q} Q0 {d} {r} {s:.4f} bm25"
        for q, d, r, s in rows.select("query_id", "doc_id", "rank", "score").iter_rows()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run, and turn the project's errors into one line and their exit code."""
    args = parse_args(argv)
    _bootstrap(args.pack_dir)
    from erag_dagster.core.errors import EnvironmentFault, InputError

    try:
        return run_check(args)
    except (InputError, EnvironmentFault) as exc:
        if args.debug:
            raise
        print(f"gpu_check: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
