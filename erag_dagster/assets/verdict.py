"""The verdict asset: which retriever helps each reader, computed once per run.

Its value is :meth:`erag_dagster.reports.verdict.Verdict.to_dict` (``{}`` without eRAG labels);
the terminal report (``erag-dagster run``), the HTML page and the asset's own metadata render
that object (:meth:`~erag_dagster.reports.verdict.Verdict.from_dict`), so every view shows the
same ranking, intervals and p-values (:func:`erag_dagster.evaluation.steps.decide`).
"""

import dagster as dg
import polars as pl

from erag_dagster.assets.automation import RECOMPUTE_WHEN_STALE
from erag_dagster.assets.common import CODE_VERSION, by_system, dataset_of
from erag_dagster.evaluation.steps import decide
from erag_dagster.resources import EvalSettings


@dg.asset(
    group_name="reports", code_version=CODE_VERSION, automation_condition=RECOMPUTE_WHEN_STALE
)
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
    config = settings.resolve(dataset_of(context))
    found = decide(erag_per_query, config, dataset_of(context), by_system(baseline_labels))
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
            "bootstrap_resamples": config.bootstrap_resamples,
            "seed": config.seed,
        },
    )
