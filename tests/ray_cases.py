"""Reader generation on a real local Ray cluster (2 CPUs, dashboard off).

Run by ``tests/test_ray_labels.py`` in a pytest process of its own (ray must never be imported
into the main test process: see there); ``pytest tests/ray_cases.py`` runs it directly.

The reader is the real packaged SmolLM2 (float32, CPU: answers do not depend on batching, so
the in-process and the Ray runs must agree exactly). A module fixture starts the cluster and
shuts it down after; the pool reuses it (``ray.is_initialized()``) instead of starting one.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from erag_dagster.data.loaders import load_dataset
from erag_dagster.errors import EnvironmentFault, InputError
from erag_dagster.labels.cached import CommitPolicy
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import LabelStore
from erag_dagster.readers.transformers_reader import reader_from_config

ray = pytest.importorskip("ray")

READER = {"device": "cpu", "dtype": "float32", "num_threads": 1, "batch_size": 4}
RAY_2 = ExecutorSpec(executor="ray", actors=2, num_cpus=1)


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def sample() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``corpus, queries, run``: 8 questions x (own paragraph + the next 2 of the corpus)."""
    ds = load_dataset("sample?max_questions=8")
    docs = ds.corpus.get_column("doc_id").to_list()
    rows = []
    for qid, own in ds.qrels.select("query_id", "doc_id").rows():
        at = docs.index(own)
        for rank, doc in enumerate([own, *docs[at + 1 : at + 3]], start=1):
            rows.append((qid, doc, rank, -float(rank)))
    run = pl.DataFrame(rows, schema=["query_id", "doc_id", "rank", "score"], orient="row")
    return ds.corpus, ds.queries, run


@pytest.fixture(scope="module")
def in_process(sample, tmp_path_factory) -> pl.DataFrame:
    corpus, queries, run = sample
    store = LabelStore(tmp_path_factory.mktemp("inproc") / "labels.sqlite")
    reader = reader_from_config("smollm2", READER)
    return label_run(run, queries, corpus, reader, "f1", store).labels


def _generations(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT generation_key, COUNT(*) FROM generations GROUP BY generation_key"
        ).fetchall()


@pytest.mark.slow
def test_ray_labels_equal_in_process_labels(ray_cluster, sample, in_process, tmp_path) -> None:
    corpus, queries, run = sample
    path = tmp_path / "labels.sqlite"
    messages: list[str] = []
    result = label_run(
        run, queries, corpus, reader_from_config("smollm2", READER), "f1",
        LabelStore(path), log=messages.append, executor=RAY_2,
        commit=CommitPolicy(every_pairs=6),  # 4 chunks, so both actors work
    )  # fmt: skip
    assert result.labels.equals(in_process), "Ray and in-process labels differ"
    assert result.judged_now == run.height
    assert any("2 reader actors ready" in m for m in messages)
    assert ray.is_initialized(), "the pool must not shut down a cluster it did not start"
    # a second call finds every answer stored: no actor is even started
    messages.clear()
    again = label_run(
        run, queries, corpus, reader_from_config("smollm2", READER), "f1",
        LabelStore(path), log=messages.append, executor=RAY_2,
    )  # fmt: skip
    assert again.judged_now == 0 and again.labels.equals(in_process)
    assert not any("actors ready" in m for m in messages), messages


@pytest.mark.slow
def test_an_actor_killed_mid_run_loses_nothing_and_duplicates_nothing(
    ray_cluster, sample, in_process, tmp_path
) -> None:
    corpus, queries, run = sample
    path = tmp_path / "labels.sqlite"
    store = LabelStore(path)
    commit = CommitPolicy(every_pairs=3, every_seconds=60.0)  # 8 chunks of 3 pairs
    killed: list[str] = []

    def kill_one_actor_after_the_first_commit() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                rows = len(_generations(path))
            except sqlite3.Error:  # the table is not created yet
                rows = 0
            if rows >= 3:
                names = [
                    a["name"]
                    for a in ray.util.list_named_actors(all_namespaces=True)
                    if a["name"].startswith("erag-reader-")
                ]
                if names:
                    actor = ray.get_actor(names[0], namespace="erag-dagster")
                    ray.kill(actor, no_restart=True)
                    killed.append(names[0])
                    return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_one_actor_after_the_first_commit, daemon=True)
    killer.start()
    messages: list[str] = []
    result = label_run(
        run, queries, corpus, reader_from_config("smollm2", READER), "f1", store,
        log=messages.append, commit=commit, executor=RAY_2,
    )  # fmt: skip
    killer.join(timeout=10)
    assert killed, "no actor was killed (the run ended before the first commit was seen?)"
    assert any(f"actor {killed[0]} died" in m for m in messages), messages
    stored = _generations(path)
    assert len(stored) == run.height, "a pair was lost"
    assert all(count == 1 for _, count in stored), "a pair was stored twice"
    assert result.labels.equals(in_process), "labels differ after the retry"


def test_executor_spec_refuses_bad_values_in_one_line() -> None:
    with pytest.raises(InputError, match="address 'localhost' must be local, auto"):
        ExecutorSpec.from_mapping({"executor": "ray", "address": "localhost"}, "registry.yaml")
    with pytest.raises(InputError, match="num_gpus must be a number >= 0"):
        ExecutorSpec.from_mapping({"num_gpus": -1}, "registry.yaml")
    with pytest.raises(InputError, match="executor 'dask' unknown"):
        ExecutorSpec.from_mapping({"executor": "dask"}, "registry.yaml")
    with pytest.raises(InputError, match="unknown key"):
        ExecutorSpec.from_mapping({"gpus": 1}, "registry.yaml")
    spec = ExecutorSpec.from_mapping({"executor": "ray", "address": "ray://head:10001"}, "x")
    assert spec.on_ray and spec.address == "ray://head:10001" and spec.actors == 2
    assert not ExecutorSpec.from_mapping(None, "x").on_ray


def test_without_ray_the_error_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from erag_dagster.labels import ray_pool

    monkeypatch.setitem(sys.modules, "ray", None)  # what an absent package looks like to import
    with pytest.raises(EnvironmentFault) as info:
        ray_pool.import_ray()
    assert "\n" not in str(info.value) and "pip install" in str(info.value)


def test_the_registry_and_the_reader_resource_choose_the_executor(tmp_path: Path) -> None:
    from erag_dagster.registry import load_registry
    from erag_dagster.resources import ReaderResource

    default = load_registry()
    assert not default.generation.on_ray  # in-process stays the default
    text = Path(default.path).read_text(encoding="utf-8")
    path = tmp_path / "registry.yaml"
    path.write_text(
        text.replace("  executor: inprocess", "  executor: ray\n  address: auto\n  num_gpus: 1")
    )
    registry = load_registry(path)
    assert registry.generation == ExecutorSpec("ray", "auto", 2, 1.0, 1.0)
    # operational only: the partitions are the default registry's
    assert registry.reader_partitions == default.reader_partitions
    spec = ReaderResource(ray_address="ray://head:10001", ray_num_gpus=0).executor_spec(registry)
    assert spec == ExecutorSpec("ray", "ray://head:10001", 2, 1.0, 0.0)
    assert not ReaderResource(executor="inprocess").executor_spec(registry).on_ray
    path.write_text(text.replace("  executor: inprocess", "  executor: ray\n  actors: 0"))
    with pytest.raises(InputError, match=r"registry.yaml: generation: actors must be"):
        load_registry(path)


@pytest.mark.slow
def test_the_cli_starts_a_local_ray_cluster_labels_and_stops_it(sample, tmp_path) -> None:
    """``erag-dagster label --executor ray`` in a fresh process: no Ray session yet, so the pool
    starts a local cluster for the call (address ``local``) and shuts it down after."""
    import os
    import subprocess
    import sys

    pairs = sample[2].head(6)
    trec = tmp_path / "run.trec"
    trec.write_text(
        "".join(f"{q} Q0 {d} {r} {s} test\n" for q, d, r, s in pairs.rows()), encoding="utf-8"
    )
    reader = tmp_path / "smollm2.yaml"
    reader.write_text(
        "name: smollm2\n" + "".join(f"{k}: {v}\n" for k, v in READER.items()), encoding="utf-8"
    )
    out = tmp_path / "labels.parquet"
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "ERAG_STORAGE": str(tmp_path / "storage")}
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from erag_dagster.cli import main; sys.exit(main())",
         "label", "--dataset", "sample?max_questions=8", "--run", str(trec), "--reader",
         str(reader), "--metric", "f1", "--output", str(out), "--executor", "ray",
         "--ray-address", "local"],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Ray: connected (local; started here: True)" in done.stderr
    assert "Ray: 2 reader actors ready" in done.stderr
    assert "judged now 6" in done.stderr
    labels = pl.read_parquet(out)
    assert labels.height == 6 and labels.get_column("label").is_between(0, 1).all()
