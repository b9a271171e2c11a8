"""Asset checks as the Dagster UI shows them: specs attached to the assets (``check_specs=``)
and results returned with each materialisation; the logic is in
:mod:`erag_dagster.evaluation.checks`.

- Blocking (ERROR): ``retrieval_run`` depth and duplicates, ``doc_labels`` coverage, range and
  reader, reports not empty. A failed blocking check is recorded and the step fails *before*
  the value is stored (:func:`checked`): no materialisation, so no new data version, so
  nothing downstream runs on the bad value — neither later in the same run nor under the
  automation daemon (whose conditions react to data versions).
- ``readme_figures`` (ERROR, not blocking): the README's default-run figures hold. Reports are
  leaves, so blocking would only turn a figure drift (another CPU, bf16 answers) into a failed
  ``erag-dagster run`` that stops before the remaining reports are printed.
- ``no_regression`` (WARN, not blocking): a figure moved outside the previous
  materialisation's bootstrap CI. The previous figures are read from that materialisation's
  ``ci_figures`` metadata, written by every materialisation of the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from typing import Any

import dagster as dg
import polars as pl

from erag_dagster.config.registry import Registry, load_registry
from erag_dagster.evaluation import checks

RUN_DEPTH = "k_rows_per_query_no_duplicates"
LABELS_COMPLETE = "labels_in_range_for_top_k_one_reader"
NOT_EMPTY = "not_empty"
README_FIGURES = "readme_figures"
NO_REGRESSION = "no_regression"
CI_FIGURES = "ci_figures"
BLOCKING = frozenset({RUN_DEPTH, LABELS_COMPLETE, NOT_EMPTY})
"""The checks declared ``blocking=True`` by the spec builders below."""


def run_check_specs(
    asset: str, partitions_def: dg.PartitionsDefinition | None = None
) -> list[dg.AssetCheckSpec]:
    """The run's blocking check, partitioned like the asset (a failed partition blocks only its
    own downstream partitions under ``all_deps_blocking_checks_passed``)."""
    return [
        dg.AssetCheckSpec(
            RUN_DEPTH,
            asset=asset,
            blocking=True,
            partitions_def=partitions_def,
            description="k rows per query (fewer only for a lexical retriever), ranks 1..n, "
            "no duplicate (query, doc)",
        )
    ]


def labels_check_specs(
    asset: str, partitions_def: dg.PartitionsDefinition | None = None
) -> list[dg.AssetCheckSpec]:
    """The labels' blocking check, partitioned like the asset."""
    return [
        dg.AssetCheckSpec(
            LABELS_COMPLETE,
            asset=asset,
            blocking=True,
            partitions_def=partitions_def,
            description="a label in [0, 1] for every (query, doc) of the run's top label_k, "
            "all from the partition's reader fingerprint",
        )
    ]


def report_check_specs(asset: str, figures: bool = False, regression: bool = False):
    """``not_empty`` (blocking) and, when asked, ``readme_figures`` and ``no_regression``."""
    specs = [
        dg.AssetCheckSpec(NOT_EMPTY, asset=asset, blocking=True, description="the report has rows")
    ]
    if figures:
        specs.append(
            dg.AssetCheckSpec(
                README_FIGURES,
                asset=asset,
                description="the README's default-run figures (reproductions/default_run.yaml) "
                "hold; passes without comparing when this is not the default run",
            )
        )
    if regression:
        specs.append(
            dg.AssetCheckSpec(
                NO_REGRESSION,
                asset=asset,
                description="no figure moved outside the previous materialisation's bootstrap CI",
            )
        )
    return specs


def result(
    name: str,
    outcome: checks.CheckOutcome,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
) -> dg.AssetCheckResult:
    """A Dagster check result for ``outcome`` (metadata values as JSON where not scalar)."""
    metadata = {
        key: value if isinstance(value, int | float | str | bool) else dg.MetadataValue.json(value)
        for key, value in outcome.metadata.items()
    }
    return dg.AssetCheckResult(
        check_name=name,
        passed=bool(outcome.passed),
        description=outcome.description,
        metadata=metadata,
        severity=severity,
    )


def checked(
    output: dg.Output, results: list[dg.AssetCheckResult]
) -> Iterator[dg.Output | dg.AssetCheckResult]:
    """``output`` then its check ``results``; when a blocking check failed, only the results,
    then :class:`dagster.Failure` ("blocking asset check failed: …"), so the value is never
    stored and its materialisation never recorded (Dagster would otherwise record the value
    before the check's verdict, and eager automation would compute downstream of it)."""
    failed = [r for r in results if r.check_name in BLOCKING and not r.passed]
    if not failed:
        yield output
        yield from results
        return
    yield from results
    reasons = "; ".join(f"{r.check_name}: {r.description}" for r in failed)
    raise dg.Failure(description=f"blocking asset check failed: {reasons}")


def default_run_difference(registry: Registry, evaluation: Any) -> str | None:
    """Why this is not the default run (``None`` when it is): the default run uses the packaged
    registry's configs (same partition keys) and its evaluation settings unchanged."""
    from erag_dagster.orchestration.resources import EvalSettings

    packaged = load_registry(str(resources.files("erag_dagster") / "registry.yaml"))
    if (registry.retriever_partitions, registry.reader_partitions) != (
        packaged.retriever_partitions,
        packaged.reader_partitions,
    ):
        return "the registry's retrievers/readers are not the packaged ones"
    default = EvalSettings().bound_to(packaged).resolve()
    changed = [k for k, v in vars(evaluation).items() if vars(default).get(k) != v]
    if changed:
        return f"settings differ from the default run: {', '.join(changed)}"
    return None


def previous_ci_figures(context: dg.AssetExecutionContext) -> list[dict[str, Any]] | None:
    """The ``ci_figures`` of the asset's latest recorded materialisation (``None``: none, or
    one made before this check existed)."""
    event = context.instance.get_latest_materialization_event(context.asset_key)
    if event is None or event.asset_materialization is None:
        return None
    value = event.asset_materialization.metadata.get(CI_FIGURES)
    return None if value is None else list(value.value)


def report_results(
    context: dg.AssetExecutionContext,
    asset: str,
    report: pl.DataFrame,
    why_empty_is_fine: str | None = None,
    figures_of: tuple[Registry, Any] | None = None,
    regression: bool = False,
) -> tuple[list[dg.AssetCheckResult], dict[str, Any]]:
    """The check results of a report (matching :func:`report_check_specs`) and the metadata to
    add to its materialisation (``ci_figures`` when ``regression``)."""
    results = [result(NOT_EMPTY, checks.check_not_empty(report, asset, why_empty_is_fine))]
    extra: dict[str, Any] = {}
    if figures_of is not None:
        outcome = checks.check_readme_figures(
            report, checks.load_report_figures(asset), default_run_difference(*figures_of)
        )
        results.append(result(README_FIGURES, outcome))
    if regression:
        figures = checks.ci_figures(report)
        outcome = checks.check_regression(figures, previous_ci_figures(context))
        results.append(result(NO_REGRESSION, outcome, dg.AssetCheckSeverity.WARN))
        extra[CI_FIGURES] = dg.MetadataValue.json(figures)
    return results, extra
