"""A gate result as text (terminal), JSON (machines) and GitHub-flavoured markdown (a PR comment).

Numbers: metric values and differences to 4 decimals, p-values to 4 significant digits. JSON
holds full precision, every per-metric field of :class:`~erag_dagster.gate.verdict.
MetricVerdict`, both sides' identity and retriever, and the rule.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from erag_dagster.gate.compare import Evaluation, GateResult
from erag_dagster.reports.tables import render_cells

_MARK = {"worse": "❌ worse", "better": "✅ better", "indistinguishable": "➖ indistinguishable"}
_HEADERS = ("metric", "baseline", "candidate", "difference", "CI", "p (Holm)", "verdict")


def _rows(result: GateResult, marks: bool) -> list[list[str]]:
    pct = f"{result.rule.confidence:.0%}"
    return [
        [
            v.metric,
            f"{v.baseline:.4f}",
            f"{v.candidate:.4f}",
            f"{v.difference:+.4f}",
            f"{pct} [{v.ci_low:+.4f}, {v.ci_high:+.4f}]",
            f"{v.p_holm:.4g}",
            _MARK[v.verdict] if marks else v.verdict,
        ]
        for v in result.metrics
    ]


def _cost(side: Evaluation) -> str:
    if side.stored:
        return "stored baseline, no reader call"
    return f"{side.judged_now} pairs answered by the reader, {side.from_store} from the store"


def _headline(result: GateResult) -> str:
    r = result.rule
    n = result.metrics[0].n if result.metrics else 0
    return (
        f"candidate {result.candidate.retriever.label} vs baseline "
        f"{result.baseline.retriever.label}: {result.verdict.upper()} "
        f"(margin {r.margin:g}, alpha {r.alpha:g} Holm-corrected over {len(result.metrics)} "
        f"metrics, {n} queries)"
    )


def _identity_line(result: GateResult) -> str:
    i = result.baseline.identity
    return (
        f"dataset {result.candidate.dataset or result.baseline.dataset} ({i.dataset_digest}), "
        f"reader {result.candidate.reader_name or result.baseline.reader_name} "
        f"({i.reader_fingerprint[:12]}), labels {i.label_method}/{i.downstream_metric}, k={i.k}"
    )


def to_text(result: GateResult) -> str:
    """The terminal report: headline, table, identity, cost."""
    right = [False, True, True, True, True, True, False]
    lines = [
        f"erag gate: {_headline(result)}",
        render_cells(_HEADERS, _rows(result, marks=False), right),
        f"identity: {_identity_line(result)}",
        f"baseline {result.baseline.ref}: {_cost(result.baseline)}",
        f"candidate {result.candidate.ref}: {_cost(result.candidate)}",
        *(f"note: {n}" for n in result.notes),
    ]
    return "\n".join(lines)


def to_markdown(result: GateResult) -> str:
    """A GitHub-flavoured summary: a heading with the verdict, the table and the rule."""
    right = [False, True, True, True, True, True, False]
    r = result.rule
    lines = [
        f"### eRAG retrieval gate: {_MARK[result.verdict]}",
        "",
        _headline(result).replace(result.verdict.upper(), f"**{result.verdict}**"),
        "",
        render_cells(_HEADERS, _rows(result, marks=True), right, markdown=True),
        "",
        f"Identity: {_identity_line(result)}.",
        "",
        f"Rule: *worse* when the whole {r.confidence:.0%} paired-bootstrap interval of "
        f"candidate − baseline lies below {-r.margin or 0.0:g} and the Holm-corrected "
        f"randomisation p < {r.alpha:g}; *better* when it lies above {r.margin:g} with the "
        "same p; else *indistinguishable*.",
        "",
        f"Reader cost: baseline — {_cost(result.baseline)}; candidate — {_cost(result.candidate)}.",
        *(f"\nNote: {n}." for n in result.notes),
    ]
    return "\n".join(lines) + "\n"


def _side(side: Evaluation) -> dict[str, Any]:
    return {
        "ref": side.ref,
        "retriever": asdict(side.retriever),
        "identity": asdict(side.identity),
        "dataset": side.dataset,
        "reader": side.reader_name,
        "aggregate": side.aggregate,
        "queries": len(side.query_ids),
        "judged_now": side.judged_now,
        "from_store": side.from_store,
        "stored": side.stored,
    }


def to_json(result: GateResult) -> str:
    """The whole result as one JSON object (``verdict``, ``metrics``, both sides, ``rule``)."""
    return json.dumps(
        {
            "verdict": result.verdict,
            "metrics": [asdict(v) for v in result.metrics],
            "baseline": _side(result.baseline),
            "candidate": _side(result.candidate),
            "rule": asdict(result.rule),
            "notes": result.notes,
        },
        indent=2,
    )
