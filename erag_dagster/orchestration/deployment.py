"""The deployment (``$DAGSTER_DEPLOYMENT``, as in Dagster's ``project_fully_featured`` example)
and the Dagster executor that runs a run's steps in it. The resources of each deployment are
:func:`erag_dagster.orchestration.definitions.build_resources`.

* ``local`` (default): Dagster's default executor (steps as subprocesses of the run), or, with
  ``$ERAG_STEP_EXECUTOR=in_process``, every step inside the run's own process: one Python start
  (dagster, torch, transformers: seconds each on a small machine) per run instead of one per
  step, for small graphs on a laptop (the daemon and UI tests use it). Steps then run one after
  the other.
* ``production`` (Kubernetes, ``deploy/production``): dagster-k8s's ``k8s_job_executor`` — every
  step is its own Kubernetes job, built from the run launcher's settings plus the step's **op**
  tags. That is what makes the reader steps' ``dagster-k8s/config`` GPU request take effect on
  the pods that run the reader, and only there: the run's own pod, the retrieval, index and
  report steps ask for no GPU. The GPU limit is the ``gpu`` pool of those steps (op-level
  concurrency, ``concurrency.pools`` in ``deploy/production/dagster.yaml``). Why this and not
  run tags: ``deploy/README.md``.

An unknown deployment name is one :class:`~erag_dagster.core.errors.InputError` line.
"""

from __future__ import annotations

import os

import dagster as dg

from erag_dagster.core.errors import EnvironmentFault, InputError

DEPLOYMENT_ENV = "DAGSTER_DEPLOYMENT"
DEPLOYMENTS = ("local", "production")
STEP_EXECUTOR_ENV = "ERAG_STEP_EXECUTOR"
LOCAL_STEP_EXECUTORS = ("multiprocess", "in_process")


def deployment() -> str:
    """``$DAGSTER_DEPLOYMENT`` (``local`` when unset or empty), validated."""
    name = os.environ.get(DEPLOYMENT_ENV, "").strip() or "local"
    if name not in DEPLOYMENTS:
        raise InputError(f"{DEPLOYMENT_ENV}={name!r} unknown; use {', '.join(DEPLOYMENTS)}")
    return name


def step_executor(name: str | None = None) -> dg.ExecutorDefinition | None:
    """The executor of deployment ``name`` (default: :func:`deployment`); ``None`` means
    Dagster's default."""
    if (name or deployment()) == "local":
        return dg.in_process_executor if local_step_executor() == "in_process" else None
    try:
        from dagster_k8s import k8s_job_executor
    except ImportError:
        raise EnvironmentFault(
            f"{DEPLOYMENT_ENV}=production needs dagster-k8s: pip install '.[production]'"
        ) from None
    return k8s_job_executor


def local_step_executor() -> str:
    """``$ERAG_STEP_EXECUTOR`` (``multiprocess`` when unset or empty), validated: where the
    local deployment runs a run's steps."""
    name = os.environ.get(STEP_EXECUTOR_ENV, "").strip() or "multiprocess"
    if name not in LOCAL_STEP_EXECUTORS:
        raise InputError(
            f"{STEP_EXECUTOR_ENV}={name!r} unknown; use {', '.join(LOCAL_STEP_EXECUTORS)}"
        )
    return name
