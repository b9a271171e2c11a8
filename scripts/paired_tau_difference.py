#!/usr/bin/env python3
"""Paired bootstrap of the difference in Kendall tau between label methods and one baseline.

    python scripts/paired_tau_difference.py --data DIR [--data DIR2 ...] [--against containment]
        [--k 3] [--resamples 1000] [--out diff.json]

``DIR`` is what ``scripts/measure_label_methods.py`` wrote (``labels.parquet``,
``end_to_end.parquet``). Per list metric of Table 1 (``TABLE_METRICS`` at depth ``k``) and per
method, the per-query list-metric values come from the project's
:func:`~erag_dagster.meta.per_query.correlation_inputs` (signed methods scored as signed), and

    Δ = τ_b(method, end-to-end) − τ_b(against, end-to-end)

is computed on the same queries; its 95% percentile CI comes from resampling the queries with
replacement (``resample_blocks``, seed 0) and recomputing both taus on each resample (paired:
the same resample for both). Resamples where either tau is undefined are dropped (their count is
printed). Prints one line per (data, metric, method) and writes the rows as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import polars as pl

from erag_dagster.meta.correlation_report import TABLE_METRICS
from erag_dagster.meta.per_query import correlation_inputs
from erag_dagster.stats.correlation import kendall_tau_b, resample_blocks


def paired_differences(
    data: Path, against: str, k: int, n_resamples: int = 1000, seed: int = 0
) -> list[dict]:
    """One row per (list metric, method ≠ ``against``): ``delta, low, high, undefined``."""
    labels = pl.read_parquet(data / "labels.parquet")
    e2e = pl.read_parquet(data / "end_to_end.parquet")
    system = ("reader", "retriever")
    metrics = [m.format(k=k) for m in TABLE_METRICS]
    per_query, end_to_end = correlation_inputs(
        {system: labels.filter(pl.col("method") == "eRAG").drop("method")},
        {system: labels.filter(pl.col("method") != "eRAG")},
        {system: e2e},
        metrics,
        str(data),
        k,
    )
    y_of = dict(end_to_end.select("query_id", "value").rows())
    qids = sorted(y_of)
    y = np.array([y_of[q] for q in qids], dtype=np.float64)
    rows = []
    for metric in metrics:
        frame = per_query.filter(pl.col("metric") == metric)
        values = {
            m: dict(part.select("query_id", "value").rows())
            for (m,), part in frame.group_by("method", maintain_order=True)
        }
        base = np.array([values[against].get(q, math.nan) for q in qids], dtype=np.float64)
        for method, per in values.items():
            if method == against:
                continue
            x = np.array([per.get(q, math.nan) for q in qids], dtype=np.float64)
            delta = kendall_tau_b(x, y) - kendall_tau_b(base, y)
            draws = []
            rng = np.random.default_rng(seed)
            for block in resample_blocks(rng, len(qids), n_resamples):
                for idx in block:
                    draws.append(kendall_tau_b(x[idx], y[idx]) - kendall_tau_b(base[idx], y[idx]))
            kept = np.array([d for d in draws if not math.isnan(d)])
            low, high = (
                (float(np.quantile(kept, 0.025)), float(np.quantile(kept, 0.975)))
                if kept.size
                else (math.nan, math.nan)
            )
            rows.append(
                {
                    "data": str(data),
                    "metric": metric,
                    "method": method,
                    "against": against,
                    "delta": float(delta),
                    "low": low,
                    "high": high,
                    "undefined": len(draws) - int(kept.size),
                    "queries": len(qids),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, action="append", required=True)
    parser.add_argument("--against", default="containment")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = [
        row
        for data in args.data
        for row in paired_differences(data, args.against, args.k, args.resamples)
    ]
    for r in rows:
        print(
            f"{r['data']}\t{r['metric']}\t{r['method']} - {r['against']}\t"
            f"{r['delta']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}] "
            f"({r['undefined']} undefined of {args.resamples}, {r['queries']} queries)"
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
