"""The steps after labelling, shared by every front door: score → summarise → decide.

The Dagster assets (``erag_per_query``, ``erag_report``, ``verdict``), the Python API
(:func:`erag_dagster.evaluate`) and the terminal and HTML reports all reach their numbers
through these functions, with the settings of one
:class:`~erag_dagster.config.evaluation.EvaluationConfig` — so the same labels give the same
metric set, means and verdict (p-values included) whichever door asked:

- :func:`score`: per-query list metrics of every (reader, retriever) system — the config's
  ``list_metrics`` in its order (:func:`erag_dagster.meta.per_query.erag_per_query`);
- :func:`summarise`: their means per system (the eRAG report);
- :func:`decide`: the verdict on the *headline* metric, the first of ``list_metrics`` — the
  bootstrap CIs with ``bootstrap_resamples`` resamples, the randomisation tests and the Holm
  correction at ``alpha``, every draw seeded with ``seed``
  (:func:`erag_dagster.reports.verdict.verdict`) — of the labels ``verdict_labels`` names:
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
from erag_dagster.errors import InputError
from erag_dagster.meta.label_methods import SIGNED_METHODS, verdict_method
from erag_dagster.meta.per_query import System, erag_per_query, erag_summary, per_query_metrics
from erag_dagster.reports.verdict import Verdict, verdict

__all__ = ["decide", "headline_metric", "score", "summarise", "verdict_table"]


def score(labels: Mapping[System, pl.DataFrame], config: EvaluationConfig) -> pl.DataFrame:
    """``reader, retriever, query_id`` + one column per ``config.list_metrics`` (in order), one
    row per labelled query of each system; an empty frame without labels."""
    return erag_per_query(labels, config.list_metrics)


def summarise(per_query: pl.DataFrame, config: EvaluationConfig) -> pl.DataFrame:
    """The mean of each list metric per (reader, retriever): ``reader, retriever, queries`` +
    the metrics of ``config`` that ``per_query`` has, in the config's order."""
    return erag_summary(per_query, _metrics_of(per_query, config))


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
        dataset,
        alpha=config.alpha,
        n_resamples=config.bootstrap_resamples,
        seed=config.seed,
        labels=verdict_method(config.verdict_labels),
    )


def _metrics_of(per_query: pl.DataFrame, config: EvaluationConfig) -> list[str]:
    if per_query.height == 0:
        return list(config.list_metrics)
    missing = [m for m in config.list_metrics if m not in per_query.columns]
    if missing:
        raise InputError(f"the per-query table has no column for {', '.join(missing)}")
    return list(config.list_metrics)
