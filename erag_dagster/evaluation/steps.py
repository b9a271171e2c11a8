"""The steps after labelling, shared by every front door: score → summarise → decide.

The Dagster assets (``erag_per_query``, ``erag_report``, ``verdict``), the Python API
(:func:`erag_dagster.evaluate`) and the terminal and HTML reports all reach their numbers
through these functions, with the settings of one
:class:`~erag_dagster.config.evaluation.EvaluationConfig` — so the same labels give the same
metric set, means and verdict (p-values included) whichever door asked:

- :func:`score`: per-query list metrics of every (reader, retriever) system on every question
  of the evaluated set (a question a system has no labelled document for scores 0;
  :func:`missing_notes` names them: docs/metrics.md), and :func:`summarise`: their means per
  system — the eRAG report tables' own steps, defined with them in
  :mod:`erag_dagster.reports.erag_tables` (below this layer) and named here;
- :func:`decide`: the verdict on the *headline* metric, the first of ``list_metrics`` — the
  bootstrap CIs, the randomisation tests and the Holm correction with ``config.statistics``
  (resamples, seed, alpha, confidence, permutations;
  :func:`erag_dagster.reports.verdict.verdict`). In Dagster it is computed once per run, by
  the ``verdict`` asset; every view renders that object (:meth:`Verdict.from_dict`).

Edge cases: no labels → an empty per-query table and no verdict (:func:`decide` returns
``None``); a metric of the config that the table lacks is an :class:`InputError` naming it.
"""

from __future__ import annotations

import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.core.errors import InputError
from erag_dagster.reports.erag_tables import missing_notes, score, summarise
from erag_dagster.reports.verdict import Verdict, verdict

__all__ = ["decide", "headline_metric", "missing_notes", "score", "summarise"]


def headline_metric(per_query: pl.DataFrame, config: EvaluationConfig) -> str:
    """The verdict's metric: the first of ``config.list_metrics`` (a column of
    ``per_query``; :class:`InputError` when it is not)."""
    metric = config.list_metrics[0]
    if metric not in per_query.columns:
        raise InputError(f"the per-query table has no column for the headline metric {metric}")
    return metric


def decide(
    per_query: pl.DataFrame, config: EvaluationConfig, dataset: str | None = None
) -> Verdict | None:
    """The verdict of ``per_query`` under ``config`` (module docstring); ``None`` when there
    is nothing to decide (no labelled query)."""
    if per_query.height == 0:
        return None
    return verdict(per_query, headline_metric(per_query, config), config.statistics, dataset)
