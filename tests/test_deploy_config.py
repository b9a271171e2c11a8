"""The shipped Dagster instance configs load and validate against Dagster's own schemas.

Local: ``deploy/local/dagster.yaml`` (telemetry off, the `gpu` pool at 1). Production:
``deploy/production/dagster.yaml`` (Postgres storage, queued run coordinator, Kubernetes run
launcher) — validated with dagster-postgres and dagster-k8s installed, credentials from env.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import dagster as dg
import pytest
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config

REPO = Path(__file__).resolve().parents[1]


def test_local_instance_config_loads(tmp_path: Path) -> None:
    (tmp_path / "dagster.yaml").write_text((REPO / "deploy/local/dagster.yaml").read_text())
    config, _ = dagster_instance_config(str(tmp_path), "dagster.yaml")
    assert config["telemetry"]["enabled"] is False
    assert config["concurrency"]["pools"]["default_limit"] == 1
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    assert instance.get_concurrency_config().pool_config.default_pool_limit == 1


def test_production_instance_config_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_HOST", "DAGSTER_PG_DB",
                 "DAGSTER_K8S_NAMESPACE"):  # fmt: skip
        monkeypatch.setenv(name, "x")
    config, _ = dagster_instance_config(str(REPO / "deploy/production"), "dagster.yaml")
    for key in ("run_launcher", "run_coordinator"):
        spec = config[key]
        klass = getattr(importlib.import_module(spec["module"]), spec["class"])
        result = process_config(klass.config_type(), spec.get("config") or {})
        assert result.success, [e.message for e in result.errors or []]
    from dagster_postgres import DagsterPostgresStorage

    result = process_config(DagsterPostgresStorage.config_type(), config["storage"]["postgres"])
    assert result.success, [e.message for e in result.errors or []]
    # no secret is written in the file: credentials come from the environment
    text = (REPO / "deploy/production/dagster.yaml").read_text()
    assert "password: { env: DAGSTER_PG_PASSWORD }" in text


def test_reader_steps_request_a_gpu_on_kubernetes() -> None:
    from erag_dagster.definitions import build_defs

    graph = build_defs().resolve_asset_graph()
    for key in ("doc_labels", "end_to_end", "baseline_labels", "efficiency_report"):
        node = graph.get(dg.AssetKey(key))
        k8s = node.assets_def.op.tags["dagster-k8s/config"]
        k8s = json.loads(k8s) if isinstance(k8s, str) else k8s  # tags are stored as JSON text
        limits = k8s["container_config"]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "1"
        assert node.pools == {"gpu"}


def test_workspace_yaml_names_the_definitions_module() -> None:
    import yaml

    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())
    target = workspace["load_from"][0]["python_module"]
    assert target["module_name"] == "erag_dagster.definitions"
    module = importlib.import_module(target["module_name"])
    assert isinstance(module.defs, dg.Definitions)
