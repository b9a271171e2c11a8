"""The statistics the unit tests compute with: the configuration's defaults, built from the one
place that holds them (:class:`~erag_dagster.config.evaluation.EvaluationConfig`), and
:func:`stats` to vary one of them; :data:`FIT_SETTINGS`, the fit diagnostics' settings."""

from __future__ import annotations

from dataclasses import replace

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.stats.settings import Statistics

STATS: Statistics = EvaluationConfig().statistics

_DEFAULTS = EvaluationConfig()
FIT_SETTINGS: dict[str, object] = {
    "relevance_level": _DEFAULTS.relevance_level,
    "stats": STATS,
    "label_methods": tuple(_DEFAULTS.label_methods),
    "verdict_labels": _DEFAULTS.verdict_labels,
    "expected": _DEFAULTS.expected_fit,
}
"""The configuration's own settings of the fit diagnostics (``fit_diagnostics(...,
**FIT_SETTINGS)``): what a registry without an ``evaluation`` section gives."""


def stats(**changes: float | int) -> Statistics:
    """:data:`STATS` with ``changes`` (``resamples=200``, ``seed=7``, ...)."""
    return replace(STATS, **changes)
