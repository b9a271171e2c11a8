"""A small registry and Dagster instance for tests that materialise the real graph."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import yaml

from erag_dagster.config.registry import default_registry_path


def small_registry(folder: Path, dataset: str = "sample?max_questions=6", **changes) -> Path:
    """The packaged registry with a small evaluation section, its first reader only (the
    second doubles every reader stage; a test that wants it adds it through ``changes``), and
    optional config edits.

    ``changes`` maps ``"retrievers.bm25.k1"``-style dotted paths to new values.
    """
    raw = yaml.safe_load(Path(default_registry_path()).read_text())
    first = next(iter(raw["readers"]))
    raw["readers"] = {first: raw["readers"][first]}
    raw["evaluation"].update(
        {
            "dataset": dataset,
            "k": 10,
            "label_k": 2,
            "e2e_ks": [1, 2],
            "list_metrics": ["P@2", "Success@2", "RR", "AP", "nDCG@2"],
            "efficiency_ks": [2, 3],
            "efficiency_queries": 1,
        }
    )
    for dotted, value in changes.items():
        node = raw
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def write_instance_yaml(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    repo = Path(__file__).resolve().parents[1]
    (home / "dagster.yaml").write_text((repo / "deploy/local/dagster.yaml").read_text())
    return home


@contextlib.contextmanager
def scoped_env(**values: str) -> Iterator[None]:
    """Set environment variables for a block (module-scoped fixtures cannot use monkeypatch)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
