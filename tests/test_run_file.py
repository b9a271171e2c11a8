"""``kind: run_file`` retrievers: a run made by another system, hashed by content, validated
against the dataset, and taken through labels, end-to-end answers and every report."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml
from polars.testing import assert_frame_equal

from erag_dagster.cli import main
from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_file
from erag_dagster.data.loaders import load_dataset
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import load_asset_value, materialize_all
from erag_dagster.orchestration.resources import EvalSettings
from erag_dagster.retrieval.run_file import load_run_file
from erag_dagster.retrieval.runs import read_trec_run
from tests.answer_seed import shared_answers
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml

SAMPLE = "sample?max_questions=3"


@pytest.fixture(scope="module")
def sample():
    return load_dataset("sample")


def _run_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def _registry(folder: Path, run: str, **extra) -> Path:
    raw = {
        "retrievers": {"theirs": {"kind": "run_file", "path": run, **extra}},
        "readers": {"r": {"model": "m"}},
    }
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_partition_hash_is_the_file_content_not_its_path(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    line = ["q1 Q0 d1 1 2.0 x", "q1 Q0 d2 2 1.0 x"]
    _run_lines(tmp_path / "a" / "run.trec", line)
    _run_lines(tmp_path / "b" / "other.trec", line)
    first = load_registry(_registry(tmp_path / "a", "run.trec")).retriever("theirs")
    moved = load_registry(_registry(tmp_path / "b", "other.trec")).retriever("theirs")
    assert first.partition_key == moved.partition_key  # same bytes, another place
    assert first.config["path"] == str((tmp_path / "a" / "run.trec").resolve())
    assert first.config["format"] == "trec"
    assert first.config["sha256"] == sha256_file(tmp_path / "a" / "run.trec")
    _run_lines(tmp_path / "b" / "other.trec", [*line, "q1 Q0 d3 3 0.5 x"])
    edited = load_registry(_registry(tmp_path / "b", "other.trec")).retriever("theirs")
    assert edited.partition_key != first.partition_key


def test_registry_refuses_a_missing_or_changed_pinned_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"run_file 'theirs': cannot read .*nope.trec"):
        load_registry(_registry(tmp_path, "nope.trec"))
    _run_lines(tmp_path / "run.trec", ["q1 Q0 d1 1 2.0 x"])
    with pytest.raises(InputError, match="not the pinned"):
        load_registry(_registry(tmp_path, "run.trec", sha256="0" * 64))
    pinned = sha256_file(tmp_path / "run.trec")
    assert load_registry(_registry(tmp_path, "run.trec", sha256=pinned)).retriever("theirs")


def test_unknown_ids_name_the_first_line(tmp_path: Path, sample) -> None:
    qid, did = sample.queries["query_id"][0], sample.corpus["doc_id"][0]
    run = _run_lines(
        tmp_path / "run.trec",
        [f"{qid} Q0 {did} 1 2.0 x", f"{qid} Q0 nosuchdoc 2 1.0 x", f"noq Q0 {did} 1 1.0 x"],
    )
    digest = sha256_file(run)
    with pytest.raises(InputError, match=r"run.trec:2: doc_id 'nosuchdoc' is not in the dataset"):
        load_run_file(run, "trec", digest, sample.queries, sample.corpus, 10)
    _run_lines(run, [f"{qid} Q0 {did} 1 2.0 x", f"noq Q0 {did} 1 1.0 x"])
    with pytest.raises(InputError, match=r"run.trec:2: query_id 'noq' is not in the dataset"):
        load_run_file(run, "trec", sha256_file(run), sample.queries, sample.corpus, 10)
    with pytest.raises(InputError, match="changed after the registry was read"):
        load_run_file(run, "trec", digest, sample.queries, sample.corpus, 10)
    table = tmp_path / "run.parquet"
    pl.DataFrame(
        {"query_id": [qid, qid], "doc_id": [did, "zz"], "score": [2.0, 1.0]}
    ).write_parquet(table)
    with pytest.raises(InputError, match=r"run.parquet \(row 2\): doc_id 'zz'"):
        load_run_file(table, "parquet", sha256_file(table), sample.queries, sample.corpus, 10)


def test_missing_queries_are_counted_and_a_subset_drops_the_others(tmp_path: Path, sample) -> None:
    qids, dids = sample.queries["query_id"].to_list(), sample.corpus["doc_id"].to_list()
    lines = [f"{q} Q0 {d} {r + 1} {5.0 - r} x" for q in qids[:4] for r, d in enumerate(dids[:3])]
    run = _run_lines(tmp_path / "run.trec", lines)
    got = load_run_file(run, "trec", sha256_file(run), sample.queries, sample.corpus, k=2)
    assert got.queries_missing == len(qids) - 4 and got.queries_in_file == 4
    assert got.run.height == 4 * 2 and got.run["rank"].max() == 2  # cut to k
    assert got.metadata()["queries_missing_from_run"] == len(qids) - 4
    two = load_dataset("sample?max_questions=2")
    with pytest.raises(InputError, match=r"run.trec:7: query_id"):
        load_run_file(run, "trec", sha256_file(run), two.queries, two.corpus, k=3)
    kept = load_run_file(run, "trec", sha256_file(run), two.queries, two.corpus, 3, True)
    assert kept.queries_outside == 2 and kept.run.height == 6 and kept.queries_missing == 0


def _partition_value(defs: dg.Definitions, instance, key: str, partition) -> pl.DataFrame:
    with defs.get_asset_value_loader(instance=instance) as loader:
        return loader.load_asset_value(key, partition_key=partition)


@pytest.mark.slow
def test_run_file_of_the_bm25_run_gives_bm25s_labels_and_reports(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The BM25 run written by ``erag-dagster retrieve``, registered as a run file: same
    content under another identity, so the same labels, answers and report rows."""
    home = write_instance_yaml(tmp_path / "home")
    with scoped_env(ERAG_STORAGE=str(tmp_path / "storage"), DAGSTER_HOME=str(home)):
        registry_path = small_registry(tmp_path / "registry", dataset=SAMPLE)
        raw = yaml.safe_load(registry_path.read_text())
        raw["evaluation"].update({"k": 5, "label_k": 2, "e2e_ks": [1, 2]})
        raw["retrievers"] = {"bm25": raw["retrievers"]["bm25"]}
        registry_path.write_text(yaml.safe_dump(raw, sort_keys=False))
        run = tmp_path / "registry" / "bm25.trec"
        argv = ["retrieve", "--dataset", SAMPLE, "--retriever", "bm25", "--k", "5"]
        assert main([*argv, "--registry", str(registry_path), "--output", str(run)]) == 0
        raw["retrievers"]["theirs"] = {"kind": "run_file", "path": "bm25.trec"}
        registry_path.write_text(yaml.safe_dump(raw, sort_keys=False))

        registry = load_registry(registry_path)
        bm25, theirs = registry.retriever_partitions
        assert theirs.startswith("theirs-") and bm25.startswith("bm25-")
        instance = dg.DagsterInstance.from_config(str(home))
        settings = EvalSettings(registry_path=str(registry_path))
        with shared_answers(tmp_path_factory):
            materialize_all(
                settings, instance=instance, stages=["labels", "meta"], log=lambda m: None
            )

        defs = build_defs(str(registry_path))
        runs = {p: _partition_value(defs, instance, "retrieval_run", p) for p in (bm25, theirs)}
        assert runs[bm25].height == 15 and runs[bm25].equals(runs[theirs])
        assert runs[theirs].equals(read_trec_run(run))
        reader = registry.reader_partitions[0]
        for key in ("doc_labels", "end_to_end", "baseline_labels"):
            got = {
                p: _partition_value(
                    defs, instance, key, dg.MultiPartitionKey({"reader": reader, "retriever": p})
                )
                for p in (bm25, theirs)
            }
            assert got[bm25].height > 0
            keep = [c for c in got[bm25].columns if c not in ("retriever", "run_id")]
            assert_frame_equal(got[bm25].select(keep), got[theirs].select(keep), check_exact=True)

        reports = ("retrieval_report", "erag_report", "erag_per_query", "correlation_report")
        for key in (*reports, "label_agreement"):
            report = load_asset_value(key, instance, str(registry_path))
            column = "retriever" if "retriever" in report.columns else "system"
            rows = {
                p: report.filter(pl.col(column).str.contains(p)).drop(column)
                for p in (bm25, theirs)
            }
            assert rows[bm25].height > 0, key
            # every figure equal (NaN = NaN); only "which row is the baseline" differs
            same = [c for c in rows[bm25].columns if c != "baseline"]
            assert_frame_equal(rows[bm25].select(same), rows[theirs].select(same), check_exact=True)
        meta = (
            instance.fetch_materializations(
                dg.AssetRecordsFilter(
                    asset_key=dg.AssetKey("retrieval_run"), asset_partitions=[theirs]
                ),
                limit=1,
            )
            .records[0]
            .asset_materialization.metadata
        )
        assert meta["queries_missing_from_run"].value == 0
        assert meta["run_file_rows"].value == 15
        assert meta["config"].value["sha256"] == sha256_file(run)


def test_example_registry_of_the_docs_loads(tmp_path: Path) -> None:
    """docs/examples/retrievers.yaml: every retriever kind, valid once its run file exists."""
    example = Path(__file__).parents[1] / "docs" / "examples" / "retrievers.yaml"
    copy = tmp_path / "retrievers.yaml"
    copy.write_text(example.read_text())
    _run_lines(tmp_path / "bm25-sample.trec", ["q1 Q0 d1 1 2.0 bm25"])
    registry = load_registry(copy)
    kinds = {e.name: e.config["kind"] for e in registry.retrievers.values()}
    assert sorted(set(kinds.values())) == ["bm25", "dense", "rerank", "run_file"]
    assert registry.retriever("dense-hnsw").config["index"]["type"] == "hnsw"
