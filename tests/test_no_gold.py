"""Issue 46's acceptance: the default data with its gold answers hidden, evaluated through every
door against a reference answer per question (``evaluation.reference: self@union``).

The embedded sample's first six questions become a question log (``questions.jsonl``: ids and
questions, no answers) beside its corpus (``corpus.jsonl``): a ``questions:`` dataset without
gold answers or judgments. One registry (the packaged bm25 and dense retrievers and first
reader) with ``reference: self@union`` then goes through ``erag-dagster run`` (the Dagster
assets, the verdict, the fit and the HTML page), :func:`erag_dagster.evaluate` and ``erag-dagster
compare`` (the gate on a question log), and ``erag-dagster audit`` shows a label's reference.

Cheap by design: the per-document answers are the shared fixture answers of the same six
questions (tests/answer_seed.py); only the six reference answers are new, generated once by the
first door and read from the store by the others.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml

import erag_dagster
from erag_dagster.config.registry import default_registry_path, load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import load_asset_value
from erag_dagster.reports.verdict import Verdict
from tests.answer_seed import shared_answers
from tests.pipeline_fixtures import scoped_env, write_instance_yaml

pytestmark = pytest.mark.slow

CONSOLE_SCRIPT = Path(sys.executable).with_name("erag-dagster")
SOURCE = "sample?max_questions=6"


def _question_log(folder: Path) -> str:
    """The sample's first six questions as a question log (no answers) and the sample's corpus
    beside it; the ``questions:`` spec naming them."""
    ds = load_dataset(SOURCE)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "questions.jsonl").write_text(
        "".join(
            json.dumps({"query_id": qid, "question": q}) + "\n"
            for qid, q in ds.queries.select("query_id", "question").rows()
        )
    )
    ds.corpus.write_ndjson(folder / "corpus.jsonl")
    return f"questions:{folder / 'questions.jsonl'}"


def _registry(folder: Path) -> Path:
    raw = yaml.safe_load(Path(default_registry_path()).read_text())
    first = next(iter(raw["readers"]))
    registry = {
        "retrievers": {name: raw["retrievers"][name] for name in ("bm25", "dense")},
        "readers": {first: raw["readers"][first]},
        "evaluation": {"reference": "self@union"},
    }
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump(registry, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def doors(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("no-gold")
    spec = _question_log(root / "log")
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
    checked = subprocess.run(
        [str(CONSOLE_SCRIPT), "check-dataset", spec], capture_output=True, text=True, env=env
    )
    with shared_answers(tmp_path_factory, store):
        ran = subprocess.run(
            [str(CONSOLE_SCRIPT), "run", "--registry", str(registry), "--dataset", spec],
            capture_output=True, text=True, env=env, timeout=900,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    parsed = load_registry(registry)
    with scoped_env(DAGSTER_HOME=str(home), ERAG_STORAGE=str(storage)):
        instance = dg.DagsterInstance.from_config(str(home))
        try:
            assets = {
                key: load_asset_value(key, instance, str(registry))
                for key in ("erag_per_query", "verdict", "fit")
            }
            defs = build_defs(str(registry))
            with defs.get_asset_value_loader(instance=instance) as loader:
                assets["doc_labels"] = pl.concat(
                    loader.load_asset_value(
                        "doc_labels",
                        partition_key=dg.MultiPartitionKey({"reader": reader, "retriever": r}),
                    ).with_columns(pl.lit(r).alias("retriever"))
                    for reader in parsed.reader_partitions
                    for r in parsed.retriever_partitions
                )
            graph = {key.to_user_string() for key in defs.resolve_all_asset_keys()}
        finally:
            instance.dispose()
    api = erag_dagster.evaluate(dataset=spec, registry=registry, store=store)
    gate = subprocess.run(
        [str(CONSOLE_SCRIPT), "compare", "--baseline", "bm25", "--candidate", "dense",
         "--registry", str(registry), "--dataset", spec, "--store", str(store), "--json",
         "--allow-underpowered"],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert gate.returncode == 0, gate.stderr[-3000:]
    first = assets["doc_labels"].row(0, named=True)
    audit = subprocess.run(
        [str(CONSOLE_SCRIPT), "audit", "--query", first["query_id"], "--doc", first["doc_id"],
         "--store", str(store), "--json"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stderr
    return {
        "registry": parsed,
        "check": checked,
        "run_stdout": ran.stdout,
        "assets": assets,
        "graph": graph,
        "api": api,
        "gate": json.loads(gate.stdout),
        "audit": json.loads(audit.stdout),
        "page": (storage / "reports" / "report.html").read_text(encoding="utf-8"),
    }


def test_check_dataset_takes_the_question_log(doors) -> None:
    assert doors["check"].returncode == 0, doors["check"].stderr
    out = doors["check"].stdout
    assert "queries with gold answers 0 of 6; judged 0 of 6" in out
    assert "cannot compute without gold answers" in out


def test_every_label_carries_its_references_provenance(doors) -> None:
    labels = doors["assets"]["doc_labels"]
    assert labels.height == 6 * 3 * 2  # six questions, label_k 3, two retrievers
    retrievers = sorted(doors["registry"].retriever_partitions)
    fingerprint = labels["reader_fingerprint"][0]
    for row in labels.iter_rows(named=True):
        provenance = json.loads(row["reference"])
        assert provenance["reference"] == "self@union"
        assert provenance["reader_fingerprint"] == fingerprint  # self: the labelled reader
        assert provenance["sources"] == retrievers and provenance["depth"] == 3
        assert 3 <= len(provenance["documents"]) <= 6  # the union of two top-3 lists
        assert len(provenance["generation_key"]) == 64
    # one reference per question, shared by both retrievers' labels
    per_query = labels.group_by("query_id").agg(pl.col("reference").n_unique())
    assert per_query["reference"].to_list() == [1] * 6


def test_the_graph_holds_no_stage_scored_against_gold(doors) -> None:
    graph = doors["graph"]
    assert {"reference_answers", "doc_labels", "verdict", "fit", "html_report"} <= graph
    assert not graph & {"end_to_end", "baseline_labels", "correlation_report", "label_agreement"}


def test_every_door_gives_the_same_labels_and_verdict(doors) -> None:
    def comparable(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.select("retriever", "query_id", "doc_id", "label", "reference").sort(
            "retriever", "query_id", "doc_id"
        )

    assert comparable(doors["assets"]["doc_labels"]).equals(
        comparable(doors["api"].frames["doc_labels"])
    )
    stored = Verdict.from_dict(doors["assets"]["verdict"])
    (api,) = doors["api"].verdicts
    assert stored.pairs.equals(api.pairs)
    headline = {m["metric"]: m for m in doors["gate"]["metrics"]}[stored.metric]
    (pair,) = stored.pairs.to_dicts()
    assert headline["p"] == pytest.approx(pair["p_perm"], abs=1e-12)
    assert "erag against self@union" in json.dumps(doors["gate"])


def test_the_fit_says_what_is_not_available(doors) -> None:
    for row in doors["assets"]["fit"]:
        assert row["reference"] == "self@union" and row["auc"] is None  # no judgments
    text = doors["api"].text(full=True)
    assert "label vs judgment: not available (no judgments)" in text
    assert "against reference self@union" in text


def test_the_page_says_the_labels_are_relative_to_a_reference(doors) -> None:
    page = doors["page"]
    assert "The labels are relative to a reference, not to gold answers: self@union" in page
    assert "Reference answer (not gold)" in page


def test_audit_shows_the_reference_a_label_was_scored_against(doors) -> None:
    labels = doors["assets"]["doc_labels"]
    first = labels.row(0, named=True)
    wanted = json.loads(first["reference"])["generation_key"]
    shown = [json.loads(row["reference"]) for row in doors["audit"] if row["reference"]]
    assert wanted in {s["generation_key"] for s in shown}
    assert all(row["gold_answers"] is None for row in doors["audit"] if row["reference"])
