"""The real graph materialised in process with dagster.materialize: corpus → indexes → runs →
eRAG labels → reports, plus re-runs that take labels from the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from erag_dagster.definitions import build_defs
from erag_dagster.pipeline import load_asset_value, materialize_all
from erag_dagster.registry import load_registry
from erag_dagster.resources import EvalSettings
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("pipeline")
    home = write_instance_yaml(root / "dagster_home")
    with scoped_env(ERAG_STORAGE=str(root / "storage"), DAGSTER_HOME=str(home)):
        registry = small_registry(root / "registry")
        instance = dg.DagsterInstance.from_config(str(home))
        settings = EvalSettings(registry_path=str(registry))
        materialize_all(settings, instance=instance, stages=["labels", "meta"], log=lambda m: None)
        yield {"root": root, "registry": registry, "instance": instance, "settings": settings}


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
    meta = _latest_metadata(instance, "doc_labels", f"{reader}|{registry.retriever_partitions[0]}")
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
        meta = _latest_metadata(env["instance"], "doc_labels", f"{reader}|{retriever}")
        assert meta["pairs_judged_now"].value == 0
        assert meta["pairs_from_store"].value == 12


@pytest.mark.slow
def test_labels_frame_carries_reader_fingerprint(env) -> None:
    defs = build_defs(str(env["registry"]))
    registry = load_registry(env["registry"])
    part = f"{registry.reader_partitions[0]}|{registry.retriever_partitions[0]}"
    with defs.get_asset_value_loader(instance=env["instance"]) as loader:
        labels = loader.load_asset_value("doc_labels", partition_key=part)
    assert isinstance(labels, pl.DataFrame)
    assert labels.get_column("reader_fingerprint").n_unique() == 1
    assert labels.filter(pl.col("label").is_nan() | (pl.col("label") > 1)).height == 0


@pytest.mark.slow
def test_audit_prints_every_stored_label_of_a_pair(env, capsys) -> None:
    from erag_dagster.cli import main

    defs = build_defs(str(env["registry"]))
    registry = load_registry(env["registry"])
    part = f"{registry.reader_partitions[0]}|{registry.retriever_partitions[0]}"
    with defs.get_asset_value_loader(instance=env["instance"]) as loader:
        labels = loader.load_asset_value("doc_labels", partition_key=part)
    row = labels.row(0, named=True)
    store = Path(os.environ["ERAG_STORAGE"]) / "labels.sqlite"
    code = main(
        ["audit", "--query", row["query_id"], "--doc", row["doc_id"], "--store", str(store),
         "--json"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    records = json.loads(out)
    em = [r for r in records if r["metric"] == "em"]
    assert em, records
    assert em[0]["reader_fingerprint"] == row["reader_fingerprint"]
    assert em[0]["reader_name"] == "smollm2-135m"
    assert em[0]["answer"] == row["answer"]
    assert em[0]["score"] == row["label"]
    assert em[0]["generation_dagster_run_id"]
    assert json.loads(em[0]["decoding"])["max_new_tokens"] == 16
    assert main(["audit", "--query", "nope", "--doc", "nope", "--store", str(store)]) == 2
