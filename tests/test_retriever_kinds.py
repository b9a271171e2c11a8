"""Retriever kinds registered once (issue 31): the registry's kinds and keys come from the
registrations, partition keys are those of the parser before the registrations existed, the
registry loads no engine, and a new kind is its registration and nothing else."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from erag_dagster.config import registry as reg
from erag_dagster.config.registry import load_registry, parse_registry
from erag_dagster.core.errors import InputError
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.retrieval.kinds import KINDS
from erag_dagster.retrieval.kinds.base import RetrieverKind, Rule, RunRequest
from erag_dagster.retrieval.runs import rank_by_score

ROOT = Path(__file__).resolve().parents[1]

# Partition keys of these retrievers as the registry parser gave them before the kinds were
# registrations (commit 40b3423): the registrations must not move any partition.
EVERY_KIND = {
    "bm25": {"kind": "bm25", "k1": 0.9, "b": 0.4},
    "bm25plain": {"kind": "bm25"},
    "dense": {"kind": "dense", "encoder": "packaged:all-minilm-l6-v2", "dtype": "float32"},
    "hnsw": {
        "kind": "dense",
        "index": {"type": "hnsw", "m": 8},
        "normalize": False,
        "query_prefix": "query: ",
        "max_length": None,
    },
    "hybrid": {"kind": "hybrid", "fuse": ["bm25", "dense"], "rrf_k": 60, "depth": 100},
    "hybrid2": {"kind": "hybrid", "fuse": ["bm25plain", "hnsw", "theirs"]},
    "theirs": {"kind": "run_file", "path": "run.trec"},
    "rr": {
        "kind": "rerank",
        "first_stage": "bm25",
        "top_n": 5,
        "k": 3,
        "scorer": "reader:r",
        "dtype": "float32",
        "threads": 2,
    },
    "ce": {
        "kind": "rerank",
        "first_stage": "hybrid",
        "top_n": 5,
        "k": 5,
        "scorer": "ce",
        "max_length": None,
    },
    "mine": {"kind": "asset", "asset_key": "a/b"},
    "mine2": {"kind": "asset", "asset_key": ["a", "b"]},
}
PARTITION_KEYS = {
    "bm25": "bm25-286b153c", "bm25plain": "bm25plain-519cd6f3", "dense": "dense-0b52e784",
    "hnsw": "hnsw-8e67c21c", "hybrid": "hybrid-ab459aad", "hybrid2": "hybrid2-3ba29aa1",
    "theirs": "theirs-cc593a40", "rr": "rr-77a0a165", "ce": "ce-c5365671",
    "mine": "mine-a7ca894c", "mine2": "mine2-a7ca894c",
}  # fmt: skip


def _every_kind(folder: Path) -> str:
    (folder / "run.trec").write_text("q1 Q0 d1 1 2.0 t\n")
    (folder / "ce").mkdir()
    (folder / "ce" / "config.json").write_text("{}")
    return str(folder / "registry.yaml")


def test_partition_keys_are_unchanged_by_the_registrations(tmp_path: Path) -> None:
    raw = {"retrievers": EVERY_KIND, "readers": {"r": {"model": "m"}}}
    registry = parse_registry(raw, _every_kind(tmp_path), asset_retrievers=True)
    assert {n: e.partition_key for n, e in registry.retrievers.items()} == PARTITION_KEYS
    # defaults stay out of the stored (hashed) config
    assert registry.retrievers["bm25plain"].config == {"kind": "bm25"}
    assert "depth" not in registry.retrievers["hybrid2"].config


def test_registry_kinds_and_keys_are_the_registrations() -> None:
    assert reg.RETRIEVER_KINDS == ("bm25", "dense", "hybrid", "run_file", "rerank", "asset")
    assert reg.RETRIEVER_KEYS["bm25"] == {"kind", "k1", "b"}
    assert reg.RETRIEVER_KEYS["hybrid"] == {"kind", "fuse", "rrf_k", "depth"}
    for name, kind in KINDS.items():
        assert kind.name == name
        assert set(kind.defaults) <= set(kind.keys), name  # a default is of a key it reads


def _doc_rows(title: str) -> dict[str, str]:
    text = (ROOT / "docs" / "registry.md").read_text(encoding="utf-8")
    section = text.split(f"### {title}\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| (.*) \|$", section, re.M)}


def test_docs_state_each_default_of_each_kind() -> None:
    stated = 0
    for name, kind in KINDS.items():
        rows = _doc_rows(f"`kind: {name}`")
        for key, value in kind.defaults.items():
            assert f"(default {value:g}" in rows[key], f"docs/registry.md kind {name} {key}"
            stated += 1
    assert stated == 4  # bm25 k1, b; hybrid rrf_k, depth


def test_the_registry_loads_no_engine() -> None:
    engines = ("pyserini", "jnius", "faiss", "torch", "transformers")
    code = (
        "import sys, erag_dagster.config.registry; "
        f"print(' '.join(m for m in {engines!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "", f"imported with the registry: {done.stdout.strip()}"


# --- a new kind: its module (here, these lines) and one registration -------------------------


def _fixed_run(request: RunRequest) -> pl.DataFrame:
    """Every query gets ``docs`` in their order, cut to ``k``, scores ``weight / rank``."""
    docs = request.config["docs"][: request.k]
    weight = float(request.setting("weight"))
    rows = [
        (q, d, weight / rank)
        for q in request.queries.get_column("query_id").to_list()
        for rank, d in enumerate(docs, start=1)
    ]
    return rank_by_score(pl.DataFrame(rows, schema=["query_id", "doc_id", "score"], orient="row"))


def _needs_docs(
    name: str,
    config: Mapping[str, Any],
    retrievers: Mapping[str, Mapping[str, Any]],
    readers: Collection[str],
    path: str,
) -> None:
    if "docs" not in config:
        raise InputError(f"{path}: fixed {name!r} needs 'docs'")


FIXED = RetrieverKind(
    name="fixed",
    keys={
        "docs": Rule(lambda v: isinstance(v, list) and bool(v), "a list of document ids"),
        "weight": Rule(lambda v: isinstance(v, int | float), "a number"),
    },
    defaults={"weight": 2.0},
    run=_fixed_run,
    check=_needs_docs,
)


def _write(folder: Path, retrievers: dict) -> Path:
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"retrievers": retrievers, "readers": {"r": {"model": "m"}}}))
    return path


def test_a_new_kind_is_its_registration(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(KINDS, "fixed", FIXED)  # what its line in REGISTERED does
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d3 2 1.0 t\n")
    path = _write(
        tmp_path,
        {
            "mine": {"kind": "fixed", "docs": ["d2", "d1"]},
            "theirs": {"kind": "run_file", "path": "run.trec"},
            "both": {"kind": "hybrid", "fuse": ["mine", "theirs"]},
        },
    )
    registry = load_registry(path)
    corpus = pl.DataFrame({"doc_id": ["d1", "d2", "d3"], "title": [""] * 3, "text": list("abc")})
    queries = pl.DataFrame({"query_id": ["q1"], "question": ["x"], "answers": [["a"]]})
    run = run_retriever(registry, "mine", corpus, queries, k=2)
    assert run.rows() == [("q1", "d2", 1, 2.0), ("q1", "d1", 2, 1.0)]  # default weight 2
    fused = run_retriever(registry, "both", corpus, queries, k=3)  # RRF, default rrf_k 60
    assert fused.get_column("doc_id").to_list() == ["d1", "d2", "d3"]
    assert fused.get_column("score").to_list() == pytest.approx([1 / 62 + 1 / 61, 1 / 61, 1 / 62])
    # the kind's value rules, keys and checks refuse with the registry's one line
    for config, message in (
        ({"kind": "fixed", "docs": "d1"}, "has docs: 'd1'; it must be a list of document ids"),
        ({"kind": "fixed", "docs": ["d1"], "k1": 1}, "(fixed) has unknown key 'k1'"),
        ({"kind": "fixed"}, "fixed 'mine' needs 'docs'"),
    ):
        with pytest.raises(InputError, match=re.escape(message)):
            load_registry(_write(tmp_path, {"mine": config}))


def test_without_the_registration_the_kind_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, {"mine": {"kind": "fixed", "docs": ["d1"]}})
    with pytest.raises(InputError, match=r"has kind 'fixed'; use one of \('bm25', 'dense'"):
        load_registry(path)
