"""Declarative automation, observed external inputs, the re-evaluation schedule and jobs.

* Every asset carries :data:`RECOMPUTE_WHEN_STALE`: run when a partition is missing (a new
  registry config = a new partition key; ``missing`` rather than ``newly_missing``, because a
  changed partitions definition resets the sensor's memory of what was missing), when an
  upstream *data version* changed (a re-materialisation that yields identical data changes
  nothing downstream), or when the asset's own ``code_version`` changed — and never while an
  input is missing or in progress. The automation condition sensor runs by default. The
  efficiency report (a benchmark) is not automated.
* ``dataset_files`` and ``reader_models`` are observable source assets whose data versions are
  content hashes of the dataset files and the readers' model files.
* ``reevaluation_schedule`` (cron from the registry's ``evaluation.schedule``) observes them only
  when a hash differs from the last observed one, and requests nothing otherwise; automation
  then recomputes exactly what depends on the changed input.
* A full re-evaluation (every partition of every asset) is an asset backfill:
  :func:`erag_dagster.pipeline.request_full_reevaluation`, or "Materialize all" in the UI.
"""

import json

import dagster as dg
from dagster._utils.schedules import is_valid_cron_string

from erag_dagster.errors import InputError
from erag_dagster.hashing import sha256_text
from erag_dagster.inputs import dataset_digest
from erag_dagster.registry import Registry
from erag_dagster.resources import EvalSettings

AC = dg.AutomationCondition

#: Upstream data changed (ignoring updates made by the same run that targets this asset).
ANY_DEP_DATA_CHANGED = AC.any_deps_match(
    AC.data_version_changed() & ~AC.executed_with_root_target()
).with_label("any_dep_data_version_changed")

RECOMPUTE_WHEN_STALE = (
    (AC.missing() | ANY_DEP_DATA_CHANGED | AC.code_version_changed()).since_last_handled()
    & ~AC.any_deps_missing()
    & ~AC.any_deps_in_progress()
    & ~AC.in_progress()
).with_label("eager_on_data_version_or_code_change")

DEFAULT_CRON = "0 3 * * *"


def reader_digest(name: str, config: dict) -> str:
    """The reader fingerprint: model file hash, libraries, prompt, decoding (no model load)."""
    from erag_dagster.readers.transformers_reader import reader_from_config

    return reader_from_config(name, config).fingerprint


def current_input_versions(dataset_spec: str, registry: Registry) -> dict[str, str]:
    """What the observable inputs would report now: ``{asset key: data version}``."""
    readers = {
        entry.partition_key: reader_digest(entry.name, entry.config)
        for entry in registry.readers.values()
    }
    reader_version = sha256_text(json.dumps(readers, sort_keys=True))[:16]
    return {"dataset_files": dataset_digest(dataset_spec), "reader_models": reader_version}


@dg.observable_source_asset(group_name="inputs")
def dataset_files(settings: EvalSettings) -> dg.DataVersion:
    """The dataset's files (content hash); the embedded sample's file for ``sample``."""
    return dg.DataVersion(dataset_digest(settings.resolve().dataset))


@dg.observable_source_asset(group_name="inputs")
def reader_models(settings: EvalSettings) -> dg.DataVersion:
    """Every registry reader's model file(s) and config (content hash)."""
    versions = current_input_versions(settings.resolve().dataset, settings.registry())
    return dg.DataVersion(versions["reader_models"])


observe_inputs_job = dg.define_asset_job(
    "observe_inputs", selection=dg.AssetSelection.keys("dataset_files", "reader_models")
)


def schedule_cron(registry: Registry) -> str:
    """The registry's ``evaluation.schedule`` (default :data:`DEFAULT_CRON`), validated."""
    cron = str(registry.evaluation.get("schedule", DEFAULT_CRON))
    if not is_valid_cron_string(cron):
        raise InputError(f"{registry.path}: evaluation.schedule {cron!r} is not a cron string")
    return cron


def _observed_version(record) -> str | None:
    """The data version carried by the last observation/materialisation record, if any."""
    if record is None:
        return None
    event = record.event_log_entry.asset_observation or record.event_log_entry.asset_materialization
    return (event.tags or {}).get("dagster/data_version") if event is not None else None


def _reevaluation(context: dg.ScheduleEvaluationContext, settings: EvalSettings):
    """Observe the inputs when one changed; request nothing when all are unchanged."""
    now = current_input_versions(settings.resolve().dataset, settings.registry())
    changed = []
    for key, version in now.items():
        record = context.instance.get_latest_data_version_record(dg.AssetKey(key), is_source=True)
        last = _observed_version(record)
        if last != version:
            changed.append(key)
    if not changed:
        return dg.SkipReason("dataset and reader model files unchanged since the last observation")
    return dg.RunRequest(run_key=f"inputs-{'-'.join(now[k] for k in sorted(now))}",
                         tags={"erag/changed_inputs": ",".join(changed)})  # fmt: skip


def build_reevaluation_schedule(registry: Registry) -> dg.ScheduleDefinition:
    """``reevaluation_schedule`` on the cron of ``registry`` (see :func:`schedule_cron`)."""
    return dg.schedule(
        name="reevaluation_schedule",
        cron_schedule=schedule_cron(registry),
        job=observe_inputs_job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )(_reevaluation)


automation_sensor = dg.AutomationConditionSensorDefinition(
    "default_automation_condition_sensor",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
)
