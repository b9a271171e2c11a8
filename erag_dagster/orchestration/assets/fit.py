"""The fit asset: do the labels fit the data? Computed once per run, shown by every view.

Per (reader, retriever) system of ``doc_labels``: the share of answers cut at the reader's
``max_new_tokens``, answer vs gold length, and how well labels separate judged-relevant
documents (:func:`erag_dagster.meta.fit.reader_fit`), with a warning line and its fix where
they do not fit. Its value is a list of :meth:`~erag_dagster.meta.fit.FitDiagnostics.as_dict`
rows; ``erag-dagster run`` prints them right after the verdict and the HTML page shows the
warnings beside it (:func:`~erag_dagster.meta.fit.fit_from_dict`).
"""

import dagster as dg
import polars as pl

from erag_dagster.meta.fit import expected_fit_lines, fit_lines
from erag_dagster.orchestration.assets.adapter import adapt
from erag_dagster.orchestration.assets.automation import RECOMPUTE_WHEN_STALE
from erag_dagster.orchestration.assets.common import (
    CODE_VERSION,
    by_system,
    dataset_of,
    session_of,
)
from erag_dagster.orchestration.resources import EvalSettings, ReaderResource
from erag_dagster.orchestration.resources.keys import UNPREFIXED, ResourceKeys


def build_fit(keys: ResourceKeys = UNPREFIXED) -> dg.AssetsDefinition:
    """The ``fit`` asset (resources under ``keys``)."""
    return dg.asset(
        name="fit",
        group_name="reports",
        code_version=CODE_VERSION,
        automation_condition=RECOMPUTE_WHEN_STALE,
        io_manager_key=keys.io_manager,
    )(adapt(fit, keys))


def fit(
    context: dg.AssetExecutionContext,
    settings: EvalSettings,
    reader: ReaderResource,
    doc_labels: dict[str, pl.DataFrame],
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
) -> dg.Output[list]:
    """The fit diagnostics of every eRAG-labelled run (module docstring): the step the API
    and the gate run right after labelling (the evaluation session's ``fit`` step,
    :meth:`erag_dagster.evaluation.session.EvaluationSession.fit`), here once over every
    ``doc_labels`` partition."""
    session = session_of(context, settings, queries=queries, qrels=qrels)
    registry = settings.registry(dataset_of(context))
    fits = [
        session.fit(
            labels,
            reader.get(registry, reader_key),
            reader_name=reader_key,
            retriever=retriever_key,
        )
        for (reader_key, retriever_key), labels in sorted(by_system(doc_labels).items())
    ]
    warnings = fit_lines(fits)
    expected = expected_fit_lines(fits)
    return dg.Output(
        [f.as_dict() for f in fits],
        metadata={
            "runs": len(fits),
            "warnings": dg.MetadataValue.md(
                "\n".join(f"- {w}" for w in warnings) or "the labels fit the data"
            ),
            "expected": dg.MetadataValue.md(
                "\n".join(f"- {w}" for w in expected) or "none declared expected"
            ),
        },
    )
