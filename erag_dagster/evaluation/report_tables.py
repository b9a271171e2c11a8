"""The eRAG report tables' computations (``erag_per_query``, ``erag_report`` of
:mod:`erag_dagster.reports.dataset_reports`): :mod:`.steps`'s :func:`~.steps.score` and
:func:`~.steps.summarise` with the metadata the assets show. They sit in this layer because the
steps do; the report declarations name them as ``"module:function"``."""

from __future__ import annotations

from erag_dagster.evaluation import steps
from erag_dagster.reports.declaration import Computed, DatasetInputs, markdown_table


def per_query_table(inputs: DatasetInputs) -> Computed:
    """Per-query eRAG list metrics of every labelled (reader, retriever)."""
    table = steps.score(inputs.systems("doc_labels"), inputs.config)
    metadata = {
        "rows": table.height,
        "metrics": list(inputs.config.list_metrics),
        "preview": markdown_table(table.head(10)),
    }
    return Computed(table, metadata)


def summary_table(inputs: DatasetInputs) -> Computed:
    """The mean of each list metric per (reader, retriever); the verdict on these numbers is
    the ``verdict`` asset's."""
    table = steps.summarise(inputs.values["erag_per_query"], inputs.config)
    metadata = {"report": markdown_table(table), "metrics": list(inputs.config.list_metrics)}
    return Computed(table, metadata)
