"""The eRAG report tables (``erag_per_query``, ``erag_report`` of
:mod:`erag_dagster.reports.dataset_reports`) and the two steps they are made of, shared by
every front door through :mod:`erag_dagster.evaluation.steps`:

- :func:`score`: per-query list metrics of every (reader, retriever) system on every query of
  the evaluated question set — the config's ``list_metrics`` in its order
  (:func:`erag_dagster.meta.per_query.erag_per_query`: a query a system has no labelled
  document for scores 0, and :func:`missing_notes` names it; docs/metrics.md);
- :func:`summarise`: their means per system (the eRAG report).

Edge cases: no labels → an empty per-query table; a metric of the config that the table lacks
is an :class:`InputError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.core.errors import InputError
from erag_dagster.meta.per_query import (
    System,
    erag_per_query,
    erag_summary,
    missing_queries_note,
    unlabelled_queries,
)
from erag_dagster.reports.declaration import Computed, DatasetInputs, markdown_table

__all__ = ["NOTES_KEY", "missing_notes", "per_query_table", "score", "summarise", "summary_table"]

NOTES_KEY = "queries_scored_0_without_labels"
"""The ``erag_per_query`` metadata that holds :func:`missing_notes` (``"; "``-joined; ``none``)."""


def score(
    labels: Mapping[System, pl.DataFrame], config: EvaluationConfig, query_ids: Sequence[str]
) -> pl.DataFrame:
    """``reader, retriever, query_id`` + one column per ``config.list_metrics`` (in order), one
    row per query of ``query_ids`` (the evaluated question set) for each system; an empty
    frame without labels."""
    return erag_per_query(labels, config.list_metrics, query_ids)


def missing_notes(labels: Mapping[System, pl.DataFrame], query_ids: Sequence[str]) -> list[str]:
    """One note per system that has no labelled document for some query of ``query_ids``
    (those :func:`score` scores 0), systems in sorted order."""
    total = len(set(query_ids))
    notes = [
        missing_queries_note(
            f"{retriever} (reader {reader})", unlabelled_queries(frame, query_ids), total
        )
        for (reader, retriever), frame in sorted(labels.items())
    ]
    return [n for n in notes if n]


def summarise(per_query: pl.DataFrame, config: EvaluationConfig) -> pl.DataFrame:
    """The mean of each list metric per (reader, retriever): ``reader, retriever, queries`` +
    the metrics of ``config`` that ``per_query`` has, in the config's order."""
    return erag_summary(per_query, _metrics_of(per_query, config))


def per_query_table(inputs: DatasetInputs) -> Computed:
    """Per-query eRAG list metrics of every labelled (reader, retriever), on every question
    of the dataset (a question a system has no labelled document for: 0, and a warning)."""
    labels = inputs.systems("doc_labels")
    query_ids = inputs.values["queries"].get_column("query_id").cast(pl.String).to_list()
    table = score(labels, inputs.config, query_ids)
    notes = missing_notes(labels, query_ids)
    metadata = {
        "rows": table.height,
        "metrics": list(inputs.config.list_metrics),
        "preview": markdown_table(table.head(10)),
        NOTES_KEY: "; ".join(notes) or "none",
    }
    return Computed(table, metadata, warnings=tuple(notes))


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
