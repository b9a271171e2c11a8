"""Reports across the registry's datasets (group ``cross_dataset``, unprefixed keys).

Built only when the registry has two or more datasets (:mod:`erag_dagster.registry_datasets`);
each reads the same asset of every dataset that has it, as inputs named ``<dataset>__<asset>``:

- ``beir_leaderboard``: retriever x dataset on the human judgments (``qrels`` and every
  ``retrieval_run`` partition of each dataset with judgments), with the mean over datasets;
- ``erag_leaderboard``: reader x retriever x dataset on the eRAG labels (``erag_per_query`` of
  each dataset with reader stages);
- ``table1_across``: Table 1 with one column group per dataset (``correlation_report``).

A report needs two datasets that have its input; with fewer it is not built (one dataset's
report is that dataset's own). The tables and their statistics (CIs, Holm-adjusted paired
tests) are :mod:`erag_dagster.reports.cross_leaderboard`'s and
:mod:`erag_dagster.reports.cross_table1`'s.
"""

from collections.abc import Callable

import dagster as dg
import polars as pl

from erag_dagster.assets.automation import RECOMPUTE_WHEN_STALE
from erag_dagster.assets.common import CODE_VERSION, frame_version
from erag_dagster.registry import Registry
from erag_dagster.reports.cross_leaderboard import (
    DatasetRuns,
    format_cross_leaderboard,
)
from erag_dagster.reports.cross_leaderboard import (
    beir_leaderboard as beir_table,
)
from erag_dagster.reports.cross_leaderboard import (
    erag_leaderboard as erag_table,
)
from erag_dagster.reports.cross_table1 import format_table1_across
from erag_dagster.reports.cross_table1 import (
    table1_across as table1_table,
)
from erag_dagster.resources import EvalSettings

GROUP = "cross_dataset"


def _input_name(dataset: str, asset: str) -> str:
    return f"{dataset}__{asset}"


def _ins(datasets: list[str], assets: tuple[str, ...]) -> dict[str, dg.AssetIn]:
    return {
        _input_name(name, asset): dg.AssetIn(key=dg.AssetKey([name, asset]))
        for name in datasets
        for asset in assets
    }


def _baseline(registry: Registry, runs: dict[str, dict[str, pl.DataFrame]]) -> str | None:
    """The registry's first retriever that some dataset ran (the single-dataset reports'
    baseline is their first retriever too)."""
    ran = {key for by_partition in runs.values() for key in by_partition}
    return next((p for p in registry.retriever_partitions if p in ran), None)


def _by_partition(
    context: dg.AssetExecutionContext, name: str, inputs: dict[str, object]
) -> dict[str, pl.DataFrame]:
    """A partitioned input as ``{partition key: frame}``: the IO manager hands a bare frame
    when one partition maps to the input and nothing annotates it as a mapping (``**inputs``)."""
    value = inputs[name]
    if isinstance(value, dict):
        return value
    (key,) = context.asset_partition_keys_for_input(name)
    return {key: value}


def _beir_leaderboard(
    context: dg.AssetExecutionContext, settings: EvalSettings, **inputs: object
) -> dg.Output[pl.DataFrame]:
    """Retriever x dataset on each dataset's human judgments, mean over datasets (BEIR's
    unweighted convention), bootstrap CIs, paired randomisation tests against the first
    registry retriever, Holm-adjusted over the whole table."""
    registry, params = settings.registry(), settings.resolve()
    names = [n for n in registry.datasets if _input_name(n, "qrels") in inputs]
    runs = {n: _by_partition(context, _input_name(n, "retrieval_run"), inputs) for n in names}
    judged = {
        n: DatasetRuns(
            inputs[_input_name(n, "qrels")], runs[n], settings.resolve(n).relevance_level
        )
        for n in names
    }
    judged = {n: v for n, v in judged.items() if v.qrels.height}
    baseline = _baseline(registry, runs)
    board = beir_table(
        judged, params.human_metrics, n_resamples=params.bootstrap_resamples, baseline=baseline
    )
    return _report(board, format_cross_leaderboard, {"datasets": list(judged)})


def _erag_leaderboard(
    context: dg.AssetExecutionContext, settings: EvalSettings, **inputs: object
) -> dg.Output[pl.DataFrame]:
    """Reader x retriever x dataset on the eRAG labels (each dataset's ``erag_per_query``),
    CIs, paired tests against the first registry retriever, Holm over the whole table."""
    registry, params = settings.registry(), settings.resolve()
    tables = {
        n: inputs[_input_name(n, "erag_per_query")]
        for n in registry.datasets
        if _input_name(n, "erag_per_query") in inputs
    }
    ran = {
        n: dict.fromkeys(t.get_column("retriever").unique().to_list()) for n, t in tables.items()
    }
    metrics = [m for m in params.list_metrics if all(m in t.columns for t in tables.values())]
    board = erag_table(
        tables, metrics, n_resamples=params.bootstrap_resamples, baseline=_baseline(registry, ran)
    )
    return _report(board, format_cross_leaderboard, {"datasets": list(tables)})


def _table1_across(
    context: dg.AssetExecutionContext, settings: EvalSettings, **inputs: object
) -> dg.Output[pl.DataFrame]:
    """Table 1 (Kendall tau-b with end-to-end quality, bootstrap CIs) with one column group
    per dataset, the paper's layout."""
    registry = settings.registry()
    tables = {
        n: inputs[_input_name(n, "correlation_report")]
        for n in registry.datasets
        if _input_name(n, "correlation_report") in inputs
    }
    wide = table1_table(tables, statistic="kendall_tau")
    return _report(wide, format_table1_across, {"datasets": list(tables)})


def _report(
    table: pl.DataFrame, formatter: Callable[..., str], metadata: dict[str, object]
) -> dg.Output[pl.DataFrame]:
    return dg.Output(
        table,
        data_version=frame_version(table),
        metadata={
            "report": dg.MetadataValue.md(formatter(table)),
            "rows": table.height,
            **metadata,
        },
    )


def build_cross_dataset_assets(registry: Registry) -> list[dg.AssetsDefinition]:
    """The reports across datasets that have two or more datasets to compare (module doc)."""
    views = {name: registry.for_dataset(name) for name in registry.datasets}
    judged = list(views)  # whether a dataset has judgments is known once its qrels are read
    labelled = [name for name, view in views.items() if view.reader_labels]
    specs: list[tuple[str, Callable, list[str], tuple[str, ...]]] = [
        ("beir_leaderboard", _beir_leaderboard, judged, ("qrels", "retrieval_run")),
        ("erag_leaderboard", _erag_leaderboard, labelled, ("erag_per_query",)),
        ("table1_across", _table1_across, labelled, ("correlation_report",)),
    ]
    return [
        dg.asset(
            name=name,
            group_name=GROUP,
            code_version=CODE_VERSION,
            automation_condition=RECOMPUTE_WHEN_STALE,
            ins=_ins(datasets, assets),
        )(body)
        for name, body, datasets, assets in specs
        if len(datasets) >= 2
    ]
