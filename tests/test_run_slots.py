"""A run killed while it holds the ``gpu`` pool's slot does not block the next run forever.

Real parts: a Dagster instance from the local deployment's ``dagster.yaml`` (pool limit 1), a
child process that materialises a step in the ``gpu`` pool and is killed with SIGKILL while it
holds the slot, and a second child that needs the same slot afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest

from erag_dagster.orchestration.run_slots import (
    PID_TAG,
    process_is_gone,
    process_tags,
    release_dead_runs,
    slot_wait_line,
)
from tests.pipeline_fixtures import write_instance_yaml

#: A job whose one op runs in the ``gpu`` pool, writes ``claimed`` and then holds the slot for
#: as long as the first argument says (seconds), tagged as ``erag-dagster run`` tags its runs.
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import dagster as dg
    from erag_dagster.orchestration.run_slots import process_tags

    @dg.op(pool="gpu")
    def hold(context):
        Path(sys.argv[2]).write_text(context.run_id)
        time.sleep(float(sys.argv[1]))

    @dg.job
    def holds_the_gpu():
        hold()

    with dg.DagsterInstance.get() as instance:
        result = holds_the_gpu.execute_in_process(instance=instance, tags=process_tags())
        print("success" if result.success else "failure")
    """
)


def _child(home: Path, seconds: float, marker: Path) -> subprocess.Popen:
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(seconds), str(marker)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for(marker: Path, proc: subprocess.Popen) -> str:
    """The run id the child wrote once its op holds the slot (bounded: a failure, not a wait)."""
    for _ in range(1200):
        if marker.exists() and marker.read_text():
            return marker.read_text()
        assert proc.poll() is None, "the child ended before its op claimed the slot"
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.1)
    raise AssertionError("the child's op never claimed the slot")


@pytest.fixture
def home(tmp_path) -> Path:
    return write_instance_yaml(tmp_path / "home")


def test_a_killed_runs_slot_is_released_and_the_next_run_completes(home, tmp_path) -> None:
    held = _child(home, 600, tmp_path / "first")
    run_id = _wait_for(tmp_path / "first", held)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        # Alive: nothing is marked failed, and a step needing the pool says who holds it.
        assert release_dead_runs(instance) == []
        line = slot_wait_line(instance, {"gpu"})
        assert line is not None and run_id in line and "pool 'gpu' (limit 1)" in line
        os.killpg(held.pid, signal.SIGKILL)
        held.wait()
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots

        lines = release_dead_runs(instance)

        assert any(run_id in x and "marked failed" in x for x in lines), lines
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
        assert not instance.event_log_storage.get_concurrency_info("gpu").claimed_slots
        assert slot_wait_line(instance, {"gpu"}) is None
        assert release_dead_runs(instance) == []  # nothing left to act on
    after = _child(home, 0, tmp_path / "second")
    out, _ = after.communicate(timeout=120)  # before the fix: waited for the slot forever
    assert out.strip() == "success"


def test_process_tags_tell_a_live_process_from_a_gone_or_reused_pid() -> None:
    tags = process_tags()
    assert not process_is_gone(tags)
    assert process_is_gone({**tags, "erag/process_started": "1.0"})  # the pid, reused
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert process_is_gone({**tags, PID_TAG: done.stdout.strip()})
    assert not process_is_gone({**tags, "erag/host": "another-host"})  # cannot tell: left alone
    # killed and not yet reaped by its parent (a zombie): gone
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    started = psutil.Process(child.pid).create_time()
    zombie = {**tags, PID_TAG: str(child.pid), "erag/process_started": repr(started)}
    assert not process_is_gone(zombie)
    child.kill()
    for _ in range(100):
        if psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.05)
    assert process_is_gone(zombie)
    child.wait()
