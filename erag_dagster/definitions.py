"""The one ``Definitions`` object: assets, resources, jobs, schedules and sensors."""


import dagster as dg

from erag_dagster.assets import automation, data, labels, meta, retrieval
from erag_dagster.resources import EvalSettings, LabelStoreResource, ReaderResource
from erag_dagster.resources.io import PolarsJsonIOManagerFactory

ALL_ASSETS = [*dg.load_assets_from_modules([data, retrieval, labels, meta])]
SOURCE_ASSETS = [automation.dataset_files, automation.reader_models]


def build_resources() -> dict[str, object]:
    """Single-machine defaults; everything is overridable through run config or env vars."""
    return {
        "settings": EvalSettings(),
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


defs = dg.Definitions(
    assets=[*SOURCE_ASSETS, *ALL_ASSETS],
    jobs=[automation.observe_inputs_job, full_reevaluation],
    schedules=[automation.reevaluation_schedule],
    sensors=[automation.automation_sensor],
    resources=build_resources(),
)
