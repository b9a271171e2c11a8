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
  :func:`erag_dagster.reports.verdict.verdict`) — of the labels ``verdict_labels`` names:
  eRAG's (the per-query table of :func:`score`) or a label method's (its labels, scored the
  same way: :func:`verdict_table`). In Dagster it is computed once per run, by the
  ``verdict`` asset; every view renders that object (:meth:`Verdict.from_dict`).

Edge cases: no labels → an empty per-query table and no verdict (:func:`decide` returns
``None``); a metric of the config that the table lacks is an :class:`InputError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.core.errors import InputError
from erag_dagster.meta.label_methods import SIGNED_METHODS, verdict_method
from erag_dagster.meta.per_query import System, per_query_metrics
from erag_dagster.reports.erag_tables import missing_notes, score, summarise
from erag_dagster.reports.verdict import Verdict, verdict

__all__ = ["decide", "headline_metric", "missing_notes", "score", "summarise", "verdict_table"]


def headline_metric(per_query: pl.DataFrame, config: EvaluationConfig) -> str:
    """The verdict's metric: the first of ``config.list_metrics`` (a column of
    ``per_query``; :class:`InputError` when it is not)."""
    metric = config.list_metrics[0]
    if metric not in per_query.columns:
        raise InputError(f"the per-query table has no column for the headline metric {metric}")
    return metric


def verdict_table(
    per_query: pl.DataFrame,
    config: EvaluationConfig,
    method_labels: Mapping[System, pl.DataFrame] | None = None,
) -> pl.DataFrame:
    """The per-query table the verdict ranks by: ``per_query`` (eRAG's, :func:`score`) when
    ``config.verdict_labels`` is ``eRAG``, else the list metrics of the method's labels —
    ``method_labels``, one ``query_id, doc_id, rank, label`` frame per system, or a
    ``baseline_labels`` frame with a ``method`` column, the method's rows taken — on the top
    ``label_k`` (signed labels as Table 1 scores them). A system without the method's labels
    (a reader that cannot give them) is left out; none at all is an :class:`InputError`."""
    method = verdict_method(config.verdict_labels)
    if method == "eRAG":
        return per_query
    frames = []
    for (reader, retriever), labels in sorted((method_labels or {}).items()):
        if "method" in labels.columns:
            labels = labels.filter(pl.col("method") == method)
        labels = labels.filter(pl.col("rank") <= config.label_k)
        if labels.height == 0:
            continue
        frames.append(
            per_query_metrics(labels, config.list_metrics, signed=method in SIGNED_METHODS)
            .select(pl.lit(reader).alias("reader"), pl.lit(retriever).alias("retriever"), pl.all())
        )  # fmt: skip
    if not frames:
        raise InputError(
            f"evaluation.verdict_labels is {config.verdict_labels}, but no system has "
            f"{method} labels (they need the transformers backend for likelihoods)"
        )
    return pl.concat(frames)


def decide(
    per_query: pl.DataFrame,
    config: EvaluationConfig,
    dataset: str | None = None,
    method_labels: Mapping[System, pl.DataFrame] | None = None,
) -> Verdict | None:
    """The verdict under ``config`` (module docstring) of ``per_query`` or, with
    ``verdict_labels`` other than ``eRAG``, of ``method_labels`` (:func:`verdict_table`);
    ``None`` when there is nothing to decide (no labelled query)."""
    if per_query.height == 0:
        return None
    table = verdict_table(per_query, config, method_labels)
    return verdict(
        table,
        headline_metric(table, config),
        config.statistics,
        dataset,
        labels=verdict_method(config.verdict_labels),
    )
