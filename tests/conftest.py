"""Shared fixtures (where the shared test data lives, an isolated storage root) and the order
in which ``make test``'s two workers take the test files (:func:`pytest_collection_modifyitems`).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from tests.postgres_server import postgres, store_target  # noqa: F401  (fixtures)

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_data_dir() -> Path:
    """``$ERAG_SHARED_DATA`` or ``<repo>/../shared/data`` (the layout CI uses)."""
    env = os.environ.get("ERAG_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.fail(f"shared test data not found at {path} (set ERAG_SHARED_DATA)")
    return path


@pytest.fixture()
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty storage root for one test (indexes, label store, model cache)."""
    root = tmp_path / "storage"
    monkeypatch.setenv("ERAG_STORAGE", str(root))
    return root


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test starts without a current Dagster definitions-state storage.

    Dagster keeps it in a ContextVar that ``with instance:`` sets and its exit resets; an
    instance entered and never exited by an earlier test leaves a storage whose instance has been
    garbage-collected, and every later in-process Definitions load then fails with "Attempted to
    resolve undefined DagsterInstance weakref" (seen in the full suite only, from test order).
    Runs before the test's fixtures, module-scoped ones included.
    """
    from dagster._core.storage.defs_state.base import _current_storage

    _current_storage.set(None)


#: The test files that take longest (``pytest --durations``, this machine; docs/setup.md lists
#: them with their reasons), longest first: ``make test`` runs two pytest-xdist workers that
#: each take a whole file at a time (``--dist loadfile --no-loadscope-reorder``), so starting
#: these first keeps one long file from running alone at the end.
SLOW_FIRST = (
    "test_ray_labels.py",  # three Ray clusters, actors that each load the reader (~350 s)
    "test_openai_reader.py",  # a real `transformers serve`, stopped and restarted mid-run
    "test_daemon.py",  # a real `dagster dev` building the graph with no click
    "test_bad_inputs.py",
    "test_determinism.py",
    "test_dagster_pipeline.py",
    "test_gate.py",
    "test_meta_eval.py",
    "test_no_gold.py",
    "test_one_core.py",
    "test_label_store.py",
    "test_greedy_decode.py",
    "test_gpu_check.py",
    "test_prefix_sharing.py",
    "test_component.py",  # a team's project: dg scaffold/check, its run labelled
    "test_store_backends.py",
    "test_run_output.py",
    "test_datasets.py",
    "test_automation.py",
    "test_ui_browser.py",
    "test_reproductions.py",
)
#: Run last: they wait for llama.cpp's server, built in the background by ``make test``.
LAST = ("test_llama_server.py",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow files first (:data:`SLOW_FIRST`, in that order), then the rest in collection order,
    :data:`LAST` at the end. A stable sort: tests keep their order within a file."""

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        if name in SLOW_FIRST:
            return SLOW_FIRST.index(name)
        return len(SLOW_FIRST) + (1 if name in LAST else 0)

    items.sort(key=rank)
