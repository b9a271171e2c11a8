"""The gate's verdict: per metric, candidate minus baseline with its uncertainty, and a rule.

For each metric ``m`` and query ``q`` let ``d_q = candidate_q - baseline_q`` (per-query metric
values on the same queries). :func:`erag_dagster.stats.significance.compare_paired` gives

- ``difference = mean(d)``;
- ``ci = [low, high]``: its percentile paired bootstrap interval at the statistics'
  ``confidence`` (queries resampled with replacement ``resamples`` times, seeded);
- ``p``: the two-sided paired randomisation (sign-flip) test of ``mean(d) = 0``.

The p-values of the metrics are adjusted together with :func:`~erag_dagster.stats.significance.
holm` (family-wise error rate over the metrics), giving ``p_holm``. With the margin ``δ >= 0``
(in the metric's own units, e.g. 0.02 = two points of nDCG) and level ``alpha``:

- **worse** when ``high < -δ`` and ``p_holm < alpha``: the whole interval lies below ``-δ``;
- **better** when ``low > δ`` and ``p_holm < alpha``;
- **indistinguishable** otherwise (including identical systems: ``d = 0``, ``p = 1``).

The overall verdict is ``worse`` if any metric is worse, else ``better`` if any is better,
else ``indistinguishable``. Every draw is seeded: the same labels give the same verdict.
The statistics (resamples, seed, alpha, confidence, permutations) are the registry's, one
:class:`~erag_dagster.stats.settings.Statistics` value (required; ``--alpha`` may replace its
``alpha``: :meth:`GateRule.statistics`) — the verdict asset's own, so the gate and the verdict
test a pair with the same draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.core.errors import InputError
from erag_dagster.gate.power import Power
from erag_dagster.stats.settings import Statistics
from erag_dagster.stats.significance import compare_paired, holm

VERDICTS = ("better", "worse", "indistinguishable")
FAIL_RULES = {"worse": ("worse",), "worse-or-indistinguishable": ("worse", "indistinguishable")}
"""``--fail-if`` choices and the overall verdicts each one fails on."""
EXIT_GATE_FAILED = 3
"""Exit status of ``erag-dagster compare --fail-if ...`` when the gate fails (2 stays bad input,
1 the environment)."""


class GateCannotDecide(Exception):
    """Power before verdict (:mod:`.power`): with these queries and metrics no candidate can be
    called worse or better; raised before any labelling when the caller requires power
    (``erag-dagster compare --fail-if`` without ``--allow-underpowered``: exit 3)."""

    def __init__(self, power: Power) -> None:
        super().__init__(power.summary())
        self.power = power


@dataclass(frozen=True)
class MetricVerdict:
    """One metric's comparison (module docstring); ``n`` queries compared."""

    metric: str
    baseline: float
    candidate: float
    difference: float
    ci_low: float
    ci_high: float
    p: float
    p_holm: float
    verdict: str
    n: int


@dataclass(frozen=True)
class GateRule:
    """What a gate decides with besides the statistics: the ``margin`` δ >= 0 (metric units)
    and, optionally, an ``alpha`` in (0, 1) that replaces the registry's (``--alpha``;
    ``None``: the registry's ``evaluation.alpha``). Every other statistical setting is the
    registry's (:meth:`statistics`)."""

    margin: float = 0.0
    alpha: float | None = None

    def statistics(self, config: EvaluationConfig) -> Statistics:
        """``config``'s statistics with this rule's ``alpha`` when it has one."""
        return config.with_overrides("--alpha", alpha=self.alpha).statistics

    def __post_init__(self) -> None:
        for name in ("margin", "alpha"):
            value = getattr(self, name)
            if value is None and name == "alpha":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(f"--{name} must be a number, got {value!r}")
        if not 0 <= self.margin < 1:  # nan and inf fail too
            raise InputError(
                f"--margin must lie in [0, 1) (metric units; metric values lie in [0, 1], so a "
                f"margin of 1 or more could never be exceeded), got {self.margin}"
            )
        if self.alpha is not None and not 0 < self.alpha < 1:
            raise InputError(f"--alpha must lie in (0, 1), got {self.alpha}")


def metric_verdicts(
    baseline: Mapping[str, Mapping[str, float]],
    candidate: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str],
    rule: GateRule,
    stats: Statistics,
) -> list[MetricVerdict]:
    """Per-metric verdicts of ``candidate`` against ``baseline`` (``query -> metric -> value``
    on the same queries; a query one side lacks is an error, never silently dropped) under
    ``rule``'s margin and ``stats`` (its ``alpha`` decides; :meth:`GateRule.statistics`)."""
    if set(baseline) != set(candidate):
        only = sorted(set(baseline) ^ set(candidate))
        raise InputError(
            f"baseline and candidate scored different queries ({len(only)} differ, "
            f"e.g. {only[0]!r})"
        )
    compared = []
    for metric in metrics:
        base = {q: values[metric] for q, values in baseline.items()}
        cand = {q: values[metric] for q, values in candidate.items()}
        compared.append(compare_paired(cand, base, stats))
    adjusted = holm([c.p_perm for c in compared])
    out = []
    for metric, c, p_holm in zip(metrics, compared, adjusted, strict=True):
        low, high = c.ci
        significant = bool(p_holm < stats.alpha)
        if significant and high < -rule.margin:
            verdict = "worse"
        elif significant and low > rule.margin:
            verdict = "better"
        else:
            verdict = "indistinguishable"
        out.append(
            MetricVerdict(
                metric,
                c.mean_b,
                c.mean_a,
                c.difference,
                low,
                high,
                c.p_perm,
                float(p_holm),
                verdict,
                c.n,
            )
        )
    return out


def overall_verdict(verdicts: Sequence[MetricVerdict]) -> str:
    """``worse`` if any metric is worse, else ``better`` if any is better, else
    ``indistinguishable``."""
    found = {v.verdict for v in verdicts}
    return "worse" if "worse" in found else "better" if "better" in found else "indistinguishable"


def gate_failure(
    verdict: str, power: Power, fail_if: str | None, allow_underpowered: bool = False
) -> str | None:
    """Why ``--fail-if fail_if`` fails the gate (one line), or None when it passes.

    It fails when the overall ``verdict`` is one of :data:`FAIL_RULES` ``[fail_if]``, and —
    power before verdict (:mod:`.power`) — when the gate could not decide anything with these
    queries and metrics, unless ``allow_underpowered``: an underpowered gate would otherwise
    pass every candidate, however much worse. No ``fail_if``: never fails.
    """
    if not fail_if:
        return None
    if fail_if not in FAIL_RULES:
        raise InputError(f"--fail-if {fail_if!r}: choose one of {', '.join(FAIL_RULES)}")
    if verdict in FAIL_RULES[fail_if]:
        return f"the candidate is {verdict} (--fail-if {fail_if})"
    if not power.can_decide and not allow_underpowered:
        return (
            f"{power.summary()} (--fail-if {fail_if}; pass "
            "--allow-underpowered to let it pass anyway)"
        )
    return None
