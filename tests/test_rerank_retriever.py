"""``kind: rerank`` retrievers: the registry's hashing of a second stage, and its run and lift
report materialised through the real graph with the packaged reader as the scorer (one thread,
float32, three questions, top 3 reranked into a top 2).

No cross-encoder is packaged for offline use (the packaged MiniLM is a bi-encoder; loaded as a
sequence classifier its head is random), so the graph runs the reader scorer; a MiniLM folder
scorer is checked only for how the registry hashes it (tests/test_rerank.py drives the
cross-encoder code path on those weights).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml

from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.retrieval.encoder import packaged_encoder_path
from erag_dagster.retrieval.rerank import LIFT_SCHEMA
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml

RERANK = {
    "kind": "rerank",
    "first_stage": "bm25",
    "top_n": 3,
    "k": 2,
    "scorer": "reader:smollm2-135m",
    "dtype": "float32",
    "threads": 1,
    "batch_size": 3,
}


def _write(folder: Path, **retrievers) -> Path:
    raw = yaml.safe_load((Path(__file__).parents[1] / "erag_dagster/registry.yaml").read_text())
    raw["retrievers"] = {"bm25": raw["retrievers"]["bm25"], **retrievers}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _key(path: Path, name: str = "rr") -> str:
    return load_registry(path).retriever(name).partition_key


def test_rerank_hash_covers_first_stage_and_scorer_not_operational_keys(tmp_path: Path) -> None:
    base = _key(_write(tmp_path / "a", rr=RERANK))
    assert _key(_write(tmp_path / "b", rr={**RERANK, "batch_size": 8, "threads": 2})) == base
    assert _key(_write(tmp_path / "c", rr={**RERANK, "top_n": 4})) != base
    edited = _write(tmp_path / "d", rr=RERANK)
    raw = yaml.safe_load(edited.read_text())
    raw["retrievers"]["bm25"]["k1"] = 1.2  # the first stage changes -> a new rerank partition
    edited.write_text(yaml.safe_dump(raw))
    assert _key(edited) != base
    raw["retrievers"]["bm25"]["k1"] = 0.9
    raw["readers"]["smollm2-135m"]["max_new_tokens"] = 8  # the scorer's reader changes
    edited.write_text(yaml.safe_dump(raw))
    assert _key(edited) != base
    folder = {**RERANK, "scorer": str(packaged_encoder_path())}
    assert _key(_write(tmp_path / "e", rr=folder)) != base


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({**RERANK, "first_stage": "nope"}, "first_stage 'nope', which is not another retriever"),
        ({**RERANK, "k": 5}, "k 5 > top_n 3"),
        ({**RERANK, "scorer": "reader:nope"}, "scorer 'reader:nope'; known readers"),
        ({**RERANK, "scorer": "no/such/folder"}, "neither reader:<name> nor a cross-encoder"),
        ({k: v for k, v in RERANK.items() if k != "top_n"}, "rerank 'rr' needs 'top_n'"),
        ({**RERANK, "top_n": 0}, "top_n: 0; it must be an integer >= 1"),
    ],
)
def test_bad_rerank_configs_are_one_line(tmp_path: Path, config: dict, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_registry(_write(tmp_path, rr=config))


def test_cycles_are_refused(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        rr={**RERANK, "first_stage": "fused"},
        fused={"kind": "hybrid", "fuse": ["bm25", "rr"]},
    )
    with pytest.raises(InputError, match=r"cycle: (rr -> fused -> rr|fused -> rr -> fused)"):
        load_registry(path)


@pytest.mark.slow
def test_rerank_run_and_lift_report_through_the_graph(tmp_path: Path) -> None:
    home = write_instance_yaml(tmp_path / "home")
    with scoped_env(ERAG_STORAGE=str(tmp_path / "storage"), DAGSTER_HOME=str(home)):
        path = small_registry(tmp_path / "registry", dataset="sample?max_questions=3")
        raw = yaml.safe_load(path.read_text())
        raw["retrievers"] = {"bm25": raw["retrievers"]["bm25"], "rr": RERANK}
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        registry = load_registry(path)
        bm25, rr = registry.retriever_partitions
        defs = build_defs(str(path))
        instance = dg.DagsterInstance.from_config(str(home))
        job = defs.get_implicit_global_asset_job_def()
        tables = ["corpus", "queries", "qrels"]
        assert job.execute_in_process(
            instance=instance, asset_selection=[dg.AssetKey(k) for k in tables]
        ).success
        for part in (bm25, rr):
            assert job.execute_in_process(
                instance=instance,
                partition_key=part,
                asset_selection=[dg.AssetKey("retrieval_run")],
            ).success
        lift = job.execute_in_process(
            instance=instance, partition_key=rr, asset_selection=[dg.AssetKey("rerank_lift")]
        )
        assert lift.success
        with defs.get_asset_value_loader(instance=instance) as loader:
            first = loader.load_asset_value("retrieval_run", partition_key=bm25)
            second = loader.load_asset_value("retrieval_run", partition_key=rr)
            report = loader.load_asset_value("rerank_lift", partition_key=rr)
        assert second.group_by("query_id").len()["len"].to_list() == [2, 2, 2]
        top3 = first.filter(pl.col("rank") <= 3).select("query_id", "doc_id")
        assert second.join(top3, on=["query_id", "doc_id"], how="anti").height == 0
        assert report.schema == pl.Schema(LIFT_SCHEMA)
        assert report["metric"].to_list() == raw["evaluation"]["human_metrics"]
        assert (report["depth"] == 2).all() and (report["queries"] == 3).all()
        assert (report["added_seconds_per_query"] > 0).all()
        assert report["difference"].to_list() == pytest.approx(
            (report["after"] - report["before"]).to_list()
        )
        meta = (
            instance.fetch_materializations(
                dg.AssetRecordsFilter(
                    asset_key=dg.AssetKey("retrieval_run"), asset_partitions=[rr]
                ),
                limit=1,
            )
            .records[0]
            .asset_materialization.metadata
        )
        assert meta["first_stage"].value == bm25 and meta["rerank_pairs"].value == 9
