"""Labelling throughput: the project's labeller vs the reference eRAG loop, same reader, same pairs.

On SQuAD v1.1 dev (shared test data) it builds two "retrievers" over the same queries — run A
(each query's own paragraph plus other paragraphs of its article) and run B (half of A's pairs
plus new ones) — and, in one process with one loaded reader, measures:

* pairs/s of ``label_run`` (fresh label store) vs the reference ``erag.eval`` (erag 0.0.1),
  whose loop calls the text generator once per rank position with one document per query;
  the generator here is the same reader's ``answer`` (so both sides batch the same way
  *within* a call; the difference is the loop, length sorting and the store);
* the second retriever: cache hit rate and wall time (reference: everything again), and a
  third run C fusing A and B (like the registry's hybrid retriever): all its pairs are stored;
* achieved GFLOP/s ≈ 2 × parameters × tokens processed / reader time, next to this machine's
  torch matmul GFLOP/s in the reader's dtype and thread count, measured in the same run;
* peak RSS (``resource.getrusage``);
* likelihood labels (:mod:`erag_dagster.labels.likelihood`: teacher-forced gold probability,
  prefill only) on the same run-A pairs, timed in the same alternating rounds: pairs/s next to
  the labeller's generation labels, and their ratio (target >= 3x); with ``--likelihood-only``
  also generation decoding every answer to ``max_new_tokens`` (the reader's line stop off) and
  generation with 1 new token (the prompts' prefill: a floor for any label that reads them).

    python bench/labels.py [--pairs 96] [--depth 4] [--dtype auto] [--share-prefix auto]
                           [--threads N] [--batch 16] [--rounds 2] [--quick]
                           [--likelihood-only] [--json PATH]

``--quick`` is a smoke run (8 pairs, one round); its ratios mean little. ``--json PATH`` also
writes both tables as JSON rows (``-`` = stdout, the tables then go to stderr): ``{"bench":
"labels", "settings": {...}, "tables": {"methods": [{"method", "pairs", "generated", "seconds",
"pairs/s", "tokens", "GFLOP/s"}, ...], "summary": [{"measure", "value"}, ...]}}`` (see
``bench/benchjson.py``).

Run A is timed ``--rounds`` times alternating which side goes first (best time of each kept),
and the matmul rate is measured just before and just after those rounds: on a shared machine
the speed drifts by more than the differences measured.

Targets: ≥ 2× the reference loop on CPU, ≥ half the matmul rate. Numbers are printed as
measured; on a shared 2-core machine they are noisy.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import torch
from benchjson import add_json_argument, text_stream, write_json

from erag_dagster.data.loaders import load_dataset
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.likelihood import likelihood_labels
from erag_dagster.labels.store import LabelStore
from erag_dagster.metrics.downstream import get_downstream_metric
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.prompts import reader_passage
from erag_dagster.readers.transformers_reader import TransformersReader
from erag_dagster.reports.tables import format_table

SQUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad-v1.1-dev"


def load_squad(
    n_queries: int, depth: int, path: Path
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``corpus, queries, run_a, run_b`` for ``n_queries`` questions (the first question of each
    paragraph, unique question texts, file order), ``depth`` documents each.

    The data comes from the project's loader (``load_dataset("squad:PATH")``: doc ids
    ``<article title>_<paragraph index>``, each question's qrel is its own paragraph)."""
    ds = load_dataset(f"squad:{path}")
    chosen = (
        ds.qrels.join(ds.queries, on="query_id", how="left", maintain_order="left")
        .unique(subset="doc_id", keep="first", maintain_order=True)  # first question per paragraph
        .unique(subset="question", keep="first", maintain_order=True)
        .head(n_queries)
    )
    by_article: dict[str, list[str]] = {}
    for doc_id in ds.corpus.get_column("doc_id").to_list():
        by_article.setdefault(doc_id.rsplit("_", 1)[0], []).append(doc_id)
    run_a, run_b = [], []
    for qid, own in chosen.select("query_id", "doc_id").rows():
        others = [d for d in by_article[own.rsplit("_", 1)[0]] if d != own]
        list_a = [own, *others[: depth - 1]]
        # run B: half of A's documents (reordered) and new ones further down the article
        keep = list_a[: depth // 2][::-1]
        new = [d for d in others[depth - 1 :] if d not in list_a][: depth - len(keep)]
        list_b = keep + new
        run_a += [(qid, d, r) for r, d in enumerate(list_a, start=1)]
        run_b += [(qid, d, r) for r, d in enumerate(list_b, start=1)]
    queries = ds.queries.join(chosen.select("query_id"), on="query_id", how="semi")
    queries = chosen.select("query_id").join(queries, on="query_id", how="left")
    schema = {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64}
    frame_a = pl.DataFrame(run_a, schema=schema, orient="row").with_columns(score=-pl.col("rank"))
    frame_b = pl.DataFrame(run_b, schema=schema, orient="row").with_columns(score=-pl.col("rank"))
    return ds.corpus, queries, frame_a, frame_b


def fuse(run_a: pl.DataFrame, run_b: pl.DataFrame, depth: int) -> pl.DataFrame:
    """Run C: reciprocal rank fusion (k=60) of A and B cut to ``depth`` — like the registry's
    hybrid retriever, whose top documents come from the runs it fuses."""
    both = pl.concat([run_a.select("query_id", "doc_id", "rank"), run_b.select(run_a.columns[:3])])
    return (
        both.group_by("query_id", "doc_id")
        .agg((1.0 / (60 + pl.col("rank"))).sum().alias("score"))
        .sort(["query_id", "score", "doc_id"], descending=[False, True, False])
        .with_columns(pl.int_range(1, pl.len() + 1).over("query_id").alias("rank"))
        .filter(pl.col("rank") <= depth)
        .select("query_id", "doc_id", "rank", "score")
    )


def reference_erag(
    reader: TransformersReader,
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    metric: str,
    single_input: bool = False,
) -> dict[tuple[str, str], str]:
    """Drive ``erag.eval`` (the reference loop) with ``reader.answer`` as its text generator;
    returns the answers it produced, keyed by (question, passage).

    ``single_input=True`` wraps a one-pair generator with ``erag.utils.batchify_text_generator``,
    the path the reference README documents for a generator that answers one input at a time;
    otherwise each rank position's dict is answered in one batched call (the best case for the
    reference loop)."""
    import erag
    from erag.utils import batchify_text_generator

    passages = {
        d: reader_passage(t, x) for d, t, x in corpus.select("doc_id", "title", "text").rows()
    }
    question_of = dict(queries.select("query_id", "question").rows())
    golds_of = {question_of[q]: g for q, g in queries.select("query_id", "answers").rows()}
    retrieval: dict[str, list[str]] = {}
    for qid, doc_id, _rank in (
        run.sort("query_id", "rank").select("query_id", "doc_id", "rank").rows()
    ):
        retrieval.setdefault(question_of[qid], []).append(passages[doc_id])
    score = get_downstream_metric(metric)
    produced: dict[tuple[str, str], str] = {}

    def text_generator(inputs: dict[str, list[str]]) -> dict[str, str]:
        items = [(question, docs[0]) for question, docs in inputs.items()]
        answers = reader.answer(items)
        produced.update(zip(items, answers, strict=True))
        return {question: a for (question, _), a in zip(items, answers, strict=True)}

    def one_input(question: str, docs: list[str]) -> str:
        answer = reader.answer([(question, docs[0])])[0]
        produced[(question, docs[0])] = answer
        return answer

    def downstream(generated: dict[str, str], expected: dict[str, list[str]]) -> dict[str, float]:
        return {q: score(generated[q], expected[q]) for q in generated}

    expected = {q: golds_of[q] for q in retrieval}
    generator = batchify_text_generator(one_input) if single_input else text_generator
    erag.eval(retrieval, expected, generator, downstream, {"P_1"})
    return produced


def matmul_gflops(dtype: torch.dtype, threads: int, m: int, k: int, n: int) -> float:
    """Best-of GFLOP/s of ``(m×k) @ (k×n)`` in ``dtype`` with ``threads`` torch threads."""
    torch.set_num_threads(threads)
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    with torch.inference_mode():
        for _ in range(3):
            a @ b
        best = 0.0
        for _ in range(5):
            reps, began = 0, time.perf_counter()
            while time.perf_counter() - began < 0.3:
                a @ b
                reps += 1
            best = max(best, 2.0 * m * k * n * reps / (time.perf_counter() - began) / 1e9)
    return best


def phase(reader: TransformersReader, fn) -> tuple[object, float, int]:
    """Run ``fn``; return its value, wall seconds, and tokens the reader processed."""
    reader.reset_timings()
    began = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - began
    return value, seconds, sum(t.tokens for t in reader.timings)


def likelihood_vs_generation(args, reader, run, queries, corpus) -> int:
    """Generation labels (``label_run``, fresh store) vs likelihood labels on the same pairs, in
    ``--rounds`` alternating rounds (best of each side), next to generation decoding every answer
    to ``max_new_tokens`` and generation with 1 new token (its prompt prefill: no label that
    reads the prompt can cost less); prints the rows and the ratios."""
    full = "generation labels, decoding to max_new_tokens"
    prefill = "generation labels' prefill (1 new token)"
    best = {
        "generation labels (label_run)": float("inf"),
        full: float("inf"),
        prefill: float("inf"),
        "likelihood labels": float("inf"),
    }
    spec = reader.spec.to_dict()
    readers = {
        # the same loaded model (stop_at_line_end is not hashed), every answer to the end
        full: reader_from_config("bench", {**spec, "stop_at_line_end": False}),
        # the same prompts, one generated token: what any prefill-only label must spend at least
        prefill: reader_from_config("bench", {**spec, "max_new_tokens": 1}),
    }
    tokens: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            sides = list(best) if r % 2 == 0 else list(best)[::-1]
            for i, side in enumerate(sides):
                store = LabelStore(Path(tmp) / f"{r}-{i}.sqlite")
                work = label_run if side.startswith("generation") else likelihood_labels
                who = readers.get(side, reader)
                _, seconds, used = phase(
                    who,
                    lambda w=work, s=store, m=who: w(run, queries, corpus, m, args.metric, s),
                )
                if seconds < best[side]:
                    best[side], tokens[side] = seconds, used
    table = pl.DataFrame(
        {
            "method": list(best),
            "pairs": [run.height] * len(best),
            "seconds": list(best.values()),
            "pairs/s": [run.height / s for s in best.values()],
            "tokens": [tokens[m] for m in best],
        }
    )
    like = best["likelihood labels"]
    summary = pl.DataFrame(
        {
            "measure": [
                "likelihood / generation labels, pairs/s (target >= 3)",
                "likelihood / generation decoding to max_new_tokens, pairs/s",
                "generation: stopping at the line end / decoding to the end, pairs/s",
                "generation labels / their prefill, time (the most prefill-only labels can gain)",
            ],
            "value": [
                best["generation labels (label_run)"] / like,
                best[full] / like,
                best[full] / best["generation labels (label_run)"],
                best["generation labels (label_run)"] / best[prefill],
            ],
        }
    )
    out = text_stream(args)
    print(
        f"\nSQuAD v1.1 dev: {queries.height} queries x {args.depth} docs; reader {reader.dtype}, "
        f"{reader.spec.num_threads} threads, batch {args.batch}; best of {args.rounds} "
        "alternating rounds",
        file=out,
    )
    print(format_table(table, floatfmt=".2f"), file=out)
    print(format_table(summary, floatfmt=".2f"), file=out)
    write_json(args, "labels", {"likelihood": table, "summary": summary})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=96, help="pairs in run A (default 96)")
    parser.add_argument("--depth", type=int, default=4, help="documents per query (default 4)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument(
        "--share-prefix",
        default="auto",
        choices=("auto", "true", "false"),
        help="the reader's share_prefix (auto: float32 only)",
    )
    parser.add_argument("--threads", type=int, default=0, help="0: $ERAG_TORCH_THREADS or 2")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--metric", default="em")
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternating timings of run A (best kept)"
    )
    parser.add_argument("--squad", type=Path, default=SQUAD / "dev-v1.1.json.zip")
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 pairs, one round")
    parser.add_argument(
        "--likelihood-only",
        action="store_true",
        help="time only generation vs likelihood labels on run A (no reference loop)",
    )
    add_json_argument(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.pairs, args.rounds = 8, 1
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")

    n_queries = max(1, args.pairs // args.depth)
    corpus, queries, run_a, run_b = load_squad(n_queries, args.depth, args.squad)
    run_c = fuse(run_a, run_b, args.depth)
    share = {"true": True, "false": False}.get(args.share_prefix, "auto")
    config: dict[str, object] = {
        "dtype": args.dtype,
        "batch_size": args.batch,
        "share_prefix": share,
    }
    if args.threads:
        config["num_threads"] = args.threads
    reader = reader_from_config("bench", config)
    began = time.perf_counter()
    reader.load()
    load_s = time.perf_counter() - began  # includes transformers' lazy imports
    reader.close()
    began = time.perf_counter()
    reader.load()
    reload_s = time.perf_counter() - began
    rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    params = reader.num_parameters
    threads = reader.spec.num_threads
    print(
        f"reader {reader.short_fingerprint}: {params / 1e6:.1f}M params, {reader.dtype}, "
        f"{threads} threads, batch {args.batch}, device {reader.device}; load {load_s:.2f} s; "
        f"run A {run_a.height} pairs, run B {run_b.height} pairs "
        f"({run_b.join(run_a, on=['query_id', 'doc_id'], how='semi').height} shared)",
        file=sys.stderr,
    )
    reader.answer([("Warm-up?", "Warm-up passage.")] * 2)  # oneDNN kernel set-up, not timed
    if args.likelihood_only:
        return likelihood_vs_generation(args, reader, run_a, queries, corpus)

    # The machine's speed drifts (shared cores; AMX matmul measured here varied 0.7-2.2
    # TFLOP/s between minutes), so run A is timed in alternating rounds (best of each side)
    # and the matmul rate is measured right before and right after those rounds.
    mm_before = matmul_gflops(reader.dtype, threads, 2048, 576, 1536)
    with tempfile.TemporaryDirectory() as tmp:
        ref_a_s = ours_a_s = like_a_s = float("inf")
        for r in range(args.rounds):
            sides = ["ref", "ours", "likelihood"]
            sides = sides[r % 3 :] + sides[: r % 3]  # each side leads in turn
            for side in sides:
                if side == "likelihood":
                    like_store = LabelStore(Path(tmp) / f"likelihood-{r}.sqlite")
                    _, seconds, tokens = phase(
                        reader,
                        lambda s=like_store: likelihood_labels(
                            run_a, queries, corpus, reader, args.metric, s
                        ),
                    )
                    if seconds < like_a_s:
                        like_a_s, like_a_tok = seconds, tokens
                elif side == "ref":
                    value, seconds, tokens = phase(
                        reader, lambda: reference_erag(reader, run_a, queries, corpus, args.metric)
                    )
                    if seconds < ref_a_s:
                        ref_a, ref_a_s, ref_a_tok = value, seconds, tokens
                else:
                    store = LabelStore(Path(tmp) / f"labels-{r}.sqlite")
                    value, seconds, tokens = phase(
                        reader,
                        lambda store=store: label_run(
                            run_a, queries, corpus, reader, args.metric, store
                        ),
                    )
                    if seconds < ours_a_s:
                        ours_a, ours_a_s, ours_a_tok = value, seconds, tokens
                        ours_a_padded = sum(t.padded_tokens for t in reader.timings)
                        ours_a_prompt = sum(t.prompt_tokens for t in reader.timings)
        mm_after = matmul_gflops(reader.dtype, threads, 2048, 576, 1536)
        _, single_a_s, single_a_tok = phase(
            reader,
            lambda: reference_erag(reader, run_a, queries, corpus, args.metric, single_input=True),
        )
        _, ref_b_s, ref_b_tok = phase(
            reader, lambda: reference_erag(reader, run_b, queries, corpus, args.metric)
        )
        ours_b, ours_b_s, ours_b_tok = phase(
            reader, lambda: label_run(run_b, queries, corpus, reader, args.metric, store)
        )
        _, ref_c_s, ref_c_tok = phase(
            reader, lambda: reference_erag(reader, run_c, queries, corpus, args.metric)
        )
        ours_c, ours_c_s, ours_c_tok = phase(
            reader, lambda: label_run(run_c, queries, corpus, reader, args.metric, store)
        )
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # Same answers and labels? Batches of different composition (the reference batches per rank,
    # the labeller by length) round differently in bf16, which can flip a greedy token.
    passages = {
        d: reader_passage(t, x) for d, t, x in corpus.select("doc_id", "title", "text").rows()
    }
    question_of = dict(queries.select("query_id", "question").rows())
    ours_answers = {
        (question_of[q], passages[d]): a
        for q, d, a in ours_a.labels.select("query_id", "doc_id", "answer").rows()
    }
    agree = sum(ours_answers[k] == v for k, v in ref_a.items()) / max(1, len(ref_a))
    score = get_downstream_metric(args.metric)
    golds_of = {question_of[q]: g for q, g in queries.select("query_id", "answers").rows()}
    label_agree = sum(
        score(ours_answers[k], golds_of[k[0]]) == score(v, golds_of[k[0]]) for k, v in ref_a.items()
    ) / max(1, len(ref_a))

    mm_model = (mm_before + mm_after) / 2
    mm_square = matmul_gflops(reader.dtype, threads, 1024, 1024, 1024)

    def gflops(tokens: int, seconds: float) -> float:
        return 2.0 * params * tokens / seconds / 1e9 if seconds > 0 else 0.0

    rows = [
        (
            "reference erag loop, single-input generator, run A",
            run_a.height,
            single_a_s,
            single_a_tok,
            run_a.height,
        ),
        (
            "reference erag loop, batched per rank, run A",
            run_a.height,
            ref_a_s,
            ref_a_tok,
            run_a.height,
        ),
        ("project labeller, run A", run_a.height, ours_a_s, ours_a_tok, ours_a.judged_now),
        ("likelihood labels (prefill only), run A", run_a.height, like_a_s, like_a_tok, 0),
        ("reference erag loop, run B", run_b.height, ref_b_s, ref_b_tok, run_b.height),
        ("project labeller, run B", run_b.height, ours_b_s, ours_b_tok, ours_b.judged_now),
        ("reference erag loop, run C (A+B fused)", run_c.height, ref_c_s, ref_c_tok, run_c.height),
        (
            "project labeller, run C (A+B fused)",
            run_c.height,
            ours_c_s,
            ours_c_tok,
            ours_c.judged_now,
        ),
    ]
    table = pl.DataFrame(
        {
            "method": [r[0] for r in rows],
            "pairs": [r[1] for r in rows],
            "generated": [r[4] for r in rows],
            "seconds": [r[2] for r in rows],
            "pairs/s": [r[1] / r[2] for r in rows],
            "tokens": [r[3] for r in rows],
            "GFLOP/s": [gflops(r[3], r[2]) for r in rows],
        }
    )
    out = text_stream(args)
    print(
        f"\nSQuAD v1.1 dev: {queries.height} queries x {args.depth} docs; reader {reader.dtype}, "
        f"{threads} threads, batch {args.batch}",
        file=out,
    )
    print(format_table(table, floatfmt=".2f"), file=out)
    hit_rate = ours_b.from_store / max(1, ours_b.from_store + ours_b.judged_now)
    summary = pl.DataFrame(
        {
            "measure": [
                "likelihood / generation labels, pairs/s (run A; target >= 3)",
                "speed-up run A vs the reference's single-input generator path",
                "speed-up run A (pairs/s, ours / reference batched per rank)",
                "speed-up runs A+B (wall time, reference / ours)",
                "speed-up runs A+B+C (wall time, reference / ours)",
                "run B cache hit rate (distinct pairs from the store)",
                "run C cache hit rate (distinct pairs from the store)",
                "answers equal to the reference loop (run A)",
                f"{args.metric} labels equal to the reference loop's (run A)",
                f"torch matmul GFLOP/s {reader.dtype} (2048x576 @ 576x1536), before run A",
                f"torch matmul GFLOP/s {reader.dtype} (2048x576 @ 576x1536), after run A",
                f"torch matmul GFLOP/s {reader.dtype} (1024^3)",
                "labeller GFLOP/s / model-shaped matmul GFLOP/s (run A; mean of before/after)",
                "model load seconds, first in process (incl. lazy imports)",
                "model load seconds, again (converted cache)",
                "padded positions / real prompt tokens (run A, labeller)",
                "peak RSS MiB after load",
                "peak RSS MiB overall",
            ],
            "value": [
                ours_a_s / like_a_s,
                single_a_s / ours_a_s,
                ref_a_s / ours_a_s,
                (ref_a_s + ref_b_s) / (ours_a_s + ours_b_s),
                (ref_a_s + ref_b_s + ref_c_s) / (ours_a_s + ours_b_s + ours_c_s),
                hit_rate,
                ours_c.from_store / max(1, ours_c.from_store + ours_c.judged_now),
                agree,
                label_agree,
                mm_before,
                mm_after,
                mm_square,
                gflops(ours_a_tok, ours_a_s) / mm_model,
                load_s,
                reload_s,
                ours_a_padded / max(1, ours_a_prompt),
                rss_loaded,
                rss_peak,
            ],
        }
    )
    print(format_table(summary, floatfmt=".3f"), file=out)
    print(
        f"(torch {torch.__version__}, {os.cpu_count()} CPUs visible; targets: speed-up >= 2, "
        "GFLOP/s ratio >= 0.5)",
        file=out,
    )
    write_json(args, "labels", {"methods": table, "summary": summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
