"""The one ``Definitions`` object: assets, resources, jobs, schedules and sensors.

Partitions come from the registry (``$ERAG_REGISTRY`` or the packaged ``registry.yaml``), so the
asset graph is built by :func:`build_defs`; ``defs`` is the graph of the default registry.
"""

import dagster as dg

from erag_dagster.assets import automation, data, labels, meta, retrieval
from erag_dagster.registry import Registry, load_registry
from erag_dagster.resources import EvalSettings, LabelStoreResource, ReaderResource
from erag_dagster.resources.io import PolarsJsonIOManagerFactory

SOURCE_ASSETS = [automation.dataset_files, automation.reader_models]


def build_assets(registry: Registry) -> list[dg.AssetsDefinition]:
    """Every materialisable asset, with partitions named by the registry's configs."""
    return [
        data.dataset_tables,
        retrieval.bm25_index,
        retrieval.dense_index,
        retrieval.build_retrieval_run(registry),
        retrieval.retrieval_report,
        labels.build_doc_labels(registry),
        labels.erag_per_query,
        labels.erag_report,
        *meta.build_meta_partitioned(registry),
        meta.correlation_report,
        meta.label_agreement,
        meta.efficiency_report,
    ]


def build_resources(registry_path: str = "") -> dict[str, object]:
    """Single-machine defaults; everything is overridable through run config or env vars."""
    return {
        "settings": EvalSettings(registry_path=registry_path),
        "reader": ReaderResource(),
        "label_store": LabelStoreResource(),
        "io_manager": PolarsJsonIOManagerFactory(),
    }


@dg.op(required_resource_keys={"settings"})
def materialize_everything(context: dg.OpExecutionContext) -> None:
    """Re-run every asset and partition in order (the same path as ``erag-dagster run``)."""
    from erag_dagster.pipeline import materialize_all

    materialize_all(context.resources.settings, instance=context.instance, log=context.log.info)


@dg.job(description="Explicit full re-evaluation for audits: every asset, every partition.")
def full_reevaluation() -> None:
    materialize_everything()


def build_defs(registry_path: str | None = None) -> dg.Definitions:
    """The Definitions for a registry file (default: ``$ERAG_REGISTRY`` or the packaged one)."""
    registry = load_registry(registry_path)
    return dg.Definitions(
        assets=[*SOURCE_ASSETS, *build_assets(registry)],
        jobs=[automation.observe_inputs_job, full_reevaluation],
        schedules=[automation.reevaluation_schedule],
        sensors=[automation.automation_sensor],
        resources=build_resources(registry_path or ""),
    )


defs = build_defs()
