"""Agreement of every automatic labelling with the human judgments, per system."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from erag_dagster.meta.label_methods import REFERENCE_METHODS
from erag_dagster.meta.per_query import System
from erag_dagster.meta.semantic import agreement

#: The baseline that *is* the human judgments (compared with itself it would agree fully).
JUDGMENTS_METHOD = "provenance"


def label_agreement_table(
    doc_labels: Mapping[System, pl.DataFrame],
    baseline_labels: Mapping[System, pl.DataFrame],
    qrels: pl.DataFrame,
    relevance_level: int,
) -> pl.DataFrame:
    """``reader, retriever, method, n, agreement, kappa``: raw agreement and Cohen's kappa of
    eRAG and each baseline method (except :data:`JUDGMENTS_METHOD` and the reference rows,
    :data:`~erag_dagster.meta.label_methods.REFERENCE_METHODS`) with ``qrels`` on the same
    retrieved documents (:func:`erag_dagster.meta.semantic.agreement`: relevant when judged
    ``>= relevance_level``, the configuration's; unjudged documents count as non-relevant).
    Systems sorted, methods sorted by name; an empty frame when there are no judgments."""
    rows = []
    if qrels.height == 0:
        return pl.DataFrame(rows)
    for system in sorted(doc_labels):
        methods = {"eRAG": doc_labels[system]}
        if system in baseline_labels:
            for (method,), frame in baseline_labels[system].group_by("method"):
                if method != JUDGMENTS_METHOD and method not in REFERENCE_METHODS:
                    methods[str(method)] = frame
        for method, frame in sorted(methods.items()):
            stats = agreement(frame.select("query_id", "doc_id", "label"), qrels, relevance_level)
            rows.append({"reader": system[0], "retriever": system[1], "method": method,
                         **{k: stats[k] for k in ("n", "agreement", "kappa")}})  # fmt: skip
    return pl.DataFrame(rows)
