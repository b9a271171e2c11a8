"""A gate result as text (terminal), JSON (machines) and GitHub-flavoured markdown (a PR comment).

Numbers: metric values and differences to 4 decimals, p-values to 4 significant digits. Every
value that comes from a file or a name (refs, retriever names, the reader, the dataset, metric
names, notes) goes through :func:`erag_dagster.gate.escape.shown` — one line each, and plain
text in markdown — and the verdict word is bolded only where the verdict is written. JSON
holds full precision, every per-metric field of :class:`~erag_dagster.gate.verdict.
MetricVerdict`, both sides' identity and retriever, and the rule.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from erag_dagster.core.input_numbers import format_given
from erag_dagster.gate.compare import Evaluation, GateResult
from erag_dagster.gate.escape import shown
from erag_dagster.gate.power import Power
from erag_dagster.meta.fit import fit_lines
from erag_dagster.reports.tables import render_cells

_MARK = {"worse": "❌ worse", "better": "✅ better", "indistinguishable": "➖ indistinguishable"}
_HEADERS = ("metric", "baseline", "candidate", "difference", "CI", "p (Holm)", "verdict")


def _rows(result: GateResult, marks: bool) -> list[list[str]]:
    pct = result.statistics.percent
    return [
        [
            # render_cells escapes the pipe of a markdown cell itself
            shown(v.metric, markdown=marks).replace("\\|", "|"),
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


def _headline(result: GateResult, verdict: str, md: bool = False) -> str:
    """The headline with ``verdict`` (already formatted) where the verdict goes."""
    r, stats = result.rule, result.statistics
    n = result.metrics[0].n if result.metrics else 0
    return (
        f"candidate {shown(result.candidate.retriever.label, md)} vs baseline "
        f"{shown(result.baseline.retriever.label, md)}: {verdict} "
        f"(margin {format_given(r.margin)}, alpha {format_given(stats.alpha)} Holm-corrected "
        f"over {len(result.metrics)} metrics, {n} queries)"
    )


def _identity_line(result: GateResult, md: bool = False) -> str:
    i = result.baseline.identity
    dataset = result.candidate.dataset or result.baseline.dataset
    reader = result.candidate.reader_name or result.baseline.reader_name
    return (
        f"dataset {shown(dataset, md)} ({shown(i.dataset_digest, md)}), reader "
        f"{shown(reader, md)} ({shown(i.reader_fingerprint[:12], md)}), labels "
        f"{shown(i.label_method, md)}/{shown(i.downstream_metric, md)}, k={i.k}"
    )


def _power_line(power: Power | None, md: bool = False) -> str:
    if power is None:
        return "power: not computed"
    return shown(f"power: {power.summary()}", md)


def to_text(result: GateResult) -> str:
    """The terminal report: headline, table, identity, cost."""
    right = [False, True, True, True, True, True, False]
    lines = [
        f"erag gate: {_headline(result, result.verdict.upper())}",
        render_cells(_HEADERS, _rows(result, marks=False), right),
        f"identity: {_identity_line(result)}",
        _power_line(result.power),
        f"baseline {shown(result.baseline.ref)}: {_cost(result.baseline)}",
        f"candidate {shown(result.candidate.ref)}: {_cost(result.candidate)}",
        *(f"note: {shown(n)}" for n in result.notes),
        *_fit_lines(result),
    ]
    return "\n".join(lines)


def _fit_lines(result: GateResult, md: bool = False) -> list[str]:
    """The fit diagnostics' warning lines of both sides (labels that do not fit the data
    undo the verdict; :mod:`erag_dagster.meta.fit`); none when the labels fit."""
    fits = [side.fit for side in (result.baseline, result.candidate) if side.fit is not None]
    return [shown(line, md) for line in fit_lines(fits)]


def to_markdown(result: GateResult) -> str:
    """A GitHub-flavoured summary: a heading with the verdict, the table and the rule."""
    right = [False, True, True, True, True, True, False]
    r, stats = result.rule, result.statistics
    lines = [
        f"### eRAG retrieval gate: {_MARK[result.verdict]}",
        "",
        _headline(result, f"**{result.verdict}**", md=True),
        "",
        render_cells(_HEADERS, _rows(result, marks=True), right, markdown=True),
        "",
        f"Identity: {_identity_line(result, md=True)}.",
        "",
        f"{_power_line(result.power, md=True)}.",
        "",
        f"Rule: *worse* when the whole {stats.percent} paired-bootstrap interval of "
        f"candidate − baseline lies below {format_given(-r.margin or 0.0)} and the "
        f"Holm-corrected randomisation p < {format_given(stats.alpha)}; *better* when it lies "
        f"above {format_given(r.margin)} with the same p; else *indistinguishable*.",
        "",
        f"Reader cost: baseline — {_cost(result.baseline)}; candidate — {_cost(result.candidate)}.",
        *(f"\nNote: {shown(n, markdown=True)}." for n in result.notes),
        *(f"\n{line}" for line in _fit_lines(result, md=True)),
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
        "fit": side.fit.as_dict() if side.fit is not None else None,
        "left_out_queries": list(side.left_out),
    }


def rule_json(result: GateResult) -> dict[str, Any]:
    """The rule a result was reached with: its margin and the statistics (JSON keys as they
    were when the rule held them: ``n_resamples``, ``n_permutations``)."""
    stats = result.statistics
    return {
        "margin": result.rule.margin,
        "alpha": stats.alpha,
        "confidence": stats.confidence,
        "n_resamples": stats.resamples,
        "n_permutations": stats.permutations,
        "seed": stats.seed,
    }


def to_json(result: GateResult) -> str:
    """The whole result as one JSON object (``verdict``, ``metrics``, both sides, ``rule``)."""
    return json.dumps(
        {
            "verdict": result.verdict,
            "metrics": [asdict(v) for v in result.metrics],
            "baseline": _side(result.baseline),
            "candidate": _side(result.candidate),
            "rule": rule_json(result),
            "power": asdict(result.power) if result.power else None,
            "notes": result.notes,
        },
        indent=2,
    )


def cannot_decide_report(power: Power, baseline: str, candidate: str, fmt: str) -> str:
    """What ``compare`` prints when it stops before labelling because the gate cannot decide
    (:mod:`erag_dagster.gate.power`), in ``fmt`` ``text``, ``markdown`` or ``json``."""
    if fmt == "json":
        return json.dumps(
            {"verdict": "cannot-decide", "baseline": baseline, "candidate": candidate,
             "power": asdict(power)},
            indent=2,
        )  # fmt: skip
    if fmt == "markdown":
        return (
            "### eRAG retrieval gate: ⚠️ cannot decide\n\n"
            f"Candidate {shown(candidate, True)} vs baseline {shown(baseline, True)}: "
            f"{shown(power.summary(), True)}.\n"
        )
    return (
        f"erag gate: candidate {shown(candidate)} vs baseline {shown(baseline)}: CANNOT DECIDE\n"
        f"{_power_line(power)}"
    )
