#!/usr/bin/env python3
"""One recommendation for label-set answers (yes/no, multiple choice), chosen on tuning halves
and checked on held-out halves (docs/label-methods.md, "Label-set answers: one recommendation").

Reads the folders ``scripts/measure_label_methods.py`` wrote under ``--data``
(``<set>_<half>_<reader>_<preset>/labels.parquet`` and ``end_to_end.parquet``: BM25's top 3,
``metric: accuracy``, the reader's prompt preset ``span`` or ``label``) and, per folder, computes
Table 1 through the project's own ``label_methods_table`` (Kendall tau-b of each labelling's
per-query P@3 with end-to-end accuracy, 95% percentile bootstrap CI over questions, 1000
resamples, seed 0).

**Candidates**: (preset, label method) with the label method one of :data:`CANDIDATES` — the
generated answers scored with ``accuracy`` (``eRAG``) or with answer containment (``eRAG
(contains)``), the likelihood over the label set (``eRAG_likelihood``) and its gain over the
closed-book prior (``eRAG_likelihood_gain``). References, never chosen: ``closed_book`` (the
reader's score with no document) and ``containment`` (the gold label word in the document).

**Rule** (fixed before the held-out figures were computed): on the tuning halves of the sets,
the candidate with the highest mean Kendall tau (P@3) over the sets; then, on the held-out
halves with that candidate only, a set's per-document labels are **trustworthy** when the
tau's CI lies above 0 and its point estimate is above the closed-book row's (else end-to-end
accuracy follows the reader's answer without any document as well as it follows the labels).

    python scripts/label_set_choice.py --data reproductions/data/label_sets [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.meta.correlation_report import label_methods_table

STATS = EvaluationConfig().statistics

CANDIDATES = ("eRAG", "eRAG (contains)", "eRAG_likelihood", "eRAG_likelihood_gain")
REFERENCES = ("closed_book", "containment")
METRIC = "P@3"
K = 3


def table(folder: Path) -> pl.DataFrame:
    """``method, kendall_tau, kendall_low, kendall_high`` of ``folder``'s P@3 Table 1."""
    labels = pl.read_parquet(folder / "labels.parquet")
    e2e = pl.read_parquet(folder / "end_to_end.parquet")
    frame = label_methods_table(labels, e2e, K, folder.name, STATS)
    return frame.filter(pl.col("metric") == METRIC).select(
        "method", "kendall_tau", "kendall_low", "kendall_high", "n_queries"
    )


def parse(name: str) -> tuple[str, str, str, str]:
    """``<set>_<half>_<reader>_<preset>`` → its four parts."""
    set_name, half, rest = name.split("_", 2)
    reader, preset = rest.rsplit("_", 1)
    return set_name, half, reader, preset


def cell(t: pl.DataFrame, method: str) -> dict:
    row = t.filter(pl.col("method") == method)
    if row.height == 0:
        return {"tau": math.nan, "low": math.nan, "high": math.nan}
    r = row.row(0, named=True)
    return {"tau": r["kendall_tau"], "low": r["kendall_low"], "high": r["kendall_high"],
            "queries": r["n_queries"]}  # fmt: skip


def text(c: dict) -> str:
    if math.isnan(c["tau"]):
        return "nan"
    ci = "" if math.isnan(c["low"]) else f" [{c['low']:.2f}, {c['high']:.2f}]"
    return f"{c['tau']:.2f}{ci}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    runs = {}
    for folder in sorted(p for p in args.data.iterdir() if (p / "labels.parquet").is_file()):
        runs[parse(folder.name)] = table(folder)
    sets = sorted({s for s, *_ in runs})
    out: dict = {"tuning": {}, "heldout": {}}
    scores = {}
    for (set_name, half, reader, preset), t in runs.items():
        for method in (*CANDIDATES, *REFERENCES):
            out[half].setdefault(f"{set_name}/{reader}/{preset}", {})[method] = cell(t, method)
    for (set_name, half, reader, preset), t in runs.items():
        if half != "tuning":
            continue
        for method in CANDIDATES:
            scores.setdefault((reader, preset, method), {})[set_name] = cell(t, method)["tau"]
    ranked = sorted(
        (
            (sum(v.values()) / len(v), key)
            for key, v in scores.items()
            if len(v) == len(sets) and not any(math.isnan(x) for x in v.values())
        ),
        reverse=True,
    )
    print(f"tuning halves, Kendall tau of {METRIC} with end-to-end accuracy:")
    for key, cells in sorted(out["tuning"].items()):
        print(f"  {key}: " + "; ".join(f"{m} {text(c)}" for m, c in cells.items()))
    for mean, (reader, preset, method) in ranked:
        print(f"  mean over {', '.join(sets)}: {reader} {preset:<5} {method:<22} {mean:.3f}")
    chosen = ranked[0][1] if ranked else None
    out["chosen"] = (
        None if chosen is None else dict(zip(("reader", "preset", "method"), chosen, strict=True))
    )
    print("chosen on the tuning halves:", out["chosen"])
    verdicts = {}
    if chosen is not None:
        _, preset, method = chosen
        for key, cells in sorted(out["heldout"].items()):
            set_name, reader, run_preset = key.split("/")
            if run_preset != preset:
                continue
            c, closed = cells[method], cells["closed_book"]
            ok = (not math.isnan(c["low"])) and c["low"] > 0 and c["tau"] > closed["tau"]
            verdicts[key] = ok
            print(
                f"held-out {key}: {method} {text(c)}; closed_book {text(closed)}; containment "
                f"{text(cells['containment'])} -> {'trustworthy' if ok else 'NOT trustworthy'}"
            )
    out["trustworthy"] = verdicts
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
