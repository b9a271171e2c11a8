"""The shipped Dagster instance configs load and validate against Dagster's own schemas.

Local: ``deploy/local/dagster.yaml`` (telemetry off, the `gpu` pool at 1). Production:
``deploy/production/dagster.yaml`` (Postgres storage, queued run coordinator, Kubernetes run
launcher) — validated with dagster-postgres and dagster-k8s installed, credentials from env.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
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
    from erag_dagster.orchestration.definitions import build_defs

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
    assert target["module_name"] == "erag_dagster.orchestration.definitions"
    module = importlib.import_module(target["module_name"])
    assert isinstance(module.defs, dg.Definitions)


# --- the instance settings the project relies on (erag_dagster/orchestration/instance_settings.py)
# -----------

MISSING_FILE_WARNING = "No dagster instance configuration file"


@pytest.mark.parametrize("deployment", ["local", "local-postgres", "production"])
def test_shipped_instance_configs_carry_the_settings(deployment: str) -> None:
    from erag_dagster.orchestration.instance_settings import missing_settings

    assert missing_settings(REPO / "deploy" / deployment / "dagster.yaml") == []


def test_the_line_names_what_a_home_lacks_and_its_snippet_is_enough(tmp_path: Path) -> None:
    from erag_dagster.orchestration.instance_settings import SNIPPET, instance_settings_line

    home = tmp_path / "home"
    home.mkdir()
    line = instance_settings_line(str(home))
    assert line is not None and "\n" not in line
    assert f"DAGSTER_HOME={home} has no dagster.yaml" in line
    assert "deploy/local/dagster.yaml" in line and SNIPPET in line
    # a file with the pool but not the run queue: the line names exactly what is missing
    (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 1\n")
    line = instance_settings_line(str(home))
    assert line is not None
    assert "lacks concurrency.runs.max_concurrent_runs:" in line
    assert "default_limit" not in line.split(":")[1]
    # the snippet the line offers is valid for Dagster and gives the gpu pool a limit of 1
    (home / "dagster.yaml").write_text(SNIPPET + "\n")
    assert instance_settings_line(str(home)) is None
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
    finally:
        instance.dispose()
    # no home (Dagster's temporary instance) and a home that is not a folder: nothing to say
    assert instance_settings_line("") is None
    assert instance_settings_line(str(tmp_path / "nope")) is None


def _bare_home_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "bare-home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "ERAG_STORAGE": str(tmp_path / "storage")}
    env.pop("ERAG_REGISTRY", None)
    return env


def test_dev_server_refuses_a_bare_home_in_one_line(tmp_path: Path) -> None:
    """``make dev``'s server on a home without dagster.yaml: one line and exit 2 before
    ``dagster dev`` starts, not a warning from each of its processes and an unlimited pool."""
    done = subprocess.run(
        [sys.executable, "-m", "erag_dagster.orchestration.dev_server",
         "-m", "erag_dagster.orchestration.definitions"],
        cwd=REPO, env=_bare_home_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("dev server not started: DAGSTER_HOME=")
    assert "has no dagster.yaml" in done.stderr and MISSING_FILE_WARNING not in done.stderr


def test_a_code_server_load_and_the_run_command_say_it_once(tmp_path: Path) -> None:
    """Loading the definitions (what a code server and each run worker do), then opening the
    instance as ``erag-dagster run`` does: the one line, once, and none of Dagster's own
    missing-file warnings."""
    code = (
        "import erag_dagster.orchestration.definitions\n"
        "from erag_dagster.orchestration.pipeline import _instance\n"
        "lines = []\n"
        "instance = _instance(lines.append)\n"
        "instance.get_runs_count()\n"
        "print(len(lines))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO, env=_bare_home_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "0"  # said once already, at the definitions load
    said = [line for line in done.stderr.splitlines() if "DAGSTER_HOME=" in line]
    assert len(said) == 1 and "has no dagster.yaml" in said[0], done.stderr
    assert MISSING_FILE_WARNING not in done.stderr


def test_the_run_command_says_it_through_its_log(tmp_path: Path, monkeypatch) -> None:
    from erag_dagster.orchestration import instance_settings
    from erag_dagster.orchestration.pipeline import _instance

    env = _bare_home_env(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    monkeypatch.setattr(instance_settings, "_warned", False)
    lines: list[str] = []
    instance = _instance(lines.append)
    instance.dispose()
    assert len(lines) == 1 and lines[0].startswith("warning: DAGSTER_HOME=")
    _instance(lines.append).dispose()
    assert len(lines) == 1  # once per process
