"""The statistics the unit tests compute with: the configuration's defaults, built from the one
place that holds them (:class:`~erag_dagster.config.evaluation.EvaluationConfig`), and
:func:`stats` to vary one of them."""

from __future__ import annotations

from dataclasses import replace

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.stats.settings import Statistics

STATS: Statistics = EvaluationConfig().statistics


def stats(**changes: float | int) -> Statistics:
    """:data:`STATS` with ``changes`` (``resamples=200``, ``seed=7``, ...)."""
    return replace(STATS, **changes)
