"""One evaluation behind every front door (issue 31): the same registry — one that leaves out
every optional ``evaluation:`` key — through ``erag-dagster run`` (the Dagster assets),
``erag_dagster.evaluate`` (the Python API), ``erag-dagster compare`` (the gate) and the HTML
report gives the same metric set, the same per-query labels, the same means and the same
verdict p-values. Each door is given the same dataset spec, as a user would on the command
line; everything else comes from :class:`~erag_dagster.config.evaluation.EvaluationConfig`'s
defaults.

The readers' answers come from the shared fixture answers (tests/answer_seed.py); the few
pairs they lack are generated once by the first door and read from the store by the others.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml

import erag_dagster
from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.config.registry import default_registry_path, load_registry
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import load_asset_value
from erag_dagster.reports.verdict import Verdict
from tests.answer_seed import shared_answers
from tests.pipeline_fixtures import scoped_env, write_instance_yaml

pytestmark = pytest.mark.slow

CONSOLE_SCRIPT = Path(sys.executable).with_name("erag-dagster")
DATASET = "sample?max_questions=6"


def _registry(folder: Path) -> Path:
    """The packaged bm25 and dense retrievers and first reader; no ``evaluation`` section."""
    raw = yaml.safe_load(Path(default_registry_path()).read_text())
    first = next(iter(raw["readers"]))
    registry = {
        "retrievers": {name: raw["retrievers"][name] for name in ("bm25", "dense")},
        "readers": {first: raw["readers"][first]},
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump(registry, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("one-core")
    registry = _registry(root)
    storage = root / "storage"
    store = storage / "labels.sqlite"
    home = write_instance_yaml(root / "home")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "ERAG_STORAGE": str(storage),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    for name in ("ERAG_DEBUG", "ERAG_REGISTRY", "ERAG_LABEL_STORE", "ERAG_DATASET"):
        env.pop(name, None)
    storage.mkdir()
    with shared_answers(tmp_path_factory, store):
        ran = subprocess.run(
            [str(CONSOLE_SCRIPT), "run", "--registry", str(registry), "--dataset", DATASET],
            capture_output=True, text=True, env=env, timeout=900,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    parsed = load_registry(registry)
    with scoped_env(DAGSTER_HOME=str(home), ERAG_STORAGE=str(storage)):
        instance = dg.DagsterInstance.from_config(str(home))
        try:
            assets = {
                key: load_asset_value(key, instance, str(registry))
                for key in ("erag_per_query", "erag_report", "verdict")
            }
            with build_defs(str(registry)).get_asset_value_loader(instance=instance) as loader:
                assets["doc_labels"] = pl.concat(
                    loader.load_asset_value(
                        "doc_labels",
                        partition_key=dg.MultiPartitionKey({"reader": reader, "retriever": r}),
                    ).with_columns(pl.lit(r).alias("retriever"))
                    for reader in parsed.reader_partitions
                    for r in parsed.retriever_partitions
                )
        finally:
            instance.dispose()
    api = erag_dagster.evaluate(dataset=DATASET, registry=registry, store=store)
    gate = subprocess.run(
        [str(CONSOLE_SCRIPT), "compare", "--baseline", "bm25", "--candidate", "dense",
         "--registry", str(registry), "--dataset", DATASET, "--store", str(store), "--json",
         "--allow-underpowered"],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert gate.returncode == 0, gate.stderr[-3000:]
    return {
        "registry": load_registry(registry),
        "run_stdout": ran.stdout,
        "assets": assets,
        "api": api,
        "gate": json.loads(gate.stdout),
        "page": (storage / "reports" / "report.html").read_text(encoding="utf-8"),
    }


def _labels(frame: pl.DataFrame) -> pl.DataFrame:
    """(retriever name, query, document, rank, label), sorted: comparable across doors."""
    return (
        frame.with_columns(pl.col("retriever").str.replace(r"-[0-9a-f]{8}$", ""))
        .select("retriever", "query_id", "doc_id", "rank", "label")
        .sort("retriever", "query_id", "rank")
    )


def test_the_registry_without_evaluation_keys_takes_the_one_set_of_defaults(doors) -> None:
    assert doors["registry"].evaluation == EvaluationConfig()


def test_every_door_scores_the_same_metrics(doors) -> None:
    wanted = EvaluationConfig().list_metrics
    api_per_query = doors["api"].frames["erag_per_query"]
    for per_query in (doors["assets"]["erag_per_query"], api_per_query):
        assert [c for c in per_query.columns if c not in ("reader", "retriever", "query_id")] == (
            wanted
        )
    assert [m["metric"] for m in doors["gate"]["metrics"]] == wanted


def test_every_door_has_the_same_labels(doors) -> None:
    run_labels = doors["assets"]["doc_labels"]
    api_labels = doors["api"].frames["doc_labels"]
    assert _labels(run_labels).equals(_labels(api_labels))
    assert _labels(run_labels).height == 6 * 3 * 2  # 6 questions, label_k 3, two retrievers


def test_every_door_has_the_same_means(doors) -> None:
    run_report = doors["assets"]["erag_report"].sort("retriever")
    api_report = doors["api"].frames["erag_report"].sort("retriever")
    assert run_report.equals(api_report)
    gate = {m["metric"]: m for m in doors["gate"]["metrics"]}
    by_name = {r["retriever"].rsplit("-", 1)[0]: r for r in run_report.to_dicts()}
    for metric, row in gate.items():
        assert math.isclose(row["baseline"], by_name["bm25"][metric], abs_tol=1e-12)
        assert math.isclose(row["candidate"], by_name["dense"][metric], abs_tol=1e-12)


def test_every_door_shows_the_same_verdict_p_values(doors) -> None:
    stored = Verdict.from_dict(doors["assets"]["verdict"])
    (api,) = doors["api"].verdicts
    assert stored.pairs.equals(api.pairs)
    assert stored.ranking.equals(api.ranking)
    (pair,) = stored.pairs.to_dicts()  # two retrievers: one pair, Holm over one p
    assert pair["p_holm"] == pair["p_perm"]
    # The gate tests the same pair on every metric (Holm over its metrics); its raw p of the
    # headline metric is the verdict's randomisation p (same queries, draws and seed).
    headline = {m["metric"]: m for m in doors["gate"]["metrics"]}[stored.metric]
    assert headline["p"] == pytest.approx(pair["p_perm"], abs=1e-12)
    # The terminal and the HTML page render the stored verdict: its p as printed.
    shown = f"p = {pair['p_holm']:.3f}" if pair["p_holm"] >= 0.001 else "p = <0.001"
    assert shown in doors["run_stdout"]
    assert shown in doors["page"]
