"""Declarative automation and the re-evaluation schedule on a materialised instance.

Proves with ``dagster.evaluate_automation_conditions`` that: nothing changed → nothing runs; a
changed retriever config → only that retriever's partitions; a changed reader → only that
reader's partitions; and that the schedule requests nothing while its inputs are unchanged.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from erag_dagster.config.registry import load_registry
from erag_dagster.orchestration.assets.automation import reader_digest
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import materialize_all
from erag_dagster.orchestration.resources import EvalSettings
from tests.answer_seed import shared_answers
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, shared_data: Path):
    root = tmp_path_factory.mktemp("automation")
    home = write_instance_yaml(root / "dagster_home")
    with scoped_env(ERAG_STORAGE=str(root / "storage"), DAGSTER_HOME=str(home)):
        # a dataset in files we can edit: 4 SQuAD questions as generic jsonl tables
        from erag_dagster.data.loaders import load_dataset

        ds = load_dataset("sample?max_questions=4")
        data_dir = root / "data"
        data_dir.mkdir()
        ds.corpus.write_ndjson(data_dir / "corpus.jsonl")
        ds.queries.write_ndjson(data_dir / "queries.jsonl")
        ds.qrels.write_ndjson(data_dir / "qrels.jsonl")
        registry = small_registry(root / "base", dataset=f"jsonl:{data_dir}")
        instance = dg.DagsterInstance.from_config(str(home))
        settings = EvalSettings(registry_path=str(registry))
        with shared_answers(tmp_path_factory):
            materialize_all(
                settings, instance=instance, stages=["labels", "meta"], log=lambda m: None
            )
        yield {"root": root, "registry": registry, "instance": instance, "data": data_dir}


def _pair(reader: str, retriever: str) -> str:
    return str(dg.MultiPartitionKey({"reader": reader, "retriever": retriever}))


def requested(result) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for key in result._requested_partitions_by_asset_key:
        parts = result.get_requested_partitions(key)
        out[key.to_user_string()] = {str(p) for p in parts}
    return {k: v for k, v in out.items() if v}


@pytest.mark.slow
def test_nothing_changed_requests_nothing(world) -> None:
    defs = build_defs(str(world["registry"]))
    first = dg.evaluate_automation_conditions(defs=defs, instance=world["instance"])
    second = dg.evaluate_automation_conditions(
        defs=defs, instance=world["instance"], cursor=first.cursor
    )
    assert requested(first) == {}
    assert requested(second) == {}


@pytest.mark.slow
def test_changed_retriever_requests_only_its_partitions(world) -> None:
    base = build_defs(str(world["registry"]))
    tick = dg.evaluate_automation_conditions(defs=base, instance=world["instance"])
    edited = small_registry(
        world["root"] / "bm25-edit", dataset=load_registry(world["registry"]).evaluation.dataset,
        **{"retrievers.bm25.k1": 1.2},
    )  # fmt: skip
    new_bm25 = load_registry(edited).retriever("bm25").partition_key
    new_hybrid = load_registry(edited).retriever("hybrid").partition_key
    old = load_registry(world["registry"])
    assert new_bm25 != old.retriever("bm25").partition_key
    assert load_registry(edited).retriever("dense").partition_key == (
        old.retriever("dense").partition_key
    )
    result = dg.evaluate_automation_conditions(
        defs=build_defs(str(edited)), instance=world["instance"], cursor=tick.cursor
    )
    # the new bm25 partition runs, and so does the hybrid that fuses bm25 (its config hash
    # covers bm25's, so it is a new partition too); their labels wait for them (input missing);
    # the unchanged dense retriever and every existing label partition are not touched.
    assert requested(result) == {"retrieval_run": {new_bm25, new_hybrid}}

    # run what was requested; the next tick asks for exactly those retrievers' labels and the
    # reports that read every retriever, and nothing for dense
    edited_defs = build_defs(str(edited))
    for part in (new_bm25, new_hybrid):
        dg.materialize(
            list(edited_defs.assets), selection=["retrieval_run"], partition_key=part,
            resources=dict(edited_defs.resources), instance=world["instance"],
        )  # fmt: skip
    after = dg.evaluate_automation_conditions(
        defs=edited_defs, instance=world["instance"], cursor=result.cursor
    )
    reader = load_registry(edited).reader_partitions[0]
    got = requested(after)
    assert got["doc_labels"] == {_pair(reader, new_bm25), _pair(reader, new_hybrid)}
    assert "retrieval_run" not in got
    assert set(got) <= {"doc_labels", "end_to_end", "baseline_labels", "retrieval_report"}


@pytest.mark.slow
def test_changed_reader_requests_only_its_partitions(world) -> None:
    base = build_defs(str(world["registry"]))
    tick = dg.evaluate_automation_conditions(defs=base, instance=world["instance"])
    edited = small_registry(
        world["root"] / "reader-edit",
        dataset=load_registry(world["registry"]).evaluation.dataset,
        **{"readers.smollm2-135m.max_new_tokens": 12},
    )
    registry = load_registry(edited)
    new_reader = registry.reader("smollm2-135m").partition_key
    edited_defs = build_defs(str(edited))
    # the new reader partition of reader_models is not observed yet: its labels wait for it
    blocked = dg.evaluate_automation_conditions(
        defs=edited_defs, instance=world["instance"], cursor=tick.cursor
    )
    assert "doc_labels" not in requested(blocked)
    # what input_change_sensor requests on its next tick: an observation of the new partition
    sensor = _sensor_result(edited_defs, world["instance"])
    assert sensor.tags["erag/changed_inputs"] == f"reader_models[{new_reader}]"
    observe = edited_defs.resolve_job_def("observe_inputs")
    assert observe.execute_in_process(instance=world["instance"]).success
    result = dg.evaluate_automation_conditions(
        defs=edited_defs, instance=world["instance"], cursor=blocked.cursor
    )
    expected = {_pair(new_reader, r) for r in registry.retriever_partitions}
    got = requested(result)
    assert got.get("doc_labels") == expected
    assert set(got) <= {"doc_labels", "end_to_end", "baseline_labels"}
    assert "retrieval_run" not in got


def _schedule_result(world):
    """One evaluation of the schedule, its context exited after: the instance copy the context
    enters (``DagsterInstance.from_ref``) sets Dagster's current definitions-state storage, and
    a context dropped unexited left that storage behind with its instance collected, failing a
    later ``execute_in_process`` in the same test ("undefined DagsterInstance weakref", when
    the garbage collector ran in between)."""
    defs = build_defs(str(world["registry"]))
    with dg.build_schedule_context(
        instance=world["instance"], resources={"settings": defs.resources["settings"]}
    ) as context:
        return defs.resolve_schedule_def("reevaluation_schedule")(context)


@pytest.mark.slow
def test_schedule_observes_only_when_inputs_change(world) -> None:
    defs = build_defs(str(world["registry"]))
    job = defs.resolve_job_def("observe_inputs")
    # the main job observed its inputs: unchanged since, so nothing is requested
    assert isinstance(_schedule_result(world), dg.SkipReason)
    assert isinstance(_schedule_result(world), dg.SkipReason)
    queries = world["data"] / "queries.jsonl"
    original = queries.read_text()
    try:
        # a dataset file changes: the schedule requests an observation naming it
        queries.write_text(original.replace("?", " ?", 1))
        changed = _schedule_result(world)
        assert isinstance(changed, dg.RunRequest)
        assert changed.tags["erag/changed_inputs"] == "dataset_files"
        assert job.execute_in_process(instance=world["instance"]).success
        # observed: nothing more to request
        assert isinstance(_schedule_result(world), dg.SkipReason)
    finally:
        queries.write_text(original)
    # back to the original content: a change again, relative to the last observation
    assert isinstance(_schedule_result(world), dg.RunRequest)


def test_schedule_cron_comes_from_the_definitions_registry(tmp_path: Path) -> None:
    from erag_dagster.core.errors import InputError

    packaged = build_defs().resolve_schedule_def("reevaluation_schedule")
    assert packaged.cron_schedule == load_registry().evaluation.schedule
    weekly = small_registry(tmp_path / "weekly", **{"evaluation.schedule": "15 4 * * 1"})
    schedule = build_defs(str(weekly)).resolve_schedule_def("reevaluation_schedule")
    assert schedule.cron_schedule == "15 4 * * 1"
    broken = small_registry(tmp_path / "broken", **{"evaluation.schedule": "every night"})
    with pytest.raises(
        InputError, match=r"evaluation\.schedule is 'every night'; it must be a cron"
    ):
        build_defs(str(broken))  # refused by the registry (EvaluationConfig: five fields)
    minute = small_registry(tmp_path / "minute", **{"evaluation.schedule": "61 * * * *"})
    with pytest.raises(InputError, match=r"evaluation\.schedule '61 \* \* \* \*' is not a cron"):
        build_defs(str(minute))  # five fields, refused by Dagster's own cron check


def _sensor_result(defs: dg.Definitions, instance: dg.DagsterInstance):
    """One tick of the input sensor, its context exited after (as :func:`_schedule_result`)."""
    with dg.build_sensor_context(
        instance=instance, resources={"settings": defs.resources["settings"]}
    ) as context:
        return defs.resolve_sensor_def("input_change_sensor")(context)


def test_fresh_instance_sensor_observes_every_input(tmp_path: Path) -> None:
    """A fresh deployment: nothing observed, so the sensor's first tick requests the observation
    (each reader partition named); once observed, it requests nothing."""
    registry = small_registry(
        tmp_path / "two-readers",
        **{
            "readers.second": {
                **load_registry().readers["smollm2-135m"].config,
                "max_new_tokens": 8,
            }
        },
    )
    defs = build_defs(str(registry))
    readers = load_registry(registry).reader_partitions
    with scoped_env(ERAG_STORAGE=str(tmp_path / "storage")):
        instance = dg.DagsterInstance.ephemeral()
        first = _sensor_result(defs, instance)
        assert isinstance(first, dg.RunRequest)
        assert first.tags["erag/changed_inputs"].split(",") == sorted(
            ["dataset_files", *(f"reader_models[{r}]" for r in readers)]
        )
        assert defs.resolve_job_def("observe_inputs").execute_in_process(instance=instance).success
        assert isinstance(_sensor_result(defs, instance), dg.SkipReason)
        # each reader partition carries its own reader's fingerprint as data version
        for key in readers:
            record = instance.get_latest_data_version_record(
                dg.AssetKey("reader_models"), is_source=True, partition_key=key
            )
            entry = load_registry(registry).reader(key)
            assert record.event_log_entry.asset_observation.tags["dagster/data_version"] == (
                reader_digest(entry.name, entry.config)
            )


@pytest.mark.slow
def test_labels_carry_their_own_readers_observed_version(world) -> None:
    """``dagster/input_data_version/reader_models`` of a label partition is the version observed
    for its own reader partition (not Dagster's hash over no materialisation)."""
    instance = world["instance"]
    registry = load_registry(world["registry"])
    for asset in ("doc_labels", "end_to_end", "baseline_labels"):
        made = instance.fetch_materializations(dg.AssetKey(asset), limit=1).records[0]
        tags = made.asset_materialization.tags
        reader = tags["dagster/partition/reader"]
        # the observation of this reader's partition that was the latest when it was made
        observed = instance.get_latest_data_version_record(
            dg.AssetKey("reader_models"),
            is_source=True,
            partition_key=reader,
            before_cursor=made.storage_id,
        )
        entry = registry.reader(reader)
        assert tags["dagster/input_data_version/reader_models"] == reader_digest(
            entry.name, entry.config
        )
        assert tags["dagster/input_event_pointer/reader_models"] == str(observed.storage_id)


@pytest.mark.slow
def test_a_dataset_edit_labels_only_the_new_run(world) -> None:
    """Issue 42: after an edit of the dataset (one question dropped), the label assets wait
    until ``retrieval_run`` has been recomputed from the new questions: in the tick that asks
    for ``retrieval_run`` (``queries`` changed) nothing that reads it is asked for, though
    ``queries`` changed for them too; the next tick, after the new runs, asks for the labels.
    Runs last in this module: it edits the world's dataset."""
    instance, data = world["instance"], world["data"]
    defs = build_defs(str(world["registry"]))
    start = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    dropped = pl.read_ndjson(data / "queries.jsonl")["query_id"][-1]
    for table in ("queries", "qrels"):
        frame = pl.read_ndjson(data / f"{table}.jsonl")
        frame.filter(pl.col("query_id") != dropped).write_ndjson(data / f"{table}.jsonl")
    assert defs.resolve_job_def("observe_inputs").execute_in_process(instance=instance).success
    tables = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=start.cursor)
    assert set(requested(tables)) == {"corpus", "queries", "qrels"}
    resources, assets = dict(defs.resources), list(defs.assets)
    dg.materialize(assets, selection=["corpus", "queries", "qrels"], resources=resources,
                   instance=instance)  # fmt: skip
    runs = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tables.cursor)
    registry = load_registry(world["registry"])
    got = requested(runs)
    assert got["retrieval_run"] == set(registry.retriever_partitions)
    assert not {"doc_labels", "end_to_end", "baseline_labels"} & set(got), got
    for part in registry.retriever_partitions:
        dg.materialize(assets, selection=["retrieval_run"], partition_key=part,
                       resources=resources, instance=instance)  # fmt: skip
    labels = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=runs.cursor)
    reader = registry.reader_partitions[0]
    assert requested(labels)["doc_labels"] == {
        _pair(reader, r) for r in registry.retriever_partitions
    }
