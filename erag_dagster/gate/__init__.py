"""The deterministic regression gate: is a candidate retriever worse than a baseline for the
reader? (``erag-dagster compare`` / ``erag-dagster baseline``; docs/gate.md.)

- :mod:`.identity` — what must be equal for two evaluations to be compared; the baseline file;
- :mod:`.compare` — evaluate a ref (baseline file, run file, registry retriever) and compare;
- :mod:`.verdict` — the paired statistics and the better / worse / indistinguishable rule;
- :mod:`.render` — text, JSON and markdown output.
"""

from erag_dagster.gate.compare import (
    Evaluation,
    GateResult,
    GateSettings,
    compare,
    make_baseline,
    save_baseline,
)
from erag_dagster.gate.identity import EvalIdentity, RetrieverIdentity
from erag_dagster.gate.verdict import EXIT_GATE_FAILED, FAIL_RULES, GateRule, MetricVerdict

__all__ = [
    "EXIT_GATE_FAILED",
    "FAIL_RULES",
    "EvalIdentity",
    "Evaluation",
    "GateResult",
    "GateRule",
    "GateSettings",
    "MetricVerdict",
    "RetrieverIdentity",
    "compare",
    "make_baseline",
    "save_baseline",
]
