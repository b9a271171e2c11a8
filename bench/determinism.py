"""Determinism of reader answers across batch layouts, thread counts and CPU kernel paths.

For one packaged reader in float32 it takes ``--pairs`` (question, passage) pairs of the embedded
sample (each question with its own paragraph and the next paragraphs of its article) and, in one
child process per *machine profile*, answers them in several *layouts*:

* profiles: the native kernels with 2 and with 1 torch threads, and this CPU made to look older
  by the libraries' own dispatch switches — ``ATEN_CPU_CAPABILITY=avx2`` (PyTorch's vectorised
  kernels), ``MKL_ENABLE_INSTRUCTIONS=AVX2`` (MKL's GEMM), ``ONEDNN_MAX_CPU_ISA=AVX2`` (oneDNN)
  — and the same at ``default`` / ``SSE4_2``: the kernels an AVX2-only or an older x86-64 CPU
  runs. (A different CPU model is not simulated beyond that; the stored-answer test
  ``tests/test_determinism.py`` is what catches one.)
* layouts: batch 1 without a shared prefix; the default batch of 16 with and without the
  shared prefix; the pairs shuffled (other neighbours in each batch); each with the margin guard
  (:mod:`erag_dagster.readers.exact_greedy`) on, and batch 1 / batch 16 also with it off.

It prints, per profile: the largest float32 logit error against the float64 model on the
answer steps (teacher-forced, batch 16 and batch 1, ``max |logit32 - logit64|`` over the whole
vocabulary), how many answers differ between layouts with the guard off, with it on, and the
share of rows the guard sent to float64; then, across profiles, how many guarded answers differ
from the first profile's (the claim: 0) and the time of guarded vs unguarded batch-16 answers.

    python bench/determinism.py [--model packaged:smollm2-135m-instruct] [--pairs 60]
                                [--profiles native,threads1,avx2,sse] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from benchjson import add_json_argument, text_stream, write_json

PROFILES: dict[str, dict[str, str]] = {
    "native": {"ERAG_TORCH_THREADS": "2"},
    "threads1": {"ERAG_TORCH_THREADS": "1"},
    "avx2": {
        "ERAG_TORCH_THREADS": "2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    },
    "sse": {
        "ERAG_TORCH_THREADS": "2",
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },
}


def sample_pairs(n: int) -> list[tuple[str, str]]:
    """``n`` (question, passage) pairs of the embedded sample: each question (every 4th, file
    order) with its own paragraph and the next two of its article."""
    from erag_dagster.data.loaders import load_dataset
    from erag_dagster.readers.prompts import reader_passage

    ds = load_dataset("sample")
    passages = {
        d: reader_passage(t, x) for d, t, x in ds.corpus.select("doc_id", "title", "text").rows()
    }
    order = list(passages)
    question = dict(ds.queries.select("query_id", "question").rows())
    pairs: list[tuple[str, str]] = []
    for qid, doc in ds.qrels.select("query_id", "doc_id").rows()[::4]:
        i = order.index(doc)
        for other in order[i : i + 3]:
            pairs.append((question[qid], passages[other]))
    return pairs[:n]


def child(model: str, n: int) -> dict:
    """One profile: logit errors, answers per layout (guard on / off), guard counts, seconds."""
    import torch

    from erag_dagster.readers.prefix_sharing import decoder_inputs
    from erag_dagster.readers.spec import ReaderSpec
    from erag_dagster.readers.transformers_reader import TransformersReader

    pairs = sample_pairs(n)

    def reader(batch: int, share: bool) -> TransformersReader:
        config = {"model": model, "dtype": "float32", "batch_size": batch, "share_prefix": share}
        spec = ReaderSpec.from_dict(config, name="r")
        return TransformersReader(spec)

    out: dict = {"answers": {}, "seconds": {}, "guard": {}}
    shuffled = list(range(len(pairs)))
    random.Random(7).shuffle(shuffled)
    layouts = [("b1", 1, False, False), ("b16_shared", 16, True, False),
               ("b16_plain", 16, False, False), ("b16_shuffled", 16, True, True)]  # fmt: skip
    for guard in (True, False):
        for name, batch, share, shuffle in layouts:
            if not guard and name not in ("b1", "b16_shared"):
                continue
            r = reader(batch, share)
            r.guard = guard
            items = [pairs[i] for i in shuffled] if shuffle else pairs
            began = time.perf_counter()
            got = r.answer(items)
            seconds = time.perf_counter() - began
            if shuffle:
                back = [""] * len(got)
                for pos, i in enumerate(shuffled):
                    back[i] = got[pos]
                got = back
            key = f"{name}{'' if guard else '_unguarded'}"
            out["answers"][key] = got
            out["seconds"][key] = seconds
            out["guard"][key] = dict(r.guard_counts)

    # float32 logit error against float64 along the float64 greedy path (teacher-forced).
    r = reader(16, False)
    loaded = r._ensure()
    limit = r._input_limit(None)
    prompts = [r._fitted_ids(q, [p], limit) for q, p in pairs]
    from erag_dagster.readers.exact_greedy import reference_model
    from erag_dagster.readers.loading import generation_config

    twin = reference_model(loaded.model)
    eos = loaded.tokenizer.eos_token_id
    config = generation_config(r.spec.max_new_tokens, loaded.tokenizer.pad_token_id, [eos])
    errors = {"b1": 0.0, "b16": 0.0}
    with torch.inference_mode():
        paths = []
        for p in prompts:
            ids = torch.tensor([p])
            new = twin.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                generation_config=config)[0, len(p):].tolist()  # fmt: skip
            paths.append((p, new))
        for batch, key in ((1, "b1"), (16, "b16")):
            for start in range(0, len(paths), batch):
                chunk = paths[start : start + batch]
                rows = [p + a for p, a in chunk]
                width = max(map(len, rows))
                ids = torch.full((len(rows), width), loaded.tokenizer.pad_token_id)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for i, row in enumerate(rows):
                    ids[i, width - len(row) :] = torch.tensor(row)
                    mask[i, width - len(row) :] = 1
                accepts = {"position_ids": None}
                kw = {"attention_mask": mask, **decoder_inputs(loaded, ids, mask, None, accepts)}
                l32 = loaded.model(**kw).logits.double()
                l64 = twin(**kw).logits
                for i, (_prompt, a) in enumerate(chunk):
                    lo = width - len(a) - 1  # logits that chose the answer tokens
                    diff = (l32[i, lo : width - 1] - l64[i, lo : width - 1]).abs().max()
                    errors[key] = max(errors[key], float(diff))
    out["logit_error"] = errors
    out["capability"] = torch.backends.cpu.get_cpu_capability()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="packaged:smollm2-135m-instruct")
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_json_argument(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.pairs)))
        return
    results = {}
    for name in args.profiles.split(","):
        env = {**os.environ, **PROFILES[name]}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child",
               "--model", args.model, "--pairs", str(args.pairs)]  # fmt: skip
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"profile {name}: done", file=sys.stderr, flush=True)
    first = next(iter(results.values()))["answers"]["b1"]
    rows = []
    for name, res in results.items():
        answers = res["answers"]
        guarded = [k for k in answers if not k.endswith("_unguarded")]
        rows.append({
            "profile": name,
            "capability": res["capability"],
            "max logit error b1": res["logit_error"]["b1"],
            "max logit error b16": res["logit_error"]["b16"],
            "unguarded b1 vs b16 differ": sum(
                a != b for a, b in zip(answers["b1_unguarded"], answers["b16_shared_unguarded"],
                                       strict=True)),
            "guarded layouts differ": sum(
                len({answers[k][i] for k in guarded}) > 1 for i in range(len(first))),
            "guarded vs first profile differ": sum(
                a != b for a, b in zip(answers["b16_shared"], first, strict=True)),
            "unguarded vs first profile differ": sum(
                a != b for a, b in zip(answers["b16_shared_unguarded"], first, strict=True)),
            "rows to float64": res["guard"]["b16_shared"]["reference"],
            "rows": res["guard"]["b16_shared"]["rows"],
            "guarded/unguarded time b16": res["seconds"]["b16_shared"]
            / res["seconds"]["b16_shared_unguarded"],
        })  # fmt: skip
    out = text_stream(args)
    for row in rows:
        print(" | ".join(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}"
                         for k, v in row.items()), file=out)  # fmt: skip
    write_json(args, "determinism", {"profiles": rows})


if __name__ == "__main__":
    main()
