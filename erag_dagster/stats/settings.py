"""``Statistics``: the one group of settings every CI, test and star is computed with.

Every statistic of a report — a bootstrap interval, a randomisation test, a Holm-adjusted p
and the star that marks it — takes one :class:`Statistics` value as a **required** argument.
There is no default anywhere below the configuration: the values come from the registry's
``evaluation:`` section (:class:`~erag_dagster.config.evaluation.EvaluationConfig`, which
holds the one default of each and builds this value, ``config.statistics``), so a report
that forgets to pass them fails with a ``TypeError`` instead of silently using seed 0.

- ``resamples``: bootstrap resamples of every percentile interval (registry
  ``bootstrap_resamples``);
- ``seed``: the seed every draw is made from (bootstrap resamples, Monte Carlo sign flips);
- ``alpha``: the significance level of every test (a star, a verdict, the gate);
- ``confidence``: the level of every interval, in (0, 1) (0.95: a 95% CI);
- ``permutations``: the sign flips of a randomisation test; when ``2**n`` fits in it, all of
  them are enumerated and the test is exact (:func:`~erag_dagster.stats.significance.
  randomisation_test`).

Edge-case policy: a value out of range (resamples or permutations below 1, a seed outside
``[0, 2**32 - 1]``, alpha or confidence outside (0, 1), a bool where a number is wanted) is an
:class:`~erag_dagster.core.errors.InputError` naming the field; the configuration checks the
registry's keys with the same rules before it builds one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from erag_dagster.core.errors import InputError

__all__ = ["Statistics"]

_MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class Statistics:
    """The statistical settings of one evaluation (module docstring). Frozen and hashable:
    one value is handed down from the configuration to every report."""

    resamples: int
    seed: int
    alpha: float
    confidence: float
    permutations: int

    def __post_init__(self) -> None:
        for name in ("resamples", "permutations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"statistics: {name} must be an integer >= 1, got {value!r}")
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED:
            raise InputError(
                f"statistics: seed must be an integer from 0 to 2**32 - 1, got {seed!r}"
            )
        for name in ("alpha", "confidence"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not 0 < value < 1
            ):
                raise InputError(f"statistics: {name} must lie in (0, 1), got {value!r}")

    @property
    def percent(self) -> str:
        """The interval's level as people write it: ``95%``, ``90%``, ``99.5%``."""
        return f"{self.confidence * 100:g}%"

    def as_dict(self) -> dict[str, float | int]:
        """The five values as JSON-able data (stored with a verdict, shown in metadata)."""
        return {
            "resamples": self.resamples,
            "seed": self.seed,
            "alpha": self.alpha,
            "confidence": self.confidence,
            "permutations": self.permutations,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Statistics:
        """The value :meth:`as_dict` wrote (every key required)."""
        return cls(
            resamples=int(data["resamples"]),
            seed=int(data["seed"]),
            alpha=float(data["alpha"]),
            confidence=float(data["confidence"]),
            permutations=int(data["permutations"]),
        )
