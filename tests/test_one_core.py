"""One evaluation behind every front door (issues 31 and 44): one registry through
``erag-dagster run`` (the Dagster assets), ``erag_dagster.evaluate`` (the Python API),
``erag-dagster compare`` (the gate), the Dagster component (``erag_dagster.ERagEvaluation``) and
the HTML page gives the same metric set, the same per-query labels, the same means, the same CIs
and p-values, the stars at its alpha, and scores a query missing from a run the same way.

The registry sets the statistics away from their defaults — ``seed: 7``, ``alpha: 0.01``,
``bootstrap_resamples: 200``, ``confidence: 0.9`` — and nothing else: every other setting is
:class:`~erag_dagster.config.evaluation.EvaluationConfig`'s default. Its retrievers: ``bm25``,
and ``bm25_partial``, a ``run_file`` of bm25's own run (written by ``erag-dagster retrieve``)
without one of the six questions — the missing query every door must score 0 and name.

The readers' answers come from the shared fixture answers (tests/answer_seed.py): bm25_partial's
documents are bm25's, so no new pair is generated; the component door materialises only the
steps after labelling, over the run's stored labels.
"""

from __future__ import annotations

import json
import math
import os
import re
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
from erag_dagster.orchestration.pipeline import load_asset_value, step_job
from erag_dagster.reports.leaderboard import format_leaderboard
from erag_dagster.reports.verdict import Verdict, short_name
from tests.answer_seed import shared_answers
from tests.pipeline_fixtures import scoped_env, write_instance_yaml

pytestmark = pytest.mark.slow

CONSOLE_SCRIPT = Path(sys.executable).with_name("erag-dagster")
DATASET = "sample?max_questions=6"
STATISTICS = {"seed": 7, "alpha": 0.01, "bootstrap_resamples": 200, "confidence": 0.9}
"""The registry's statistics: every one away from its default."""


def _registry(folder: Path, retrievers: dict) -> Path:
    """The packaged first reader, ``retrievers`` and an ``evaluation`` section holding only
    :data:`STATISTICS`."""
    raw = yaml.safe_load(Path(default_registry_path()).read_text())
    first = next(iter(raw["readers"]))
    registry = {
        "retrievers": retrievers,
        "readers": {first: raw["readers"][first]},
        "evaluation": dict(STATISTICS),
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump(registry, sort_keys=False))
    return path


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    ran = subprocess.run(
        [str(CONSOLE_SCRIPT), *args], capture_output=True, text=True, env=env, timeout=900
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran


def _component_values(registry: Path, home: Path, storage: Path) -> dict:
    """The component door: ``ERagEvaluation`` over the same registry file, its
    ``erag_per_query`` and ``verdict`` materialised in the run's instance from the labels the
    run stored (the steps after labelling: nothing is generated)."""
    from dagster.components.testing import create_defs_folder_sandbox

    from erag_dagster import ERagEvaluation

    contents = {"type": "erag_dagster.ERagEvaluation", "attributes": {"registry": str(registry)}}
    with (
        scoped_env(DAGSTER_HOME=str(home), ERAG_STORAGE=str(storage)),
        create_defs_folder_sandbox() as sandbox,
    ):
        path = sandbox.scaffold_component(ERagEvaluation, defs_yaml_contents=contents)
        with sandbox.load_component_and_build_defs(defs_path=path) as (_component, defs):
            keys = [dg.AssetKey("erag_per_query"), dg.AssetKey("verdict")]
            job = step_job(list(defs.assets or []), dict(defs.resources or {}), keys)
            instance = dg.DagsterInstance.from_config(str(home))
            try:
                result = job.execute_in_process(instance=instance)
                assert result.success
                return {
                    "settings": defs.resources["settings"].resolve(),
                    "erag_per_query": result.asset_value(keys[0]),
                    "verdict": result.asset_value(keys[1]),
                }
            finally:
                instance.dispose()


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("one-core")
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
    bm25 = yaml.safe_load(Path(default_registry_path()).read_text())["retrievers"]["bm25"]
    # bm25's run through the CLI's retrieve (the session's retrieve step), less one question
    first = _registry(root / "first", {"bm25": bm25})
    full_run = root / "bm25.trec"
    _cli(env, "retrieve", "--dataset", DATASET, "--retriever", "bm25", "--registry", str(first),
         "--output", str(full_run))  # fmt: skip
    lines = full_run.read_text().splitlines()
    missing = sorted({line.split()[0] for line in lines})[-1]
    partial = root / "bm25_partial.trec"
    partial.write_text("".join(f"{line}\n" for line in lines if line.split()[0] != missing))
    registry = _registry(
        root, {"bm25": bm25, "bm25_partial": {"kind": "run_file", "path": str(partial)}}
    )
    with shared_answers(tmp_path_factory, store):
        ran = _cli(env, "run", "--registry", str(registry), "--dataset", DATASET)
    parsed = load_registry(registry)
    with scoped_env(DAGSTER_HOME=str(home), ERAG_STORAGE=str(storage)):
        instance = dg.DagsterInstance.from_config(str(home))
        try:
            assets = {
                key: load_asset_value(key, instance, str(registry))
                for key in ("erag_per_query", "erag_report", "verdict", "retrieval_report")
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
            records = instance.fetch_materializations(dg.AssetKey("erag_per_query"), limit=1)
            meta = records.records[0].asset_materialization.metadata
            assets["per_query_note"] = meta["queries_scored_0_without_labels"].value
        finally:
            instance.dispose()
    page = (storage / "reports" / "report.html").read_text(encoding="utf-8")
    component = _component_values(registry, home, storage)
    api = erag_dagster.evaluate(dataset=DATASET, registry=registry, store=store)
    gate = _cli(env, "compare", "--baseline", "bm25", "--candidate", "bm25_partial",
                "--registry", str(registry), "--dataset", DATASET, "--store", str(store),
                "--json", "--allow-underpowered")  # fmt: skip
    return {
        "registry": parsed,
        "missing": missing,
        "run_stdout": ran.stdout,
        "assets": assets,
        "component": component,
        "api": api,
        "gate": json.loads(gate.stdout),
        "page": page,
    }


def _labels(frame: pl.DataFrame) -> pl.DataFrame:
    """(retriever name, query, document, rank, label), sorted: comparable across doors."""
    return (
        frame.with_columns(pl.col("retriever").str.replace(r"-[0-9a-f]{8}$", ""))
        .select("retriever", "query_id", "doc_id", "rank", "label")
        .sort("retriever", "query_id", "rank")
    )


def _by_name(frame: pl.DataFrame) -> dict[str, dict]:
    return {short_name(row["retriever"]): row for row in frame.to_dicts()}


def test_the_registry_sets_the_statistics_and_nothing_else(doors) -> None:
    config = doors["registry"].evaluation
    assert config == EvaluationConfig().with_overrides("test", **STATISTICS)
    assert set(config.differences(EvaluationConfig())) == set(STATISTICS)
    stats = config.statistics
    assert (stats.seed, stats.alpha, stats.resamples, stats.confidence) == (7, 0.01, 200, 0.9)
    assert doors["component"]["settings"] == config  # the component reads the same section


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
    assert _labels(run_labels).height == 6 * 3 + 5 * 3  # label_k 3; the partial run lacks one


def test_a_missing_query_is_scored_zero_and_named_by_every_door(doors) -> None:
    """The one missing-query rule: the question bm25_partial has no document for is in every
    per-query table with 0 on every metric, in the means, and in each door's note."""
    missing, metrics = doors["missing"], EvaluationConfig().list_metrics
    run, api = doors["assets"]["erag_per_query"], doors["api"].frames["erag_per_query"]
    component = doors["component"]["erag_per_query"]
    for per_query in (run, api, component):
        assert per_query.height == 2 * 6  # every question for every system
        row = per_query.filter(
            pl.col("retriever").str.starts_with("bm25_partial") & (pl.col("query_id") == missing)
        )
        assert row.select(metrics).row(0) == (0.0,) * len(metrics)
    assert run.equals(api) and run.equals(component)
    shown = f"has no document for 1 of 6 queries (each scored 0 on every metric: {missing!r})"
    assert shown in doors["assets"]["per_query_note"]
    assert re.search(
        rf"note: \S*bm25_partial\S* \(reader \S+\) {re.escape(shown)}", doors["run_stdout"]
    )
    assert any(shown in note for note in doors["api"].notes)
    assert f"note: {doors['api'].notes[0]}" in doors["api"].text()
    assert any(shown in note for note in doors["gate"]["notes"])
    assert doors["gate"]["candidate"]["queries"] == 6


def test_every_door_has_the_same_means(doors) -> None:
    run_report = doors["assets"]["erag_report"].sort("retriever")
    api_report = doors["api"].frames["erag_report"].sort("retriever")
    assert run_report.equals(api_report)
    gate = {m["metric"]: m for m in doors["gate"]["metrics"]}
    by_name = _by_name(run_report)
    for metric, row in gate.items():
        assert math.isclose(row["baseline"], by_name["bm25"][metric], abs_tol=1e-12)
        assert math.isclose(row["candidate"], by_name["bm25_partial"][metric], abs_tol=1e-12)
    assert doors["gate"]["candidate"]["aggregate"] == pytest.approx(
        {m: by_name["bm25_partial"][m] for m in gate}, abs=1e-12
    )


def test_every_door_shows_the_same_verdict_cis_and_p_values(doors) -> None:
    stored = Verdict.from_dict(doors["assets"]["verdict"])
    (api,) = doors["api"].verdicts
    component = Verdict.from_dict(doors["component"]["verdict"])
    assert stored.statistics == doors["registry"].evaluation.statistics
    for other in (api, component):
        assert stored.pairs.equals(other.pairs)
        assert stored.ranking.equals(other.ranking)
        assert other.statistics == stored.statistics
    (pair,) = stored.pairs.to_dicts()  # two retrievers: one pair, Holm over one p
    assert pair["p_holm"] == pair["p_perm"]
    assert pair["significant"] == (pair["p_holm"] < 0.01)  # decided at the registry's alpha
    # The gate tests the same pair (candidate - baseline) on every metric; its raw p and CI of
    # the headline metric are the verdict's (same queries, draws, seed 7, 200 resamples, 90%).
    headline = {m["metric"]: m for m in doors["gate"]["metrics"]}[stored.metric]
    assert headline["p"] == pytest.approx(pair["p_perm"], abs=1e-12)
    sign = 1.0 if short_name(pair["higher"]) == "bm25_partial" else -1.0
    gate_ci = sorted((sign * headline["ci_low"], sign * headline["ci_high"]))
    assert gate_ci == pytest.approx([pair["low"], pair["high"]], abs=1e-12)
    rule = doors["gate"]["rule"]
    assert (rule["alpha"], rule["confidence"], rule["n_resamples"], rule["seed"]) == (
        0.01, 0.9, 200, 7,
    )  # fmt: skip
    # The terminal and the HTML page render the stored verdict: its p and CIs as printed, and
    # the interval's level is the registry's.
    shown = f"p = {pair['p_holm']:.3f}" if pair["p_holm"] >= 0.001 else "p = <0.001"
    assert shown in doors["run_stdout"] and shown in doors["page"]
    for row in stored.ranking.to_dicts():
        assert f"{row['mean']:.3f} [{row['low']:.3f}, {row['high']:.3f}]" in doors["run_stdout"]
        assert f"{row['mean']:.2f} [{row['low']:.2f}, {row['high']:.2f}]" in doors["page"]
    assert "[90% bootstrap CI]" in doors["run_stdout"] and "95%" not in doors["run_stdout"]
    assert "90% CI" in doors["page"] and "95%" not in doors["page"]


def test_the_human_leaderboard_is_the_same_and_starred_at_alpha(doors) -> None:
    """The human-judgment leaderboard: the same CIs and p in the run and the API, rendered on
    the terminal and the page with a star where p < 0.01 (the registry's alpha)."""
    run_board = doors["assets"]["retrieval_report"]
    assert run_board.equals(doors["api"].frames["retrieval_report"])
    stats = doors["registry"].evaluation.statistics
    cells = format_leaderboard(run_board, stats)
    metric = EvaluationConfig().human_metrics[0]
    rows = zip(cells[metric], run_board[f"{metric}_p_perm"], run_board["baseline"], strict=True)
    for text, p, baseline in rows:
        assert text.endswith("*") == (p < 0.01 and not baseline)  # the star is alpha's
        assert " ".join(text.split(" ")[:3]) in doors["run_stdout"]  # mean [low, high]
    assert "* p < 0.01" in doors["run_stdout"]
    page_legend = re.search(r"vs the first retriever: difference, p \(\* p &lt; ([0-9.]+)\)",
                            doors["page"])  # fmt: skip
    assert page_legend and page_legend.group(1) == "0.01"
    assert "p &lt; 0.05" not in doors["page"] and "p < 0.05" not in doors["run_stdout"]
