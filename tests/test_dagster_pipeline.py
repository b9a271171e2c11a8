"""The real graph materialised in process with dagster.materialize: corpus → indexes → runs →
eRAG labels → reports, plus re-runs that take labels from the store."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import EnvironmentFault, InputError
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import (
    load_asset_value,
    materialize_all,
    plan,
    request_full_reevaluation,
    stage_selection,
)
from erag_dagster.orchestration.resources import EvalSettings
from tests.answer_seed import shared_answers
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("pipeline")
    home = write_instance_yaml(root / "dagster_home")
    with scoped_env(ERAG_STORAGE=str(root / "storage"), DAGSTER_HOME=str(home)):
        # the extra label methods are opt-in (off in the packaged registry): on here
        registry = small_registry(
            root / "registry", **{"evaluation.label_methods": ["likelihood", "signed"]}
        )
        instance = dg.DagsterInstance.from_config(str(home))
        settings = EvalSettings(registry_path=str(registry))
        with shared_answers(tmp_path_factory):
            materialize_all(
                settings, instance=instance, stages=["labels", "meta"], log=lambda m: None
            )
        yield {"root": root, "registry": registry, "instance": instance, "settings": settings}


def _pair(reader: str, retriever: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"reader": reader, "retriever": retriever})


def _latest_metadata(instance: dg.DagsterInstance, key: str, partition: str) -> dict:
    event = instance.get_latest_materialization_event(dg.AssetKey(key))
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(key), asset_partitions=[partition]), limit=1
    ).records
    assert records, f"{key}[{partition}] was never materialised"
    assert event is not None
    return records[0].asset_materialization.metadata


def test_definitions_validate_and_graph_shape() -> None:
    defs = build_defs()
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {
        "dataset_files", "reader_models", "corpus", "queries", "qrels", "bm25_index",
        "dense_index", "retrieval_run", "retrieval_report", "doc_labels", "erag_report",
        "end_to_end", "baseline_labels", "correlation_report", "efficiency_report",
        "erag_per_query", "label_agreement",
    } <= keys  # fmt: skip
    registry = load_registry()
    run_parts = graph.get(dg.AssetKey("retrieval_run")).partitions_def.get_partition_keys()
    assert run_parts == registry.retriever_partitions
    label_parts = graph.get(dg.AssetKey("doc_labels")).partitions_def
    assert isinstance(label_parts, dg.MultiPartitionsDefinition)
    assert graph.get(dg.AssetKey("doc_labels")).automation_condition is not None


def test_dg_check_defs_passes() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dg"), "check", "defs"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All definitions loaded successfully" in result.stdout + result.stderr


@pytest.mark.slow
def test_materialised_runs_and_labels(env) -> None:
    registry = load_registry(env["registry"])
    instance = env["instance"]
    for part in registry.retriever_partitions:
        meta = _latest_metadata(instance, "retrieval_run", part)
        assert meta["queries"].value == 6
        assert meta["rows"].value == 60  # k = 10 for 6 queries
    reader = registry.reader_partitions[0]
    meta = _latest_metadata(instance, "doc_labels", _pair(reader, registry.retriever_partitions[0]))
    assert len(meta["reader_fingerprint"].value) == 64
    assert meta["reader_spec"].value["backend"] == "transformers"
    assert meta["pairs_judged_now"].value + meta["pairs_from_store"].value == 12  # 6 x top-2


@pytest.mark.slow
def test_reports_cover_every_retriever(env) -> None:
    registry = load_registry(env["registry"])
    report = load_asset_value("erag_report", env["instance"], str(env["registry"]))
    assert sorted(report.get_column("retriever").to_list()) == sorted(registry.retriever_partitions)
    for metric in ["P@2", "Success@2", "RR", "AP", "nDCG@2"]:
        values = report.get_column(metric)
        assert ((values >= 0) & (values <= 1)).all()
    per_query = load_asset_value("erag_per_query", env["instance"], str(env["registry"]))
    assert per_query.height == 3 * 6  # retrievers x queries
    means = per_query.group_by("retriever").agg(pl.col("AP").mean()).sort("retriever")
    assert means["AP"].to_list() == pytest.approx(report.sort("retriever")["AP"].to_list())
    human = load_asset_value("retrieval_report", env["instance"], str(env["registry"]))
    assert human.height == 3 and "nDCG@10" in human.columns and "nDCG@10_low" in human.columns
    corr = load_asset_value("correlation_report", env["instance"], str(env["registry"]))
    methods = set(corr.get_column("method").to_list())
    assert {"eRAG", "provenance", "containment", "llm_annotation"} <= methods
    assert {"eRAG_likelihood", "signed_utility"} <= methods  # registry label_methods
    assert corr.get_column("n_queries").max() == 6
    agree = load_asset_value("label_agreement", env["instance"], str(env["registry"]))
    assert {"eRAG", "containment", "semantic_answer", "llm_annotation"} <= set(agree["method"])
    assert (agree.get_column("n") == 12).all()  # 6 queries x top-2 per retriever


@pytest.mark.slow
def test_second_run_takes_every_label_from_the_store(env) -> None:
    materialize_all(
        env["settings"], instance=env["instance"], stages=["labels"], log=lambda m: None
    )
    registry = load_registry(env["registry"])
    reader = registry.reader_partitions[0]
    for retriever in registry.retriever_partitions:
        meta = _latest_metadata(env["instance"], "doc_labels", _pair(reader, retriever))
        assert meta["pairs_judged_now"].value == 0
        assert meta["pairs_from_store"].value == 12


@pytest.mark.slow
def test_labels_frame_carries_reader_fingerprint(env) -> None:
    defs = build_defs(str(env["registry"]))
    registry = load_registry(env["registry"])
    part = _pair(registry.reader_partitions[0], registry.retriever_partitions[0])
    with defs.get_asset_value_loader(instance=env["instance"]) as loader:
        labels = loader.load_asset_value("doc_labels", partition_key=part)
    assert isinstance(labels, pl.DataFrame)
    assert labels.get_column("reader_fingerprint").n_unique() == 1
    assert labels.filter(pl.col("label").is_nan() | (pl.col("label") > 1)).height == 0


@pytest.mark.slow
def test_plan_follows_the_asset_graph_and_takes_a_new_asset_without_edits() -> None:
    defs = build_defs()
    registry = load_registry()
    steps = plan(defs, stage_selection(None))
    order = [k.to_user_string() for step in steps for k in step.keys]
    graph = defs.resolve_asset_graph()
    materialisable = {k.to_user_string() for k in graph.materializable_asset_keys}
    assert sorted(order) == sorted(materialisable)
    for key in graph.materializable_asset_keys:  # every parent comes first
        for parent in graph.get(key).parent_keys & graph.materializable_asset_keys:
            assert order.index(parent.to_user_string()) < order.index(key.to_user_string())
    labels = next(s for s in steps if dg.AssetKey("doc_labels") in s.keys)
    expected = {
        dg.MultiPartitionKey({"reader": r, "retriever": t})
        for r in registry.reader_partitions
        for t in registry.retriever_partitions
    }
    assert set(labels.partition_keys()) == expected

    @dg.asset(deps=["erag_report"])
    def erag_digest() -> int:
        return 1

    extended = dg.Definitions(assets=[*defs.assets, erag_digest], resources=dict(defs.resources))
    extended_order = [k.to_user_string() for s in plan(extended) for k in s.keys]
    assert extended_order.index("erag_digest") > extended_order.index("erag_report")


def test_stage_selection_keeps_the_cli_stages() -> None:
    defs = build_defs()

    def planned(stages):
        return {k.to_user_string() for s in plan(defs, stage_selection(stages)) for k in s.keys}

    base = {"corpus", "queries", "qrels", "bm25_index", "dense_index", "retrieval_run",
            "retrieval_report"}  # fmt: skip
    labels = {"doc_labels", "erag_per_query", "erag_report", "verdict", "fit"}
    # the HTML page reads Table 1 and the label agreement, so it comes with the meta stage
    meta = {"end_to_end", "baseline_labels", "correlation_report", "label_agreement",
            "html_report"}  # fmt: skip
    assert planned(["none"]) == base
    assert planned(["labels"]) == base | labels
    assert planned(["labels", "meta"]) == base | labels | meta
    assert planned(None) == base | labels | meta | {"efficiency_report"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _request_when_loaded(base: str, proc: subprocess.Popen, timeout: float = 180) -> str:
    """``request_full_reevaluation`` against the webserver at ``base``, retried while it starts
    and loads its code location."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, "dagster-webserver exited during start-up"
        try:
            return request_full_reevaluation(base, timeout_s=30)
        except EnvironmentFault:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def test_full_reevaluation_is_a_backfill_the_daemon_queues(tmp_path: Path) -> None:
    """The webserver (Dagster's public GraphQL API) creates an asset backfill of every
    partition of every asset, tagged with what launched it; the daemon (as under ``dagster
    dev``) then queues runs with the run coordinator, roots first; nothing runs in the
    requesting process."""
    import logging

    from dagster._core.test_utils import create_test_daemon_workspace_context
    from dagster._core.workspace.load_target import ModuleTarget
    from dagster._daemon.backfill import execute_backfill_iteration

    home = write_instance_yaml(tmp_path / "home")  # run_queue: Dagster's queued coordinator
    env = {**os.environ, "DAGSTER_HOME": str(home), "ERAG_STORAGE": str(tmp_path / "storage")}
    env.pop("ERAG_REGISTRY", None)
    port = _free_port()
    with (tmp_path / "webserver.log").open("w") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster-webserver")), "-m",
             "erag_dagster.orchestration.definitions", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        backfill_id = _request_when_loaded(f"http://127.0.0.1:{port}", proc)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    defs = build_defs()
    graph = defs.resolve_asset_graph()
    with scoped_env(DAGSTER_HOME=str(home)), dg.DagsterInstance.get() as instance:
        backfill = instance.get_backfill(backfill_id)
        launched_by = "erag_dagster.orchestration.pipeline.request_full_reevaluation"
        assert backfill.tags["erag/launched_by"] == launched_by
        target = backfill.asset_backfill_data.target_subset
        assert target.asset_keys == set(graph.materializable_asset_keys)
        for key in graph.materializable_asset_keys:
            partitions_def = graph.get(key).partitions_def
            if partitions_def is not None:
                got = set(target.get_partitions_subset(key).get_partition_keys())
                assert got == set(partitions_def.get_partition_keys()), key
        assert "full_reevaluation" not in {job.name for job in defs.resolve_all_job_defs()}
        target = ModuleTarget(
            module_name="erag_dagster.orchestration.definitions", attribute=None,
            working_directory=str(REPO), location_name="erag_dagster",
        )  # fmt: skip
        with create_test_daemon_workspace_context(target, instance) as context:
            list(execute_backfill_iteration(context, logging.getLogger("backfill")))
        runs = instance.get_runs()
        assert [r.status for r in runs] == [dg.DagsterRunStatus.QUEUED]
        assert runs[0].tags["dagster/backfill"] == backfill_id
        first_wave = {k.to_user_string() for k in runs[0].asset_selection}
        assert first_wave == {"corpus", "queries", "qrels", "bm25_index", "dense_index"}


def test_full_reevaluation_without_a_webserver_is_one_line() -> None:
    with pytest.raises(EnvironmentFault) as caught:
        request_full_reevaluation(f"http://127.0.0.1:{_free_port()}", timeout_s=5)
    message = str(caught.value)
    assert "\n" not in message and "no Dagster webserver answered" in message
    assert "ERAG_DAGSTER_URL" in message


def test_run_config_cannot_point_settings_at_another_registry(tmp_path: Path) -> None:
    other = small_registry(tmp_path / "other")
    defs = build_defs()
    job = defs.resolve_job_def("observe_inputs")
    config = {"resources": {"settings": {"config": {"registry_path": str(other)}}}}
    with pytest.raises(Exception) as caught:
        job.execute_in_process(run_config=config, instance=dg.DagsterInstance.ephemeral())
    chain, error = [], caught.value
    while error is not None:
        chain.append(error)
        error = error.__cause__
    refused = [e for e in chain if isinstance(e, InputError)]
    assert refused, chain
    message = str(refused[0])
    assert "\n" not in message
    assert str(other) in message and load_registry().path in message
    # the same file as the definitions' registry is accepted
    same = {"resources": {"settings": {"config": {"registry_path": load_registry().path}}}}
    assert job.execute_in_process(run_config=same, instance=dg.DagsterInstance.ephemeral()).success


def test_settings_parse_the_registry_once(tmp_path: Path) -> None:
    path = small_registry(tmp_path / "reg")
    defs = build_defs(str(path))
    settings = defs.resources["settings"]
    first = settings.registry()
    path.write_text("not: [a registry")  # a later edit is not re-read by these definitions
    assert settings.resolve().label_k == 2
    assert settings.registry() is first
