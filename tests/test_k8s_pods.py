"""The Kubernetes jobs a production run would create, rendered by dagster-k8s's own code.

With ``DAGSTER_DEPLOYMENT=production`` the definitions use ``k8s_job_executor``; its
``K8sStepHandler.launch_step`` and ``K8sRunLauncher.launch_run`` build the step and run jobs
(``construct_dagster_k8s_job``) from the run launcher of ``deploy/production/dagster.yaml`` and the
step's op tags, exactly as on a cluster. No cluster is needed: the handler and the launcher are
given a recorder in place of the Kubernetes batch API, which keeps the job bodies they submit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster._config import process_config, resolve_to_config_type
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.execution.api import create_execution_plan
from dagster._core.execution.context.system import (
    PlanData,
    PlanOrchestrationContext,
)
from dagster._core.execution.context_creation_job import (
    create_context_free_log_manager,
)
from dagster._core.execution.retries import RetryMode
from dagster._core.executor.init import InitExecutorContext
from dagster._core.executor.step_delegating.step_handler.base import (
    StepHandlerContext,
)
from dagster._core.launcher import LaunchRunContext
from dagster._core.test_utils import create_run_for_test, instance_for_test
from dagster._grpc.types import ExecuteStepArgs
from dagster_k8s import K8sRunLauncher
from dagster_k8s.executor import _K8S_EXECUTOR_CONFIG_SCHEMA, K8sStepHandler

from erag_dagster.orchestration.definitions import build_defs

REPO = Path(__file__).resolve().parents[1]
PRODUCTION = yaml.safe_load((REPO / "deploy/production/dagster.yaml").read_text())
IMAGE = "erag-dagster:test"
NAMESPACE = "erag"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://127.0.0.1:6443"}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
users: [{name: test, user: {token: not-a-secret}}]
"""
READER_STEPS = ("doc_labels", "end_to_end", "baseline_labels", "efficiency_report")


class JobRecorder:
    """Stands in for the Kubernetes batch API: keeps each job body submitted."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, Any]] = []

    def create_namespaced_job(self, body: Any, namespace: str, **_: Any) -> None:
        self.jobs.append((namespace, body))


@pytest.fixture(scope="module")
def production(tmp_path_factory) -> Any:
    """The definitions, the production instance (its run launcher and concurrency settings;
    SQLite run storage instead of Postgres) and a kubeconfig naming no real cluster."""
    kubeconfig = tmp_path_factory.mktemp("k8s") / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    mp = pytest.MonkeyPatch()
    mp.setenv("DAGSTER_DEPLOYMENT", "production")
    mp.setenv("DAGSTER_K8S_NAMESPACE", NAMESPACE)
    defs = build_defs()  # the module's own `defs` was built at import, for local
    launcher = dict(PRODUCTION["run_launcher"])
    launcher["config"] = {
        **{k: v for k, v in launcher["config"].items() if k != "job_namespace"},
        "job_namespace": NAMESPACE,
        "job_image": IMAGE,
        "load_incluster_config": False,
        "kubeconfig_file": str(kubeconfig),
    }
    overrides = {"run_launcher": launcher, "concurrency": PRODUCTION["concurrency"]}
    with instance_for_test(overrides=overrides) as instance:
        yield defs, instance, str(kubeconfig)
    mp.undo()


def _job_for(defs: dg.Definitions, key: str) -> tuple[Any, dict[str, str]]:
    """The reconstructable asset job materialising one partition of ``key``, and run tags."""
    repo = ReconstructableRepository.for_module(
        "erag_dagster.orchestration.definitions", "defs", working_directory=os.getcwd()
    )
    job = defs.resolve_implicit_global_asset_job_def()
    recon = repo.get_reconstructable_job(job.name).get_subset(asset_selection={dg.AssetKey(key)})
    partitions = defs.get_assets_def(key).partitions_def
    tags = {"dagster/partition": partitions.get_partition_keys()[0]} if partitions else {}
    return recon, tags


def _step_pod(defs: dg.Definitions, instance: Any, kubeconfig: str, key: str) -> Any:
    """The pod spec of the Kubernetes job the production executor creates for step ``key``."""
    recon, tags = _job_for(defs, key)
    job_def = defs.resolve_implicit_global_asset_job_def()
    executor_def = job_def.executor_def
    assert executor_def.name == "k8s", "production definitions must use k8s_job_executor"
    config = process_config(resolve_to_config_type(_K8S_EXECUTOR_CONFIG_SCHEMA), {})
    assert config.success
    executor = executor_def.executor_creation_fn(
        InitExecutorContext(
            job=recon, executor_def=executor_def, executor_config=config.value, instance=instance
        )
    )
    plan = create_execution_plan(recon, tags=tags)
    run = create_run_for_test(
        instance, job_name=recon.get_definition().name,
        job_code_origin=recon.get_python_origin(), tags=tags,
    )  # fmt: skip
    plan_context = PlanOrchestrationContext(
        plan_data=PlanData(
            job=recon,
            dagster_run=run,
            instance=instance,
            execution_plan=plan,
            raise_on_error=True,
            retry_mode=RetryMode.DISABLED,
        ),
        log_manager=create_context_free_log_manager(instance, run),
        executor=executor,
        output_capture=None,
    )
    step = next(s for s in plan.steps if s.key == key)
    recorder = JobRecorder()
    # the executor's own step handler, with its container context; only the API is replaced
    built = executor._step_handler
    handler = K8sStepHandler(
        image=IMAGE,
        container_context=built._executor_container_context,
        load_incluster_config=False,
        kubeconfig_file=kubeconfig,
        k8s_client_batch_api=recorder,
    )
    args = ExecuteStepArgs(recon.get_python_origin(), run.run_id, [step.key])
    context = StepHandlerContext(
        instance=instance, plan_context=plan_context, steps=[step], execute_step_args=args
    )
    list(handler.launch_step(context))
    (namespace, body), *_ = recorder.jobs
    assert namespace == NAMESPACE
    return body.spec.template.spec, step


def _limits(pod: Any) -> dict[str, str]:
    return dict(pod.containers[0].resources.limits or {}) if pod.containers[0].resources else {}


@pytest.mark.parametrize("key", READER_STEPS)
def test_a_reader_step_pod_asks_for_one_gpu(production, key: str) -> None:
    defs, instance, kubeconfig = production
    pod, step = _step_pod(defs, instance, kubeconfig, key)
    assert _limits(pod).get("nvidia.com/gpu") == "1"
    assert pod.containers[0].image == IMAGE
    assert pod.service_account_name == PRODUCTION["run_launcher"]["config"]["service_account_name"]
    assert step.pool == "gpu"


@pytest.mark.parametrize("key", ["retrieval_run", "bm25_index", "erag_report"])
def test_a_non_reader_step_pod_asks_for_no_gpu(production, key: str) -> None:
    defs, instance, kubeconfig = production
    pod, step = _step_pod(defs, instance, kubeconfig, key)
    assert "nvidia.com/gpu" not in _limits(pod)
    assert step.pool is None


def test_the_run_pod_of_a_doc_labels_run_holds_no_gpu(production) -> None:
    """The run's own pod only orchestrates: the GPU is on the reader step's pod."""
    defs, instance, _ = production
    recon, tags = _job_for(defs, "doc_labels")
    run = create_run_for_test(
        instance, job_name=recon.get_definition().name,
        job_code_origin=recon.get_python_origin(), tags=tags,
    )  # fmt: skip
    recorder = JobRecorder()
    config = process_config(
        K8sRunLauncher.config_type(), instance.run_launcher.inst_data.config_dict
    )
    assert config.success
    launcher = K8sRunLauncher(**config.value, k8s_client_batch_api=recorder)
    launcher.register_instance(instance)
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    (namespace, body), *_ = recorder.jobs
    pod = body.spec.template.spec
    assert namespace == NAMESPACE and pod.containers[0].image == IMAGE
    assert "nvidia.com/gpu" not in _limits(pod)


def test_the_gpu_limit_applies_to_the_pool_the_reader_steps_use(production) -> None:
    """The limit in deploy/production/dagster.yaml is on what the steps actually carry: the
    ``gpu`` pool (the only pool any asset uses), 2 slots at op granularity — not a run tag."""
    defs, instance, _ = production
    graph = defs.resolve_asset_graph()
    pools = {key.to_user_string(): graph.get(key).pools for key in graph.materializable_asset_keys}
    assert {k for k, p in pools.items() if p} == set(READER_STEPS)
    assert all(p == {"gpu"} for k, p in pools.items() if p)
    concurrency = instance.get_concurrency_config()
    assert concurrency.pool_config.default_pool_limit == 2
    assert concurrency.pool_config.pool_granularity.value == "op"
    storage = instance.event_log_storage
    assert storage.initialize_concurrency_limit_to_default("gpu")  # what a claim does first
    assert storage.get_concurrency_info("gpu").slot_count == 2
    # no run-tag limit that no run carries (the old `erag/accelerator` limit matched nothing)
    assert "tag_concurrency_limits" not in PRODUCTION["concurrency"]["runs"]


def test_the_local_deployment_keeps_dagsters_default_executor(monkeypatch) -> None:
    from erag_dagster.core.errors import InputError
    from erag_dagster.orchestration.deployment import step_executor

    monkeypatch.delenv("DAGSTER_DEPLOYMENT", raising=False)
    monkeypatch.delenv("ERAG_STEP_EXECUTOR", raising=False)
    assert step_executor() is None
    monkeypatch.setenv("ERAG_STEP_EXECUTOR", "in_process")
    assert step_executor() is dg.in_process_executor
    monkeypatch.setenv("ERAG_STEP_EXECUTOR", "threads")
    with pytest.raises(InputError, match="ERAG_STEP_EXECUTOR='threads' unknown"):
        step_executor()
    monkeypatch.delenv("ERAG_STEP_EXECUTOR")
    monkeypatch.setenv("DAGSTER_DEPLOYMENT", "staging")
    with pytest.raises(InputError, match="DAGSTER_DEPLOYMENT='staging' unknown"):
        step_executor()
