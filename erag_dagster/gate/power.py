"""Power before verdict: can the gate decide anything with this many queries?

The verdict (:mod:`.verdict`) needs ``p_holm < alpha``. ``p`` is the two-sided paired sign-flip
test of :func:`~erag_dagster.stats.significance.compare_paired` over ``n`` queries, which can
never go below

- ``2 / 2**n`` when it is exact (``2**n <= n_permutations``): only the observed signs and
  their mirror are as extreme;
- ``1 / (n_permutations + 1)`` otherwise (Phipson & Smyth: ``(count + 1) / (N + 1)``).

Holm's step-down multiplies the smallest p by the number of metrics ``m``, so the smallest
Holm-corrected p the gate can ever see is ``min_p_holm = min(1, m * min_p)``. When
``min_p_holm >= alpha`` no candidate — not even one whose every query drops from 1 to 0 — can be
called worse (or better): the gate **cannot decide** (``can_decide`` False), and the command
says so before any labelling.

The smallest detectable difference, in the metric's units (metric values lie in ``[0, 1]``):
the mean difference of the smallest number ``k_min`` of the ``n`` queries that, moving by the
metric's whole range 1 in the same direction (the others unchanged), reach ``m * p_k < alpha``,
with ``p_k = 2 / 2**k`` (exact test) or its expected value with random flips,
``(N * 2 / 2**k + 1) / (N + 1)``; it is ``max(k_min / n, margin)`` since a difference inside
the margin is never called. ``None`` when no ``k <= n`` reaches alpha. A smaller change spread
over more queries can be detected too (the test is on the signs); this is the guide a reader
needs for "how big a drop on how few queries does this gate see".
"""

from __future__ import annotations

from dataclasses import dataclass

from erag_dagster.core.input_numbers import format_given
from erag_dagster.stats.settings import Statistics


@dataclass(frozen=True)
class Power:
    """What ``n`` queries and ``metrics`` metrics allow at level ``alpha`` (module docstring).

    ``min_p``: the smallest raw p; ``min_p_holm``: the smallest Holm-corrected p;
    ``detectable``: the smallest detectable mean difference (metric units) or None;
    ``queries_needed``: ``k_min`` (None when none).
    """

    n: int
    metrics: int
    alpha: float
    margin: float
    min_p: float
    min_p_holm: float
    detectable: float | None
    queries_needed: int | None

    @property
    def can_decide(self) -> bool:
        """Whether any candidate could be called worse or better."""
        return self.min_p_holm < self.alpha

    def summary(self) -> str:
        """One line: n, the smallest Holm-corrected p and the detectable difference."""
        head = (
            f"{self.n} queries, {self.metrics} metric{'s' if self.metrics != 1 else ''}: the "
            f"smallest Holm-corrected p is {self.min_p_holm:.4g}"
        )
        if not self.can_decide:
            return (
                f"{head} >= alpha {format_given(self.alpha)}: the gate cannot decide (no "
                "candidate can be called worse or better; use more queries or fewer metrics)"
            )
        return (
            f"{head} < alpha {format_given(self.alpha)}; smallest detectable difference "
            f"{self.detectable:.4f} ({self.queries_needed} of {self.n} queries moving by 1)"
        )


def _p_with(k: int, n: int, n_permutations: int) -> float:
    """The sign-flip p of ``k`` equal non-zero differences among ``n`` queries."""
    if n <= 0 or k <= 0:
        return 1.0
    if 2**n <= n_permutations:
        return 2.0 / 2**k
    return (n_permutations * 2.0 / 2**k + 1.0) / (n_permutations + 1.0)


def gate_power(n: int, metrics: int, margin: float, stats: Statistics) -> Power:
    """:class:`Power` of a gate over ``n`` queries and ``metrics`` metrics at ``stats.alpha``
    with ``stats.permutations`` sign flips (module docstring). ``n = 0`` or ``metrics = 0``
    cannot decide anything."""
    alpha, n_permutations = stats.alpha, stats.permutations
    m = max(metrics, 1)
    min_p = _p_with(n, n, n_permutations)
    min_p_holm = min(1.0, m * min_p)
    needed = next((k for k in range(1, n + 1) if m * _p_with(k, n, n_permutations) < alpha), None)
    detectable = None if needed is None else max(needed / n, margin)
    if n <= 0 or metrics <= 0:
        min_p_holm, detectable, needed = 1.0, None, None
    return Power(n, metrics, alpha, margin, min_p, min_p_holm, detectable, needed)
