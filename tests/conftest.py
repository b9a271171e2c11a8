"""Shared fixtures: where the shared test data lives, and an isolated storage root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.postgres_server import postgres, store_target  # noqa: F401  (fixtures)

REPO_ROOT = Path(__file__).resolve().parents[1]


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
