"""Reader generation on a real local Ray cluster (2 CPUs, dashboard off).

Run by ``tests/test_ray_labels.py`` in a pytest process of its own (ray must never be imported
into the main test process: see there); ``pytest tests/ray_cases.py`` runs it directly.

The reader is the real packaged SmolLM2 (float32, CPU: answers do not depend on batching, so
the in-process and the Ray runs must agree exactly). The ``ray_cluster`` fixture starts a local
cluster once and the pool reuses it (``ray.is_initialized()``) instead of starting one; the
``external_head`` cases connect to a head node started as a separate process (``ray start
--head --block``, on 127.0.0.1), by ``address: auto`` and by ``ray://`` (Ray Client), as a run
pointed at a running cluster would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from erag_dagster.core.errors import EnvironmentFault, InputError
from erag_dagster.data.loaders import load_dataset
from erag_dagster.labels.cached import CommitPolicy
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import LabelStore
from erag_dagster.readers.factory import reader_from_config

# Ray 2.60 clusters use token authentication: every cluster here (the local one, the external
# head) and this driver share the user's token (Ray's default file, created as Ray would if
# missing), set before ray is imported; the cases change HOME, so the path is explicit.
if "RAY_AUTH_TOKEN" not in os.environ:
    _TOKEN = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token"))
    if not _TOKEN.is_file() and Path(sys.executable).with_name("ray").is_file():
        subprocess.run(
            [str(Path(sys.executable).with_name("ray")), "get-auth-token", "--generate"],
            capture_output=True,
            check=True,
        )
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(_TOKEN)
os.environ.setdefault("RAY_AUTH_MODE", "token")
ray = pytest.importorskip("ray")

READER = {"device": "cpu", "dtype": "float32", "num_threads": 1, "batch_size": 4}
RAY_2 = ExecutorSpec(executor="ray", actors=2, num_cpus=1)
#: One actor where the case is about where the pool runs, not how it splits the work (each
#: actor is a process that imports torch and loads the reader).
RAY_1 = ExecutorSpec(executor="ray", actors=1, num_cpus=1)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def _disconnect_at_the_end() -> Iterator[None]:
    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_cluster(_disconnect_at_the_end) -> None:
    """A local cluster started once (again only after a case connected elsewhere)."""
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2)


@pytest.fixture(scope="module")
def sample() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``corpus, queries, run``: 4 questions x (own paragraph + the next 2 of the corpus)."""
    ds = load_dataset("sample?max_questions=4")
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
def test_an_actor_killed_mid_run_loses_nothing_and_duplicates_nothing(
    ray_cluster, sample, in_process, tmp_path
) -> None:
    """Two actors on this process's cluster, one killed after the first commit: the labels
    equal the in-process labels, no pair is lost or stored twice; the pool leaves the cluster
    it did not start running, and a second call takes every answer from the store."""
    corpus, queries, run = sample
    path = tmp_path / "labels.sqlite"
    store = LabelStore(path)
    commit = CommitPolicy(every_pairs=3, every_seconds=60.0)  # 4 chunks of 3 pairs
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
    assert any("2 reader actors ready" in m for m in messages), messages
    assert killed, "no actor was killed (the run ended before the first commit was seen?)"
    assert any(f"actor {killed[0]} died" in m for m in messages), messages
    stored = _generations(path)
    assert len(stored) == run.height, "a pair was lost"
    assert all(count == 1 for _, count in stored), "a pair was stored twice"
    assert result.labels.equals(in_process), "Ray and in-process labels differ"
    assert ray.is_initialized(), "the pool must not shut down a cluster it did not start"
    # a second call finds every answer stored: no actor is even started
    messages.clear()
    again = label_run(
        run, queries, corpus, reader_from_config("smollm2", READER), "f1",
        LabelStore(path), log=messages.append, executor=RAY_2,
    )  # fmt: skip
    assert again.judged_now == 0 and again.labels.equals(in_process)
    assert not any("actors ready" in m for m in messages), messages


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

    from erag_dagster.labels import ray_session

    monkeypatch.setitem(sys.modules, "ray", None)  # what an absent package looks like to import
    with pytest.raises(EnvironmentFault) as info:
        ray_session.import_ray()
    assert "\n" not in str(info.value) and "pip install" in str(info.value)


def test_the_registry_and_the_reader_resource_choose_the_executor(tmp_path: Path) -> None:
    from erag_dagster.config.registry import load_registry
    from erag_dagster.orchestration.resources import ReaderResource

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
         "label", "--dataset", "sample?max_questions=4", "--run", str(trec), "--reader",
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


# -- every reader task of a partition on Ray (issue #14: end_to_end, baseline_labels) ----------


@pytest.mark.slow
def test_end_to_end_and_baseline_labels_on_ray_equal_in_process(ray_cluster, sample, tmp_path):
    """What the ``end_to_end`` and ``baseline_labels`` assets compute (end-to-end answers at two
    depths; LLM annotation, signed utility with its closed-book answers, likelihood), in this
    process and with ``executor: ray``: the same frames; one pool per call, shared by its
    tasks."""
    from erag_dagster.config.registry import load_registry
    from erag_dagster.meta.system_outputs import baseline_label_set, end_to_end_at_depths
    from erag_dagster.retrieval.encoder import encoder_from_config

    corpus, queries, run = sample
    first = run.get_column("query_id").unique(maintain_order=True).head(2)  # 2 x 2 documents
    run = run.filter(pl.col("query_id").is_in(first.implode()) & (pl.col("rank") <= 2))
    reader = reader_from_config("smollm2", READER)
    encoder = encoder_from_config(load_registry().first_config("dense"))

    def both(executor, folder: Path, messages: list[str]):
        e2e = end_to_end_at_depths(
            run, queries, corpus, reader, "f1", (1, 2), messages.append,
            store=LabelStore(folder / "e2e.sqlite"), executor=executor,
        ).scores  # fmt: skip
        baselines = baseline_label_set(
            run, queries, corpus, pl.DataFrame(schema=QRELS), encoder, reader,
            store=LabelStore(folder / "baselines.sqlite"), log=messages.append, metric="f1",
            relevance_level=1, methods=("likelihood", "signed"), executor=executor,
        )  # fmt: skip
        return e2e, baselines

    local_messages: list[str] = []
    e2e, baselines = both(None, tmp_path / "inproc", local_messages)
    assert not any("actors ready" in m for m in local_messages)
    assert set(baselines.get_column("method")) >= {
        "llm_annotation", "eRAG_likelihood", "signed_utility",
    }  # fmt: skip
    messages: list[str] = []
    e2e_ray, baselines_ray = both(RAY_1, tmp_path / "ray", messages)
    assert e2e_ray.equals(e2e), "end-to-end answers or scores differ on Ray"
    assert baselines_ray.equals(baselines), "baseline labels differ on Ray"
    ready = [m for m in messages if "1 reader actors ready" in m]
    assert len(ready) == 2, messages  # one pool for end_to_end, one for baseline_labels


QRELS = {"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int64}


# -- a Ray cluster this run did not start ------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True)
class Head:
    """A head node started by ``ray start --head --block`` (its own process group)."""

    gcs: str
    client: str
    home: Path
    process: subprocess.Popen


@pytest.fixture(scope="module")
def external_head(tmp_path_factory) -> Iterator[Head]:
    """A real head node (2 CPUs, dashboard off) started as a separate process, as an operator
    would, with its own ``HOME`` (``home_b``, see the fingerprint case); its workers import this
    tree (``PYTHONPATH``) and share the driver's model cache (no second conversion)."""
    from erag_dagster.core.paths import model_cache_dir

    gcs, client = _free_port(), _free_port()
    home = tmp_path_factory.mktemp("home_b")
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # socket paths must stay short
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HOME": str(home),
        "ERAG_MODEL_CACHE": str(model_cache_dir()),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    env.pop("RAY_ADDRESS", None)
    command = [
        str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
        "--num-cpus", "2", "--include-dashboard", "false", "--port", str(gcs),
        "--ray-client-server-port", str(client), "--temp-dir", str(temp),
        "--node-ip-address", "127.0.0.1",
        "--disable-usage-stats",
    ]  # fmt: skip
    log = (temp / "ray-start.log").open("w")
    process = subprocess.Popen(
        command, env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 180
        while not (_listening(gcs) and _listening(client)):
            assert process.poll() is None, (temp / "ray-start.log").read_text()
            assert time.monotonic() < deadline, "the Ray head did not start in 180 s"
            time.sleep(1)
        if ray.is_initialized():  # the module's local cluster: the driver connects elsewhere now
            ray.shutdown()
        _wait_until_it_runs_tasks(f"127.0.0.1:{gcs}")
        yield Head(f"127.0.0.1:{gcs}", f"ray://127.0.0.1:{client}", home, process)
    finally:
        process.send_signal(signal.SIGTERM)  # --block: stops the processes it started
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # its own group: only what it started
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _wait_until_it_runs_tasks(address: str) -> None:
    """Listening ports are not a ready cluster: run one task with a ``runtime_env`` (what a
    pool's actors and a Ray Client session need: the runtime-env agent) before the cases."""
    ray.init(address=address, log_to_driver=False)
    try:
        probe = ray.remote(num_cpus=0, runtime_env={"env_vars": {"ERAG_PROBE": "1"}})(
            lambda: os.environ.get("ERAG_PROBE")
        )
        assert ray.get(probe.remote(), timeout=180) == "1"
    finally:
        ray.shutdown()


def _label_on(head: Head, spec: ExecutorSpec, sample, path: Path) -> tuple[pl.DataFrame, list]:
    corpus, queries, run = sample
    messages: list[str] = []
    if ray.is_initialized():
        ray.shutdown()
    result = label_run(
        run, queries, corpus, reader_from_config("smollm2", READER), "f1", LabelStore(path),
        log=messages.append, executor=spec, commit=CommitPolicy(every_pairs=3),
    )  # fmt: skip
    assert result.judged_now == run.height
    assert not ray.is_initialized(), "the pool must disconnect from a cluster it connected to"
    assert head.process.poll() is None, "the head node must outlive the call"
    return result.labels, messages


@pytest.mark.slow
def test_labels_on_a_running_cluster_by_address_auto(
    external_head, sample, in_process, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", external_head.gcs)
    spec = ExecutorSpec(executor="ray", address="auto", actors=1, num_cpus=1)
    labels, messages = _label_on(external_head, spec, sample, tmp_path / "labels.sqlite")
    assert labels.equals(in_process), "labels on the running cluster differ from in-process"
    assert any("Ray: connected (auto; started here: False)" in m for m in messages), messages
    assert any("1 reader actors ready" in m for m in messages), messages


@pytest.mark.slow
def test_labels_on_a_running_cluster_through_ray_client(
    external_head, sample, in_process, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    spec = ExecutorSpec(executor="ray", address=external_head.client, actors=1, num_cpus=1)
    labels, messages = _label_on(external_head, spec, sample, tmp_path / "labels.sqlite")
    assert labels.equals(in_process), "labels through Ray Client differ from in-process"
    assert any(f"Ray: connected ({external_head.client}; " in m for m in messages), messages


@pytest.mark.slow
def test_an_actor_with_another_reader_fingerprint_is_refused(
    external_head, sample, tmp_path, monkeypatch
) -> None:
    """The same reader config names ``~/smollm2.gguf``: here (``HOME`` = home_a) the packaged
    SmolLM2 file, on the cluster (its ``HOME`` = home_b) another file, the same weights with 64
    bytes appended (another sha256, so another fingerprint). The actors must be refused, with one
    line, before they load weights or generate anything."""
    from erag_dagster.readers.models import packaged_gguf_path

    packaged = packaged_gguf_path("smollm2-135m-instruct")
    home_a = tmp_path / "home_a"
    home_a.mkdir()
    (home_a / "smollm2.gguf").symlink_to(packaged)
    other = external_head.home / "smollm2.gguf"
    shutil.copyfile(packaged, other)
    with other.open("ab") as out:
        out.write(b"\0" * 64)
    monkeypatch.setenv("HOME", str(home_a))
    monkeypatch.setenv("RAY_ADDRESS", external_head.gcs)
    corpus, queries, run = sample
    reader = reader_from_config("smollm2", {**READER, "model": "~/smollm2.gguf"})
    store = LabelStore(tmp_path / "labels.sqlite")
    if ray.is_initialized():
        ray.shutdown()
    spec = ExecutorSpec(executor="ray", address="auto", actors=2, num_cpus=1)
    with pytest.raises(EnvironmentFault) as info:
        label_run(run.head(4), queries, corpus, reader, "f1", store, executor=spec)
    message = str(info.value)
    assert "\n" not in message
    assert "resolves reader 'smollm2' to fingerprint" in message, message
    assert f"this process to {reader.fingerprint[:16]}" in message, message
    assert not ray.is_initialized(), "a refused pool must disconnect"
    assert _generations(tmp_path / "labels.sqlite") == [], "a refused actor generated"
