"""Concurrency slots left behind by a run whose process is gone, and the wait for a held slot.

Reader-bound steps run in the ``gpu`` pool
(:data:`~erag_dagster.orchestration.assets.labels.GPU_POOL`); the local instance allows one slot. A
step claims the slot when it starts and frees it when it ends. A process killed mid-step (``kill
-9``, a machine restart) never frees it and its run stays ``STARTED`` in the instance, so every
later reader-bound step of ``erag-dagster run`` would wait for that slot forever, silently, inside
Dagster's executor.

Policy (chosen, documented in docs/dagster-ui.md):

- Every run ``erag-dagster run`` materialises carries :func:`process_tags` — the host, the pid
  and the process's start time (seconds since the epoch, as ``psutil`` reports it; the start
  time tells a reused pid from the original process).
- Before each step, :func:`release_dead_runs` marks as failed every unfinished run tagged with
  *this* host whose process is gone (Dagster's ``report_run_failed``, with a message naming the
  pid) and frees the slots of every run that is finished or no longer recorded. Runs from other
  hosts, and untagged runs (the UI's, older versions'), are never marked failed: this process
  cannot know whether they are alive.
- When a pool the step needs is full of other runs' claims, :func:`slot_wait_line` says which run
  holds it, so the wait is one line on the terminal, not silence.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

import dagster as dg
import psutil

HOST_TAG = "erag/host"
PID_TAG = "erag/pid"
STARTED_TAG = "erag/process_started"

_UNFINISHED = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]

#: The statuses a run never leaves (what Dagster itself counts as finished).
FINISHED_STATUSES = frozenset(
    {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
)


#: :func:`_start_time` of a process this user may not inspect: alive, and not ours to judge.
_NOT_OURS = -1.0


def _start_time(pid: int) -> float | None:
    """The process's start time (seconds since the epoch); ``None`` when there is no such
    process (a zombie, killed and not yet reaped by its parent, counts as none);
    :data:`_NOT_OURS` when the system refuses to say."""
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return _NOT_OURS


def process_tags() -> dict[str, str]:
    """Tags that identify this process: host, pid and start time (see module docstring)."""
    return {
        HOST_TAG: socket.gethostname(),
        PID_TAG: str(psutil.Process().pid),
        STARTED_TAG: repr(psutil.Process().create_time()),
    }


def process_is_gone(tags: dict[str, str]) -> bool:
    """Whether the process these :func:`process_tags` name has ended (on this host only).

    ``False`` for tags of another host or without a pid: nothing here can tell.
    """
    if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
        return False
    started = _start_time(int(tags[PID_TAG]))
    if started is None:
        return True
    if started == _NOT_OURS:
        return False
    return STARTED_TAG in tags and repr(started) != tags[STARTED_TAG]


def release_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark this host's unfinished runs whose process is gone as failed, then free the slots
    of every finished or unrecorded run. Returns one line per run acted on (empty: nothing)."""
    lines: list[str] = []
    records = instance.get_run_records(
        filters=dg.RunsFilter(statuses=_UNFINISHED, tags={HOST_TAG: socket.gethostname()})
    )
    for record in records:
        run = record.dagster_run
        if process_is_gone(dict(run.tags)):
            instance.report_run_failed(
                run,
                message=f"the process that ran it (pid {run.tags.get(PID_TAG)} on "
                f"{run.tags.get(HOST_TAG)}) ended without finishing it",
            )
            lines.append(
                f"run {run.run_id} was left unfinished by a process that is gone "
                f"(pid {run.tags.get(PID_TAG)}); marked failed"
            )
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return lines
    holders = storage.get_concurrency_run_ids()
    if not holders:
        return lines
    live = {
        r.dagster_run.run_id
        for r in instance.get_run_records(filters=dg.RunsFilter(run_ids=list(holders)))
        if r.dagster_run.status not in FINISHED_STATUSES
    }
    for run_id in sorted(holders - live):
        if storage.free_concurrency_slots_for_run(run_id):
            lines.append(f"freed the concurrency slot held by run {run_id}, which has ended")
    return lines


def slot_wait_line(instance: dg.DagsterInstance, pools: Iterable[str]) -> str | None:
    """One line naming the run(s) holding a full pool among ``pools``, or ``None`` when every
    pool has a free slot (or the instance has no pool limits)."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return None
    for pool in sorted(set(pools)):
        info = storage.get_concurrency_info(pool)
        if info.limit is None or len(info.claimed_slots) < info.limit:
            continue
        holders = ", ".join(sorted(info.active_run_ids))
        return (
            f"waiting for a slot of pool '{pool}' (limit {info.limit}), held by run {holders}; "
            "if that run's process is gone, terminate it in the UI (Runs) and free its slot "
            "(Deployment → Concurrency)"
        )
    return None


def step_pools(assets: Iterable[dg.AssetsDefinition], keys: Iterable[dg.AssetKey]) -> set[str]:
    """The pools the ops materialising ``keys`` run in (empty when none has a pool)."""
    wanted = set(keys)
    return {
        a.node_def.pool
        for a in assets
        if isinstance(a, dg.AssetsDefinition)
        and wanted & set(a.keys)
        and getattr(a.node_def, "pool", None)
    }
