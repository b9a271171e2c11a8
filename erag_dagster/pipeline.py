"""The main job: materialise every asset through Dagster, in process, partition by partition.

Used by ``erag-dagster run`` (the README's run command). With ``DAGSTER_HOME`` set, runs are
recorded in that instance, so ``dagster dev`` shows them afterwards; otherwise an ephemeral
instance is used.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence

import dagster as dg

from erag_dagster.definitions import SOURCE_ASSETS, build_assets, build_resources
from erag_dagster.registry import load_registry
from erag_dagster.resources import EvalSettings

# Beta/preview notices (data versions, partition mappings) are for developers, not run output.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

UNPARTITIONED_INPUTS = ["corpus", "queries", "qrels", "bm25_index", "dense_index"]
Log = Callable[[str], None]


def _instance() -> dg.DagsterInstance:
    return (
        dg.DagsterInstance.get()
        if os.environ.get("DAGSTER_HOME")
        else dg.DagsterInstance.ephemeral()
    )


def _keys_in_graph(assets: Sequence[dg.AssetsDefinition]) -> set[str]:
    keys: set[str] = set()
    for asset in assets:
        keys |= {k.to_user_string() for k in asset.keys}
    return keys


def materialize_all(
    settings: EvalSettings | None = None,
    instance: dg.DagsterInstance | None = None,
    log: Log = print,
    stages: Sequence[str] | None = None,
    log_level: str = "INFO",
) -> None:
    """Materialise the whole graph: dataset → indexes → runs → labels → reports.

    Partitioned assets are materialised one partition per run (as a user would from the UI);
    the reports read every partition of their upstream.
    """
    settings = settings or EvalSettings()
    resources = build_resources(settings.registry_path)
    resources["settings"] = settings
    instance = instance or _instance()
    registry = load_registry(settings.registry_path or None)
    assets = build_assets(registry)
    present = _keys_in_graph(assets)

    def run(selection: list[str], partition_key: str | None = None) -> None:
        selection = [s for s in selection if s in present]
        if not selection:
            return
        label = f"{', '.join(selection)}" + (f" [{partition_key}]" if partition_key else "")
        log(f"materialising {label}")
        dg.materialize(
            [*SOURCE_ASSETS, *assets],
            selection=selection,
            partition_key=partition_key,
            resources=resources,
            instance=instance,
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        )

    wanted = set(stages) if stages else None

    def stage(name: str) -> bool:
        return wanted is None or name in wanted

    observe_inputs(settings, instance, resources, log)
    run(UNPARTITIONED_INPUTS)
    for retriever in registry.retriever_partitions:
        run(["retrieval_run"], retriever)
    run(["retrieval_report"])
    if stage("labels"):
        for reader in registry.reader_partitions:
            for retriever in registry.retriever_partitions:
                run(["doc_labels"], f"{reader}|{retriever}")
        run(["erag_per_query", "erag_report"])
    if stage("meta"):
        for reader in registry.reader_partitions:
            for retriever in registry.retriever_partitions:
                run(["end_to_end", "baseline_labels"], f"{reader}|{retriever}")
        run(["correlation_report", "label_agreement"])
    if stage("efficiency"):
        run(["efficiency_report"])


def observe_inputs(
    settings: EvalSettings, instance: dg.DagsterInstance, resources: dict, log: Log = print
) -> None:
    """Record the data versions (content hashes) of the dataset and reader model files, so the
    automation and the schedule start from what this run used."""
    from erag_dagster.definitions import build_defs

    log("observing dataset_files, reader_models")
    job = build_defs(settings.registry_path or None).resolve_job_def("observe_inputs")
    job.execute_in_process(instance=instance, resources=resources)


def load_asset_value(key: str, instance: dg.DagsterInstance | None = None, registry_path: str = ""):
    """Read a materialised unpartitioned asset's value through the IO manager."""
    from erag_dagster.definitions import build_defs

    defs = build_defs(registry_path or None)
    with defs.get_asset_value_loader(instance=instance or _instance()) as loader:
        return loader.load_asset_value(key)


def print_reports(
    instance: dg.DagsterInstance | None = None,
    registry_path: str = "",
    only: Sequence[str] | None = None,
) -> None:
    """Print the report assets that exist, as terminal tables."""
    from erag_dagster.reports.tables import format_table

    titles = {
        "retrieval_report": "Retrieval quality against human/provenance judgments (pytrec_eval)",
        "erag_report": "eRAG: list metrics on per-document reader labels, per retriever",
        "correlation_report": "Meta-evaluation: Kendall tau-b with end-to-end quality "
        "(bootstrap 95% CI; * = best per column)",
        "label_agreement": "Agreement of automatic labels with the human judgments (Cohen's kappa)",
        "efficiency_report": "Efficiency: end-to-end vs eRAG (query- / document-level batching)",
    }
    for key, title in titles.items():
        if only is not None and key not in only:
            continue
        try:
            frame = load_asset_value(key, instance, registry_path)
        except Exception as exc:  # a report not materialised yet is not an error here
            print(f"\n{title}: not available ({type(exc).__name__})")
            continue
        print(f"\n== {title} ==")
        if key == "correlation_report" and frame.height:
            from erag_dagster.reports.tables import format_table1

            print(format_table1(frame, statistic="kendall_tau"))
        elif key == "retrieval_report" and frame.height:
            from erag_dagster.reports.leaderboard import format_leaderboard

            print(format_table(format_leaderboard(frame)))
            print("(mean [95% bootstrap CI]; vs the first retriever: difference, permutation p)")
        else:
            print(format_table(frame))
