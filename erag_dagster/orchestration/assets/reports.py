"""The report assets, generated from the report declarations (:mod:`erag_dagster.reports.catalog`).

Each :class:`~erag_dagster.reports.declaration.Report` becomes one asset: its inputs as
``ins``, its checks (``not_empty``, and the README-figure and no-regression checks where it
asks for them: :mod:`.checks`), its group and automation condition; the body reads the inputs,
calls the report's computation once and returns the frame with its metadata (Markdown and
paths become Dagster metadata values). A dataset's reports are built unprefixed and prefixed
with the rest of the dataset's assets (:func:`~.common.prefixed`); the reports across datasets
read ``<dataset>__<input>`` and are built only where two or more datasets have their inputs.
"""

from collections.abc import Iterator
from typing import Any

import dagster as dg
import polars as pl

from erag_dagster.config.registry import Registry
from erag_dagster.orchestration.assets import checks as asset_checks
from erag_dagster.orchestration.assets.adapter import adapt
from erag_dagster.orchestration.assets.automation import READER_MODELS, RECOMPUTE_WHEN_STALE
from erag_dagster.orchestration.assets.common import (
    CODE_VERSION,
    by_system,
    dataset_of,
    frame_version,
    key_prefix_of,
    report_folder,
)
from erag_dagster.orchestration.assets.labels import GPU_OP_TAGS, GPU_POOL
from erag_dagster.orchestration.resources import EvalSettings
from erag_dagster.orchestration.resources.keys import UNPREFIXED, ResourceKeys
from erag_dagster.reports.catalog import dataset_reports_for, reports_across
from erag_dagster.reports.declaration import (
    AcrossInputs,
    Computed,
    DatasetInputs,
    FilePath,
    Markdown,
    Report,
    ReportInput,
)


def partitions_of(
    context: dg.AssetExecutionContext, input_name: str, value: object
) -> dict[Any, Any]:
    """A partitioned input as ``{partition key: value}``: the IO manager hands a bare value
    when one partition maps to an input that nothing annotates as a mapping (``**inputs``)."""
    if isinstance(value, dict):
        return value
    (key,) = context.asset_partition_keys_for_input(input_name)
    return {key: value}


def _value(context: dg.AssetExecutionContext, spec: ReportInput, name: str, value: object) -> Any:
    """An input as the computation receives it (:class:`DatasetInputs`)."""
    if spec.partitioned is None:
        return value
    partitions = partitions_of(context, name, value)
    return by_system(partitions) if spec.partitioned == "reader_retriever" else partitions


def _metadata(value: Any) -> Any:
    if isinstance(value, Markdown):
        return dg.MetadataValue.md(value.text)
    if isinstance(value, FilePath):
        return dg.MetadataValue.path(str(value.path))
    return value


def _output(
    context: dg.AssetExecutionContext,
    report: Report,
    computed: Computed,
    figures_of: tuple[Registry, Any] | None,
) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
    """The value, its metadata and (for a checked report) its check results."""
    for line in computed.warnings:
        context.log.warning(line)
    metadata = {k: _metadata(v) for k, v in computed.metadata.items()}
    results: list[dg.AssetCheckResult] = []
    if report.checks:
        results, extra = asset_checks.report_results(
            context, report.key, computed.frame, computed.why_empty,
            figures_of if report.figures else None, report.regression,
        )  # fmt: skip
        metadata |= extra
    output = dg.Output(
        computed.frame, data_version=frame_version(computed.frame), metadata=metadata
    )
    yield from asset_checks.checked(output, results)


def _asset_options(
    report: Report, keys: ResourceKeys, package_checks: bool = True
) -> dict[str, Any]:
    """The decorator arguments a report's declaration decides (resources under ``keys``; the
    README-figure check only with ``package_checks``: this package's own project)."""
    options: dict[str, Any] = {
        "name": report.key,
        "group_name": report.group,
        "code_version": CODE_VERSION,
        "description": report.description or None,
        "io_manager_key": keys.io_manager,
    }
    if report.automatic:
        options["automation_condition"] = RECOMPUTE_WHEN_STALE
    if report.checks:
        options["check_specs"] = asset_checks.report_check_specs(
            report.key, figures=report.figures and package_checks, regression=report.regression
        )
    if report.runs_reader:
        options |= {"pool": GPU_POOL, "deps": [READER_MODELS], "op_tags": GPU_OP_TAGS}
    return options


def build_dataset_report(
    report: Report, keys: ResourceKeys = UNPREFIXED, package_checks: bool = True
) -> dg.AssetsDefinition:
    """The asset of one dataset report (unprefixed; module docstring); ``package_checks``: with
    the README-figure check where the report asks for it (this package's own project)."""
    figures = report.figures and package_checks

    def body(
        context: dg.AssetExecutionContext, settings: EvalSettings, **inputs: object
    ) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
        dataset = dataset_of(context)
        registry, config = settings.registry(dataset), settings.resolve(dataset)
        given = DatasetInputs(
            values={i.name: _value(context, i, i.name, inputs[i.name]) for i in report.inputs},
            config=config,
            dataset=dataset,
            retrievers=registry.retriever_partitions,
            readers=registry.reader_partitions,
            reader_configs=[(e.name, e.config) for e in registry.readers.values()],
            folder=report_folder(dataset, key_prefix_of(context)),
        )
        computed = report.computation()(given)
        yield from _output(context, report, computed, (registry, config) if figures else None)

    ins = {i.name: dg.AssetIn(key=dg.AssetKey([i.name])) for i in report.inputs}
    options = _asset_options(report, keys, package_checks)
    return dg.asset(ins=ins, **options)(adapt(body, keys))


def _across_name(dataset: str, asset: str) -> str:
    return f"{dataset}__{asset}"


def build_across_report(
    report: Report, datasets: list[str], keys: ResourceKeys = UNPREFIXED
) -> dg.AssetsDefinition:
    """The asset of one report across ``datasets`` (those that have its inputs)."""

    def body(
        context: dg.AssetExecutionContext, settings: EvalSettings, **inputs: object
    ) -> Iterator[dg.Output[pl.DataFrame] | dg.AssetCheckResult]:
        values = {
            name: {
                i.name: _value(
                    context, i, _across_name(name, i.name), inputs[_across_name(name, i.name)]
                )
                for i in report.inputs
            }
            for name in settings.registry().datasets
            if name in datasets
        }
        given = AcrossInputs(
            values=values,
            configs={name: settings.resolve(name) for name in values},
            config=settings.resolve(),
            retrievers=settings.registry().retriever_partitions,
        )
        computed = report.computation()(given)
        yield from _output(context, report, computed, None)

    ins = {
        _across_name(name, i.name): dg.AssetIn(key=dg.AssetKey([name, i.name]))
        for name in datasets
        for i in report.inputs
    }
    return dg.asset(ins=ins, **_asset_options(report, keys))(adapt(body, keys))


def build_report_assets(
    registry: Registry, keys: ResourceKeys = UNPREFIXED, package_checks: bool = True
) -> list[dg.AssetsDefinition]:
    """The report assets of one dataset's view of the registry (:meth:`Registry.for_dataset`)."""
    return [
        build_dataset_report(r, keys, package_checks)
        for r in dataset_reports_for(bool(registry.reader_labels))
    ]


def build_across_assets(
    registry: Registry, keys: ResourceKeys = UNPREFIXED
) -> list[dg.AssetsDefinition]:
    """The reports across datasets that two or more datasets can feed."""
    views = {name: registry.for_dataset(name) for name in registry.datasets}
    built = []
    for report in reports_across():
        datasets = [n for n, v in views.items() if v.reader_labels or not report.needs_reader]
        if len(datasets) >= 2:
            built.append(build_across_report(report, datasets, keys))
    return built
