"""The main job: materialise every asset through Dagster, in process, partition by partition.

Used by ``erag-dagster run`` (the README's run command). The order comes from the Definitions'
own asset graph (:func:`plan`): a topological order of its assets, declaration order breaking
ties, with every partition of each partitioned asset; a new asset needs no edit here. With
``DAGSTER_HOME`` set, runs are recorded in that instance, so ``dagster dev`` shows them
afterwards; otherwise an ephemeral instance is used.

A full re-evaluation through the run queue, pools and run launcher (instead of in process) is an
asset backfill of every partition: :func:`request_full_reevaluation`, or in the UI "Materialize
all" on the asset lineage, then "All partitions" and "Launch backfill". (An asset job over every
asset is not possible: Dagster's asset jobs need one partitions definition, and this graph has
three: none, retriever, reader x retriever.)
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dagster as dg

from erag_dagster.definitions import build_defs
from erag_dagster.resources import EvalSettings

# Beta/preview notices (data versions, partition mappings) are for developers, not run output.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

Log = Callable[[str], None]

#: The optional stages of the main job (``stages=`` of :func:`materialize_all`), by asset group:
#: the assets of a stage's group and everything downstream of them that is not in a later stage.
_META = dg.AssetSelection.groups("meta_evaluation").downstream()
STAGES: dict[str, dg.AssetSelection] = {
    "labels": dg.AssetSelection.groups("labels").downstream() - _META,
    "meta": _META,
    "efficiency": dg.AssetSelection.groups("efficiency"),
}


def stage_selection(stages: Sequence[str] | None = None) -> dg.AssetSelection:
    """Every asset, less the :data:`STAGES` not named in ``stages`` (``None``: every stage)."""
    selection = dg.AssetSelection.all()
    for name, stage in STAGES.items():
        if stages is not None and name not in stages:
            selection = selection - stage
    return selection


@dataclass(frozen=True)
class Step:
    """Assets materialised together: one run per partition of their partitions definition
    (one run when unpartitioned)."""

    keys: tuple[dg.AssetKey, ...]
    partitions_def: dg.PartitionsDefinition | None

    def partition_keys(self) -> list[str | None]:
        if self.partitions_def is None:
            return [None]
        return list(self.partitions_def.get_partition_keys())


def plan(defs: dg.Definitions, selection: dg.AssetSelection | None = None) -> list[Step]:
    """The selected materialisable assets of ``defs`` in topological order (ties: the order of
    ``defs.assets``), consecutive assets with the same partitions definition in one step.

    The assets of one definition (a multi-asset) stay together.
    """
    graph = defs.resolve_asset_graph()
    wanted = (selection or dg.AssetSelection.all()).resolve(graph)
    nodes = []
    for assets_def in defs.assets or []:
        if isinstance(assets_def, dg.AssetsDefinition) and assets_def.is_materializable:
            declared = assets_def.keys_by_output_name.values()  # outs order (a set: .keys)
            keys = tuple(k for k in declared if k in wanted)
            if keys:
                nodes.append(keys)
    planned = {k for node in nodes for k in node}
    parents = {
        node: {p for k in node for p in graph.get(k).parent_keys if p in planned} - set(node)
        for node in nodes
    }
    done: set[dg.AssetKey] = set()
    steps: list[Step] = []
    pending = list(nodes)
    while pending:
        node = next((n for n in pending if parents[n] <= done), None)
        if node is None:
            raise RuntimeError(f"asset graph has a cycle among {pending}")
        pending.remove(node)
        done |= set(node)
        partitions_def = graph.get(node[0]).partitions_def
        if steps and steps[-1].partitions_def == partitions_def:
            steps[-1] = Step((*steps[-1].keys, *node), partitions_def)
        else:
            steps.append(Step(node, partitions_def))
    return steps


def _instance() -> dg.DagsterInstance:
    return (
        dg.DagsterInstance.get()
        if os.environ.get("DAGSTER_HOME")
        else dg.DagsterInstance.ephemeral()
    )


def materialize_all(
    settings: EvalSettings | None = None,
    instance: dg.DagsterInstance | None = None,
    log: Log = print,
    stages: Sequence[str] | None = None,
    log_level: str = "INFO",
) -> None:
    """Observe the inputs, then materialise the graph step by step (:func:`plan`).

    Partitioned assets are materialised one partition per run (as a user would from the UI);
    the reports read every partition of their upstream. ``stages`` keeps only the named
    optional stages (:data:`STAGES`); ``None`` runs everything.
    """
    settings = settings or EvalSettings()
    defs = build_defs(settings.registry_path or None, settings)
    instance = instance or _instance()
    log("observing dataset_files, reader_models")
    defs.resolve_job_def("observe_inputs").execute_in_process(instance=instance)
    assets = list(defs.assets or [])
    run_config = {"loggers": {"console": {"config": {"log_level": log_level}}}}
    for step in plan(defs, stage_selection(stages)):
        names = ", ".join(k.to_user_string() for k in step.keys)
        for partition_key in step.partition_keys():
            log(f"materialising {names}" + (f" [{partition_key}]" if partition_key else ""))
            dg.materialize(
                assets,
                selection=list(step.keys),
                partition_key=partition_key,
                resources=dict(defs.resources or {}),
                instance=instance,
                run_config=run_config,
            )


def request_full_reevaluation(
    instance: dg.DagsterInstance,
    registry_path: str | None = None,
    title: str = "full re-evaluation",
) -> str:
    """Request an asset backfill of every partition of every materialisable asset (what "Materialize
    all" does in the UI); the daemon runs it through the run queue, pools and launcher, in
    dependency order across the partitions definitions. Returns the backfill id."""
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id

    graph = build_defs(registry_path).resolve_asset_graph()
    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=make_new_backfill_id(),
        asset_graph=graph,
        partition_names=None,
        asset_selection=sorted(graph.materializable_asset_keys),
        backfill_timestamp=time.time(),
        tags={},
        dynamic_partitions_store=instance,
        all_partitions=True,
        title=title,
        description="every partition of every asset",
        run_config=None,
    )
    instance.add_backfill(backfill)
    return backfill.backfill_id


def load_asset_value(key: str, instance: dg.DagsterInstance | None = None, registry_path: str = ""):
    """Read a materialised unpartitioned asset's value through the IO manager."""
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
