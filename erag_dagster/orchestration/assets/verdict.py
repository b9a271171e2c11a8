"""The verdict asset: which retriever helps each reader, computed once per run.

Its value is :meth:`erag_dagster.reports.verdict.Verdict.to_dict` (``{}`` without eRAG labels);
the terminal report (``erag-dagster run``), the HTML page and the asset's own metadata render
that object (:meth:`~erag_dagster.reports.verdict.Verdict.from_dict`), so every view shows the
same ranking, intervals and p-values (the evaluation session's ``decide`` step,
:meth:`erag_dagster.evaluation.session.EvaluationSession.decide`).
"""

import dagster as dg
import polars as pl

from erag_dagster.orchestration.assets.adapter import adapt
from erag_dagster.orchestration.assets.automation import RECOMPUTE_WHEN_STALE
from erag_dagster.orchestration.assets.common import (
    CODE_VERSION,
    by_system,
    dataset_of,
    session_of,
)
from erag_dagster.orchestration.resources import EvalSettings
from erag_dagster.orchestration.resources.keys import UNPREFIXED, ResourceKeys


def build_verdict(keys: ResourceKeys = UNPREFIXED, methods: bool = True) -> dg.AssetsDefinition:
    """The ``verdict`` asset (resources under ``keys``). ``methods``: whether it reads
    ``baseline_labels`` — only when ``evaluation.verdict_labels`` names a label method (then it
    waits for the meta-evaluation stage); otherwise it ranks eRAG's labels and is computed
    right after them (a graph scored against a reference has no ``baseline_labels``)."""
    return dg.asset(
        name="verdict",
        group_name="reports",
        code_version=CODE_VERSION,
        automation_condition=RECOMPUTE_WHEN_STALE,
        io_manager_key=keys.io_manager,
    )(adapt(verdict if methods else verdict_of_erag_labels, keys))


def verdict_of_erag_labels(
    context: dg.AssetExecutionContext, settings: EvalSettings, erag_per_query: pl.DataFrame
) -> dg.Output[dict]:
    """:func:`verdict` of a graph without ``baseline_labels``: eRAG's labels only."""
    return verdict(context, settings, erag_per_query, {})


def verdict(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    erag_per_query: pl.DataFrame,
    baseline_labels: dict[str, pl.DataFrame],
) -> dg.Output[dict]:
    """Per reader, the retrievers ranked on the headline metric of the labels
    ``evaluation.verdict_labels`` names (eRAG's, or a label method's rows of
    ``baseline_labels``) with bootstrap CIs, and every pair tested (paired randomisation, Holm
    over the reader's pairs)."""
    session = session_of(context, settings)
    found = session.decide(erag_per_query, dataset_of(context), by_system(baseline_labels))
    if found is None:
        return dg.Output(
            {}, metadata={"verdict": dg.MetadataValue.md("no eRAG labels: no verdict")}
        )
    return dg.Output(
        found.to_dict(),
        metadata={
            "verdict": dg.MetadataValue.md(found.markdown()),
            "headline_metric": found.metric,
            "labels": found.labels,
            "test": found.family,
            **{f"statistics_{k}": v for k, v in session.statistics.as_dict().items()},
        },
    )
