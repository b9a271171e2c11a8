"""The eRAG report tables (``erag_per_query``, ``erag_report`` of
:mod:`erag_dagster.reports.dataset_reports`) and the two steps they are made of, shared by
every front door through :mod:`erag_dagster.evaluation.steps`:

- :func:`score`: per-query list metrics of every (reader, retriever) system — the config's
  ``list_metrics`` in its order (:func:`erag_dagster.meta.per_query.erag_per_query`);
- :func:`summarise`: their means per system (the eRAG report).

Edge cases: no labels → an empty per-query table; a metric of the config that the table lacks
is an :class:`InputError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.core.errors import InputError
from erag_dagster.meta.per_query import System, erag_per_query, erag_summary
from erag_dagster.reports.declaration import Computed, DatasetInputs, markdown_table

__all__ = ["per_query_table", "score", "summarise", "summary_table"]


def score(labels: Mapping[System, pl.DataFrame], config: EvaluationConfig) -> pl.DataFrame:
    """``reader, retriever, query_id`` + one column per ``config.list_metrics`` (in order), one
    row per labelled query of each system; an empty frame without labels."""
    return erag_per_query(labels, config.list_metrics)


def summarise(per_query: pl.DataFrame, config: EvaluationConfig) -> pl.DataFrame:
    """The mean of each list metric per (reader, retriever): ``reader, retriever, queries`` +
    the metrics of ``config`` that ``per_query`` has, in the config's order."""
    return erag_summary(per_query, _metrics_of(per_query, config))


def per_query_table(inputs: DatasetInputs) -> Computed:
    """Per-query eRAG list metrics of every labelled (reader, retriever)."""
    table = score(inputs.systems("doc_labels"), inputs.config)
    metadata = {
        "rows": table.height,
        "metrics": list(inputs.config.list_metrics),
        "preview": markdown_table(table.head(10)),
    }
    return Computed(table, metadata)


def summary_table(inputs: DatasetInputs) -> Computed:
    """The mean of each list metric per (reader, retriever); the verdict on these numbers is
    the ``verdict`` asset's."""
    table = summarise(inputs.values["erag_per_query"], inputs.config)
    metadata = {"report": markdown_table(table), "metrics": list(inputs.config.list_metrics)}
    return Computed(table, metadata)


def _metrics_of(per_query: pl.DataFrame, config: EvaluationConfig) -> list[str]:
    if per_query.height == 0:
        return list(config.list_metrics)
    missing = [m for m in config.list_metrics if m not in per_query.columns]
    if missing:
        raise InputError(f"the per-query table has no column for {', '.join(missing)}")
    return list(config.list_metrics)
