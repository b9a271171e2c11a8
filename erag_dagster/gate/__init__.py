"""The deterministic regression gate: is a candidate retriever worse than a baseline for the
reader? (``erag-dagster compare`` / ``erag-dagster baseline``; docs/gate.md.)

- :mod:`.identity` — what must be equal for two evaluations to be compared;
- :mod:`.baseline_file` — the baseline file: written, read and checked field by field;
- :mod:`.verify` — a stored baseline's labels checked against the dataset and the label store;
- :mod:`.compare` — evaluate a ref (baseline file, run file, registry retriever) and compare;
- :mod:`.power` — power before verdict: can this many queries reach alpha at all?;
- :mod:`.verdict` — the paired statistics and the better / worse / indistinguishable rule;
- :mod:`.render` — text, JSON and markdown output, through :mod:`.escape` (one escaping rule);
- :mod:`.heartbeat` — progress on stderr while the commands work.
"""

from erag_dagster.gate.compare import (
    Decision,
    Evaluation,
    GateResult,
    GateSettings,
    compare,
    decide,
    make_baseline,
    save_baseline,
)
from erag_dagster.gate.identity import EvalIdentity, RetrieverIdentity
from erag_dagster.gate.power import Power, gate_power
from erag_dagster.gate.verdict import (
    EXIT_GATE_FAILED,
    FAIL_RULES,
    GateCannotDecide,
    GateRule,
    MetricVerdict,
    gate_failure,
)

__all__ = [
    "EXIT_GATE_FAILED",
    "FAIL_RULES",
    "Decision",
    "EvalIdentity",
    "Evaluation",
    "GateCannotDecide",
    "GateResult",
    "GateRule",
    "GateSettings",
    "MetricVerdict",
    "Power",
    "RetrieverIdentity",
    "compare",
    "decide",
    "gate_failure",
    "gate_power",
    "make_baseline",
    "save_baseline",
]
