"""Acceptance (issue #15 §6) with a real `dagster dev` daemon, not evaluate_automation_conditions.

A fresh deployment (its own ``DAGSTER_HOME`` and ``ERAG_STORAGE``, two questions, two readers,
BM25 only, ``label_k`` 1) builds the graph with no click: ``input_change_sensor`` observes the
never-observed inputs on its first tick and the automation sensor then materialises every
partition. A reader edit (a new system prompt for one reader, then "Reload definitions", here
the ``reloadRepositoryLocation`` mutation) runs that reader's new ``doc_labels`` partition once,
with that reader's observed version as ``dagster/input_data_version/reader_models``, and no other
``doc_labels`` partition again. Then the dataset is edited (one of its two questions kept):
after the reload, ``queries`` changes first and the label assets wait until ``retrieval_run``
has been recomputed from the new questions (issue 42: they used to label the stale run, and
``end_to_end`` "succeeded" with nothing answered); every run after the edit succeeds and every
label it writes was made from the new run. ``dagster dev`` (started as ``make dev`` starts
it: ``python -m erag_dagster.orchestration.dev_server``) then stops on SIGINT.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
import yaml

from erag_dagster.config.registry import default_registry_path, load_registry
from erag_dagster.orchestration.assets.automation import reader_digest
from tests.pipeline_fixtures import write_instance_yaml

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
LOCATION = "erag_dagster.orchestration.definitions"
BUILD_TIMEOUT_S = 480  # the first build: about 10 runs, each a fresh process (2 loaded cores)
EDIT_TIMEOUT_S = 300
DOC_LABELS = dg.AssetKey("doc_labels")
READER_MODELS = dg.AssetKey("reader_models")


def _registry(
    path: Path, beta_prompt: str | None = None, dataset: str = "sample?max_questions=2"
) -> Path:
    """BM25 only, two readers (``alpha``, ``beta``: the packaged reader, 8 new tokens, float32),
    on ``dataset``."""
    packaged = yaml.safe_load(Path(default_registry_path()).read_text())
    reader = {**packaged["readers"]["smollm2-135m"], "max_new_tokens": 8, "dtype": "float32"}
    beta = dict(reader) if beta_prompt is None else {**reader, "system_prompt": beta_prompt}
    raw = {
        "retrievers": {"bm25": packaged["retrievers"]["bm25"]},
        "readers": {"alpha": reader, "beta": beta},
        "evaluation": {
            **packaged["evaluation"],
            "dataset": dataset,
            "k": 3,
            "label_k": 1,
            "e2e_ks": [1],
            "list_metrics": ["P@1", "RR"],
            "human_metrics": ["nDCG@3", "RR"],
        },
    }
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _graphql(base: str, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"{base}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _wait_for_server(base: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "dagster dev exited during start-up"
        try:
            with urllib.request.urlopen(f"{base}/server_info", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"{base}/server_info did not answer within {timeout} s")


def _doc_label_events(instance: dg.DagsterInstance) -> list[dg.EventLogRecord]:
    return list(instance.fetch_materializations(DOC_LABELS, limit=1000, ascending=True).records)


def _counts(instance: dg.DagsterInstance) -> Counter[str]:
    return Counter(r.partition_key for r in _doc_label_events(instance))


def _failed_runs(instance: dg.DagsterInstance) -> list[str]:
    failed = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
    return [
        f"{run.run_id[:8]} {run.job_name} {run.tags.get('dagster/partition', '')}" for run in failed
    ]


def _wait_until(instance, done, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        failed = _failed_runs(instance)
        assert not failed, f"runs failed while waiting for {what}: {failed} (log: {log})"
        if done():
            return
        time.sleep(1)
    raise AssertionError(
        f"{what} not done within {timeout} s; doc_labels so far: {dict(_counts(instance))} "
        f"(log: {log})"
    )


IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
SENSORS = ("default_automation_condition_sensor", "input_change_sensor")
TICKS_QUERY = """
query($selector: SensorSelector!, $after: Float) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { ticks(afterTimestamp: $after, limit: 50) { status runIds } } }
  }
}"""


def _ticks_after(base: str, sensor: str, after: float) -> list[dict]:
    """The sensor's ticks that began after ``after`` (epoch seconds), as the UI reads them."""
    selector = {
        "repositoryLocationName": LOCATION,
        "repositoryName": "__repository__",
        "sensorName": sensor,
    }
    data = _graphql(base, TICKS_QUERY, {"selector": selector, "after": after})["data"]
    sensor_data = data["sensorOrError"]
    assert sensor_data["__typename"] == "Sensor", sensor_data
    return sensor_data["sensorState"]["ticks"]


def _settled(base: str, instance: dg.DagsterInstance, ticks: int = 2) -> Callable[[], bool]:
    """A condition on recorded events, not on elapsed time: no run is queued or running, and
    each of :data:`SENSORS` has completed ``ticks`` ticks that began after the last run ended
    and requested nothing — the daemon looked at the graph again and found nothing to do.

    A registry edit while a run of an old partition is in flight fails that run's later steps
    (each step process loads the edited registry, where the old partition no longer exists), so
    the test edits only once the first build has settled."""

    def done() -> bool:
        if instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT)):
            return False
        ends = [r.end_time for r in instance.get_run_records() if r.end_time is not None]
        last_end = max(ends, default=0.0)
        for sensor in SENSORS:
            finished = [t for t in _ticks_after(base, sensor, last_end) if t["status"] != "STARTED"]
            if any(t["runIds"] for t in finished) or len(finished) < ticks:
                return False  # it asked for a run (which will show up), or has not looked yet
        return True

    return done


REPORTS = ("erag_report", "correlation_report", "label_agreement", "retrieval_report")


def _materialised(instance: dg.DagsterInstance, keys: tuple[str, ...]) -> bool:
    """Every asset of ``keys`` has a materialisation."""
    return all(instance.get_latest_materialization_event(dg.AssetKey(k)) for k in keys)


def _records(instance: dg.DagsterInstance, asset: str) -> list[dg.EventLogRecord]:
    """Every materialisation of ``asset``, oldest first."""
    key = dg.AssetKey(asset)
    return list(instance.fetch_materializations(key, limit=1000, ascending=True).records)


def _materialised_since(instance: dg.DagsterInstance, keys: tuple[str, ...], t: float) -> bool:
    """Every asset of ``keys`` has a materialisation after ``t`` (epoch seconds)."""
    return all(
        (event := instance.get_latest_materialization_event(dg.AssetKey(k))) is not None
        and event.timestamp > t
        for k in keys
    )


def _pair(reader: str, retriever: str) -> str:
    return str(dg.MultiPartitionKey({"reader": reader, "retriever": retriever}))


def _stop(proc: subprocess.Popen, timeout: float = 90) -> float:
    """SIGINT to the whole process group; seconds until every process of the group is gone."""
    started = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        raise AssertionError(f"dagster dev still running {timeout} s after SIGINT") from None
    while time.monotonic() - started < timeout:
        try:
            os.killpg(proc.pid, 0)
            time.sleep(0.2)
        except ProcessLookupError:
            return time.monotonic() - started
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"a child of dagster dev outlived it by {timeout} s after SIGINT")


def test_fresh_daemon_builds_and_a_reader_edit_reruns_only_that_reader(tmp_path: Path) -> None:
    home = write_instance_yaml(tmp_path / "dagster_home")
    registry_path = _registry(tmp_path / "registry.yaml")
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(home),
        ERAG_STORAGE=str(tmp_path / "storage"),
        ERAG_REGISTRY=str(registry_path),
        ERAG_SENSOR_INTERVAL_S="3",  # each tick of the daemon's 5-s loop
        ERAG_STEP_EXECUTOR="in_process",  # one process per run, not per step: ~3x fewer starts
        ERAG_TORCH_THREADS="1",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    before = load_registry(registry_path)
    alpha, beta = before.reader("alpha").partition_key, before.reader("beta").partition_key
    bm25 = before.retriever("bm25").partition_key
    port, log = _free_port(), tmp_path / "dagster-dev.log"
    # the instance's storage exists before dagster dev starts (not created by two processes)
    instance = dg.DagsterInstance.from_config(str(home))
    with log.open("w") as out:
        # what `make dev` runs: Dagster's `dagster dev`, with SIGINT handled even when this
        # test process inherited it ignored (a background CI job does)
        proc = subprocess.Popen(
            [sys.executable, "-m", "erag_dagster.orchestration.dev_server", "-m", LOCATION,
             "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, process_group=0,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(base, proc, timeout=120)
        # 1. no click: the inputs are observed, then every doc_labels partition is built, and
        # the reports that read every partition (the graph's last assets: until they ran, the
        # daemon may still submit a run, which a registry edit would break mid-way)
        first = {_pair(alpha, bm25), _pair(beta, bm25)}
        _wait_until(
            instance,
            lambda: first <= set(_counts(instance)) and _materialised(instance, REPORTS),
            BUILD_TIMEOUT_S, "the first build", log,
        )  # fmt: skip
        _wait_until(
            instance, _settled(base, instance), BUILD_TIMEOUT_S, "the first build to settle", log
        )
        observations = instance.get_runs(filters=dg.RunsFilter(job_name="observe_inputs"))
        assert observations, "no observe_inputs run: the inputs were observed another way"

        # 2. edit one reader, reload the definitions (what the UI's "Reload" does)
        _registry(registry_path, beta_prompt="Answer in as few words as possible.")
        after = load_registry(registry_path)
        new_beta = after.reader("beta").partition_key
        assert new_beta != beta and after.reader("alpha").partition_key == alpha
        reloaded = _graphql(
            base,
            "mutation($name: String!) { reloadRepositoryLocation(repositoryLocationName: $name)"
            " { __typename } }",
            {"name": LOCATION},
        )
        assert (
            reloaded["data"]["reloadRepositoryLocation"]["__typename"] == "WorkspaceLocationEntry"
        )
        edited = _pair(new_beta, bm25)
        _wait_until(
            instance, lambda: edited in _counts(instance), EDIT_TIMEOUT_S, "the edit's run", log
        )
        # one quiet tick of each sensor after the edit's last run is enough here: nothing
        # edits the registry after this, and a late extra run would still fail the counts
        _wait_until(instance, _settled(base, instance, ticks=1), EDIT_TIMEOUT_S, "settling", log)
        counts = _counts(instance)
        # the other readers' partitions (alpha, and beta before the edit) did not run again
        assert set(counts) == {_pair(alpha, bm25), _pair(beta, bm25), edited}, counts
        assert counts[_pair(alpha, bm25)] == counts[_pair(beta, bm25)] == 1, counts
        # the edited reader's partition ran, and generated each of its answers once: Dagster's
        # automation may request it a second time while the first run is still going (right
        # after a partitions-definition change it does not see that run as in progress:
        # docs/dagster-ui.md); such a second run takes every answer from the label store
        judged = [
            r.asset_materialization.metadata["pairs_judged_now"].value
            for r in _doc_label_events(instance)
            if r.partition_key == edited
        ]
        assert judged[0] > 0 and all(n == 0 for n in judged[1:]), judged

        # 3. each label partition carries its own reader's observed version
        for record in _doc_label_events(instance):
            tags = record.asset_materialization.tags
            entry = (after if record.partition_key == edited else before).reader(
                tags["dagster/partition/reader"]
            )
            assert tags["dagster/input_data_version/reader_models"] == reader_digest(
                entry.name, entry.config
            ), record.partition_key
        assert not _failed_runs(instance)

        # 4. edit the dataset (keep one of its two questions) and reload: nothing reads the
        # stale retrieval_run (whose other question the new queries lack), nothing fails
        edited_at = time.time()
        _registry(registry_path, "Answer in as few words as possible.", "sample?max_questions=1")
        reloaded = _graphql(
            base,
            "mutation($name: String!) { reloadRepositoryLocation(repositoryLocationName: $name)"
            " { __typename } }",
            {"name": LOCATION},
        )
        assert reloaded["data"]["reloadRepositoryLocation"]["__typename"] == (
            "WorkspaceLocationEntry"
        )
        systems = {_pair(alpha, bm25), edited}

        def rebuilt() -> bool:
            after_edit = {
                r.partition_key for r in _doc_label_events(instance) if r.timestamp > edited_at
            }
            return systems <= after_edit and _materialised_since(instance, REPORTS, edited_at)

        _wait_until(instance, rebuilt, EDIT_TIMEOUT_S, "the rebuild after the dataset edit", log)
        _wait_until(instance, _settled(base, instance, ticks=1), EDIT_TIMEOUT_S, "settling", log)
        runs = [r for r in _records(instance, "retrieval_run") if r.timestamp > edited_at]
        assert runs and all(r.asset_materialization.metadata["queries"].value == 1 for r in runs)
        # which materialisation of retrieval_run each output read: Dagster's input event
        # pointer (its input_data_version of a partitioned input is a hash over partitions)
        fresh = {str(r.storage_id) for r in runs}
        for asset in ("doc_labels", "end_to_end", "baseline_labels"):
            later = [r for r in _records(instance, asset) if r.timestamp > edited_at]
            assert {r.partition_key for r in later} == systems, (asset, later)
            for record in later:  # made from the new run, never the stale one
                tags = record.asset_materialization.tags
                assert tags["dagster/input_event_pointer/retrieval_run"] in fresh, (asset, tags)
        for record in _doc_label_events(instance):
            if record.timestamp > edited_at:  # the one question's top document: not empty
                meta = record.asset_materialization.metadata
                assert meta["pairs_judged_now"].value + meta["pairs_from_store"].value == 1
        assert not _failed_runs(instance)
    finally:
        stop_s = _stop(proc)
    # 4. a clean stop: the whole group is gone soon after one SIGINT
    assert stop_s < 60, f"dagster dev took {stop_s:.0f} s to stop"


def _ignore_sigint() -> None:
    """What a non-interactive shell does to a background job (``cmd &`` in a script)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_dev_started_in_the_background_of_a_script_stops_on_sigint(tmp_path: Path) -> None:
    """Issue #15 §6: ``dagster dev`` that inherited an ignored SIGINT (so, through Dagster's
    SIGTERM→SIGINT mapping, an ignored SIGTERM too) hung after "Daemon threads shut down." until
    SIGKILL. ``python -m erag_dagster.orchestration.dev_server`` (what ``make dev`` runs) stops
    cleanly."""
    home = write_instance_yaml(tmp_path / "dagster_home")
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(home),
        ERAG_STORAGE=str(tmp_path / "storage"),
        ERAG_REGISTRY=str(_registry(tmp_path / "registry.yaml")),
        ERAG_SENSOR_INTERVAL_S="3600",  # nothing to build: this test is about stopping
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    port, log = _free_port(), tmp_path / "dagster-dev.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "erag_dagster.orchestration.dev_server", "-m", LOCATION,
             "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, process_group=0,
            preexec_fn=_ignore_sigint,
        )  # fmt: skip
    try:
        _wait_for_server(f"http://127.0.0.1:{port}", proc, timeout=180)
    finally:
        stop_s = _stop(proc)
    assert stop_s < 60, f"dagster dev took {stop_s:.0f} s to stop (log: {log})"
    assert "Dagster services shut down" in log.read_text()
