"""Declarative automation, observed external inputs, the re-evaluation schedule and jobs.

* Every asset carries :data:`RECOMPUTE_WHEN_STALE`: run when a partition is missing (a new
  registry config = a new partition key; ``missing`` rather than ``newly_missing``, because a
  changed partitions definition resets the sensor's memory of what was missing), when an
  upstream *data version* changed (a re-materialisation that yields identical data changes
  nothing downstream), or when the asset's own ``code_version`` changed — and never while an
  input is missing, in progress, or itself due to be recomputed (:data:`DUE`): after an edit
  of the dataset, ``queries`` changes first; ``retrieval_run`` and ``doc_labels`` both read it,
  and ``doc_labels`` waits until ``retrieval_run`` has been recomputed from the new questions,
  instead of labelling the stale run (issue 42). The automation condition sensor runs by
  default. The efficiency report (a benchmark) is not automated.
* ``dataset_files`` and ``reader_models`` are observable source assets whose data versions are
  content hashes of the dataset files and the readers' fingerprints; ``reader_models`` has one
  partition per registry reader, mapped to the reader dimension of the reader x retriever
  assets, so a reader's change reaches only that reader's partitions (with its own version as
  their ``dagster/input_data_version/reader_models``: :func:`reader_lineage_tags`).
* ``input_change_sensor`` (every 60 s, running by default) and ``reevaluation_schedule`` (cron
  from the registry's ``evaluation.schedule``) observe them when a version differs from the last
  observed one or was never observed (a fresh deployment: Dagster counts an unobserved source as
  missing, which would block every asset), and request nothing otherwise; automation then
  recomputes exactly what depends on the changed input.
* A full re-evaluation (every partition of every asset) is an asset backfill:
  :func:`erag_dagster.orchestration.pipeline.request_full_reevaluation`, or "Materialize all" in the
  UI.
"""

import json
import os
from collections.abc import Sequence
from typing import Any, TypeAlias

import dagster as dg

from erag_dagster.config.inputs import dataset_digest
from erag_dagster.config.registry import Registry
from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_text
from erag_dagster.orchestration.assets.adapter import adapt
from erag_dagster.orchestration.resources import EvalSettings
from erag_dagster.orchestration.resources.keys import UNPREFIXED, ResourceKeys, prefixed_name

AC = dg.AutomationCondition

#: Upstream data changed (ignoring updates made by the same run that targets this asset).
ANY_DEP_DATA_CHANGED = AC.any_deps_match(
    AC.data_version_changed() & ~AC.executed_with_root_target()
).with_label("any_dep_data_version_changed")

DUE = (
    (AC.missing() | ANY_DEP_DATA_CHANGED | AC.code_version_changed())
    .since_last_handled()
    .with_label("due")
)
"""An asset partition is *due*: missing, an input's data version changed or its own code
version changed since it was last requested or updated. A due partition that is not requested
yet (it waits for its own inputs) is stale; what reads it waits for it."""

RECOMPUTE_WHEN_STALE = (
    DUE
    & ~AC.any_deps_missing()
    & ~AC.any_deps_in_progress()
    & ~AC.any_deps_match(DUE).with_label("any_dep_due")
    & ~AC.in_progress()
).with_label("eager_on_data_version_or_code_change")


def reader_digest(name: str, config: dict) -> str:
    """The reader fingerprint: model file hash, libraries, prompt, decoding (no model load)."""
    from erag_dagster.readers.factory import reader_from_config

    return reader_from_config(name, config).fingerprint


READER_MODELS = dg.AssetKey("reader_models")
DATASET_FILES = dg.AssetKey("dataset_files")

READER_MODELS_BY_READER = dg.AssetDep(
    READER_MODELS,
    partition_mapping=dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="reader"),
)
"""A reader x retriever partition depends on its own reader's ``reader_models`` partition only."""


def dataset_files_key(dataset: str | None, key_prefix: Sequence[str] = ()) -> dg.AssetKey:
    """``dataset_files``, prefixed by the registry dataset's name when there is one, and by the
    eRAG component's ``key_prefix`` (:mod:`erag_dagster.orchestration.component`) before it."""
    return DATASET_FILES.with_prefix([*key_prefix, *([dataset] if dataset else [])])


def reader_models_key(context: dg.AssetExecutionContext) -> dg.AssetKey:
    """The ``reader_models`` key the running asset depends on (under a key prefix, if any)."""
    deps = context.assets_def.asset_deps[context.asset_key]
    return next((k for k in deps if k.path[-1] == READER_MODELS.path[-1]), READER_MODELS)


def current_input_versions(
    settings: EvalSettings, key_prefix: Sequence[str] = ()
) -> dict[tuple[dg.AssetKey, str | None], str]:
    """What the observable inputs would report now: ``{(asset key, partition): data version}``
    (partition ``None`` for each dataset's ``dataset_files``; one entry per registry reader
    partition of ``reader_models``); keys under ``key_prefix``."""
    registry = settings.registry()
    versions: dict[tuple[dg.AssetKey, str | None], str] = {
        (dataset_files_key(name, key_prefix), None): dataset_digest(settings.resolve(name).dataset)
        for name in registry.dataset_names
    }
    reader_models = READER_MODELS.with_prefix(list(key_prefix))
    for entry in registry.readers.values():
        versions[(reader_models, entry.partition_key)] = reader_digest(entry.name, entry.config)
    return versions


def build_dataset_files(
    dataset: str | None, key_prefix: Sequence[str] = (), keys: ResourceKeys = UNPREFIXED
) -> dg.SourceAsset:
    """``dataset_files`` of one registry dataset (``None``: the only one, unprefixed), under
    ``key_prefix``, its ``settings`` resource under ``keys``."""

    def dataset_files(settings: EvalSettings) -> dg.DataVersion:
        """The dataset's files (content hash); the embedded sample's file for ``sample``."""
        return dg.DataVersion(dataset_digest(settings.resolve(dataset).dataset))

    return dg.observable_source_asset(
        name="dataset_files",
        key_prefix=[*key_prefix, *([dataset] if dataset else [])] or None,
        group_name="inputs",
    )(adapt(dataset_files, keys))


def build_reader_models(
    registry: Registry, key_prefix: Sequence[str] = (), keys: ResourceKeys = UNPREFIXED
) -> dg.SourceAsset:
    """``reader_models``, partitioned by registry reader: each partition's data version is that
    reader's fingerprint (model files, libraries, dtype, prompt, decoding), so one reader's
    change is one partition's new version and reaches only that reader's partitions downstream.
    Its ``settings`` resource is under ``keys``.
    """

    def reader_models(settings: EvalSettings) -> dg.DataVersionsByPartition:
        """Every registry reader's model file(s) and config (its fingerprint), per reader."""
        return dg.DataVersionsByPartition(
            {
                entry.partition_key: dg.DataVersion(reader_digest(entry.name, entry.config))
                for entry in settings.registry().readers.values()
            }
        )

    return dg.observable_source_asset(
        name="reader_models",
        key_prefix=list(key_prefix) or None,
        group_name="inputs",
        partitions_def=dg.StaticPartitionsDefinition(registry.reader_partitions),
    )(adapt(reader_models, keys))


def reader_lineage_tags(
    instance: dg.DagsterInstance, reader_partition: str, key: dg.AssetKey = READER_MODELS
) -> dict[str, str]:
    """The ``dagster/input_data_version|input_event_pointer/reader_models`` tags of an output made
    with ``reader_partition``: the data version last observed for *that* reader's partition.

    Dagster 1.13 computes a partitioned input's version from upstream *materialisations* only
    (``DataVersionCache._get_partitions_data_version_from_keys``: "TODO: this needs to account for
    observations also"), so for an observed source it records sha256 of nothing; an output's
    own tags take precedence over those. Empty when the partition was never observed.
    ``key``: ``reader_models`` under the component's key prefix (:func:`reader_models_key`).
    The tag names are Dagster's documented ``dagster/input_data_version/<asset key>`` and
    ``dagster/input_event_pointer/<asset key>`` (the key as ``to_user_string`` writes it).
    """
    record = instance.get_latest_data_version_record(
        key, is_source=True, partition_key=reader_partition
    )
    version = _observed_version(record)
    if record is None or version is None:
        return {}
    return {
        f"dagster/input_data_version/{key.to_user_string()}": version,
        f"dagster/input_event_pointer/{key.to_user_string()}": str(record.storage_id),
    }


OBSERVE_INPUTS = "observe_inputs"

#: What ``dg.define_asset_job`` returns: a job resolved against the asset graph when the
#: Definitions load (Dagster does not export its class, so the hint cannot name it).
AssetJob: TypeAlias = Any


def named(name: str, key_prefix: Sequence[str] = ()) -> str:
    """A job, schedule or sensor name under the component's key prefix (``team__erag__name``
    for ``[team, erag]``), so it cannot clash with one of the user's project."""
    return prefixed_name(name, key_prefix)


def build_observe_inputs_job(registry: Registry, key_prefix: Sequence[str] = ()) -> AssetJob:
    """``observe_inputs``: every dataset's ``dataset_files`` and ``reader_models``."""
    keys = [dataset_files_key(name, key_prefix) for name in registry.dataset_names]
    return dg.define_asset_job(
        named(OBSERVE_INPUTS, key_prefix),
        selection=dg.AssetSelection.assets(*keys, READER_MODELS.with_prefix(list(key_prefix))),
    )


def schedule_cron(registry: Registry) -> str:
    """The registry's ``evaluation.schedule`` (its default: :mod:`erag_dagster.config.
    evaluation`), validated as a cron string."""
    cron = registry.evaluation.schedule
    if not is_valid_cron(cron):
        raise InputError(f"{registry.path}: evaluation.schedule {cron!r} is not a cron string")
    return cron


def is_valid_cron(cron: str) -> bool:
    """Whether Dagster accepts ``cron`` as a schedule's cron string (five fields, no seconds,
    no 30th/31st of February): asked of Dagster's public ``ScheduleDefinition`` itself, which
    refuses any other string with ``DagsterInvalidDefinitionError``."""
    try:
        dg.ScheduleDefinition(name="cron_check", cron_schedule=cron, job_name="cron_check")
    except dg.DagsterInvalidDefinitionError:
        return False
    return True


def _observed_version(record) -> str | None:
    """The data version carried by the last observation/materialisation record, if any."""
    if record is None:
        return None
    event = record.event_log_entry.asset_observation or record.event_log_entry.asset_materialization
    return (event.tags or {}).get("dagster/data_version") if event is not None else None


def changed_inputs(
    instance: dg.DagsterInstance, settings: EvalSettings, key_prefix: Sequence[str] = ()
) -> dict[str, str]:
    """The inputs whose current version differs from the last observed one (never observed
    counts as changed): ``{"asset" or "asset[partition]": current version}``."""
    changed = {}
    for (key, partition), version in current_input_versions(settings, key_prefix).items():
        record = instance.get_latest_data_version_record(
            key, is_source=True, partition_key=partition
        )
        if _observed_version(record) != version:
            name = key.to_user_string()
            changed[f"{name}[{partition}]" if partition else name] = version
    return changed


def _observation_request(
    instance: dg.DagsterInstance, settings: EvalSettings, what: str, key_prefix: Sequence[str]
):
    """A run of ``observe_inputs`` when an input changed (run key: the new versions, so one
    change is observed once); a skip reason naming ``what`` was checked otherwise."""
    changed = changed_inputs(instance, settings, key_prefix)
    if not changed:
        return dg.SkipReason(f"{what}: dataset and reader model files unchanged since observed")
    run_key = sha256_text(json.dumps(changed, sort_keys=True))[:16]
    return dg.RunRequest(
        run_key=f"inputs-{run_key}",
        tags={"erag/changed_inputs": ",".join(sorted(changed))},
    )


def build_reevaluation_schedule(
    registry: Registry,
    job: AssetJob,
    key_prefix: Sequence[str] = (),
    keys: ResourceKeys = UNPREFIXED,
) -> dg.ScheduleDefinition:
    """``reevaluation_schedule`` on the cron of ``registry`` (see :func:`schedule_cron`),
    running ``job`` (:func:`build_observe_inputs_job`); its ``settings`` under ``keys``."""

    def reevaluation(context: dg.ScheduleEvaluationContext, settings: EvalSettings):
        """Observe the inputs when one changed; request nothing when all are unchanged."""
        return _observation_request(context.instance, settings, "schedule", key_prefix)

    return dg.schedule(
        name=named("reevaluation_schedule", key_prefix),
        cron_schedule=schedule_cron(registry),
        job=job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )(adapt(reevaluation, keys))


def sensor_interval_s(default: int) -> int:
    """``$ERAG_SENSOR_INTERVAL_S`` (seconds, >= 1; tests lower it) or ``default``."""
    raw = os.environ.get("ERAG_SENSOR_INTERVAL_S", "")
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise InputError(f"ERAG_SENSOR_INTERVAL_S={raw!r}: must be an integer >= 1 (seconds)")
    return int(raw)


def build_input_change_sensor(
    job: AssetJob, key_prefix: Sequence[str] = (), keys: ResourceKeys = UNPREFIXED
) -> dg.SensorDefinition:
    """``input_change_sensor`` (running by default, every 60 s): requests an observation of the
    inputs when one differs from its last observation, or was never observed — so a fresh
    deployment observes its inputs on the first tick and then builds the graph, and a changed
    model file, dataset file or a new reader partition (a registry edit, once the code location
    is reloaded) is observed within a minute. Hashes are cached by (path, size, mtime)
    (:func:`erag_dagster.config.inputs.file_digest`), so an unchanged tick reads no file content."""

    def input_change_sensor(context: dg.SensorEvaluationContext, settings: EvalSettings):
        """Observe the inputs when one changed (or was never observed); else skip."""
        return _observation_request(context.instance, settings, "sensor", key_prefix)

    return dg.sensor(
        name=named("input_change_sensor", key_prefix),
        job=job,
        minimum_interval_seconds=sensor_interval_s(60),
        default_status=dg.DefaultSensorStatus.RUNNING,
    )(adapt(input_change_sensor, keys))


def build_automation_sensor(
    key_prefix: Sequence[str] = (),
) -> dg.AutomationConditionSensorDefinition:
    """The declarative-automation sensor (running by default) over every asset, or, under the
    component's ``key_prefix``, over the eRAG assets only (the user's own assets keep theirs)."""
    return dg.AutomationConditionSensorDefinition(
        named("default_automation_condition_sensor", key_prefix),
        target=(
            dg.AssetSelection.key_prefixes(list(key_prefix))
            if key_prefix
            else dg.AssetSelection.all()
        ),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=sensor_interval_s(30),
    )
