"""Asset checks: the plain check functions on small frames (pass and fail, with their one-line
description), then the real graph in process: passing checks are recorded in the instance, a
failing blocking check (a corrupted label store gives a label of 1.5) fails the step so the main
job stops before anything downstream, and the regression check warns when a report's figure
leaves its previous bootstrap CI."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml

from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation import checks
from erag_dagster.orchestration.assets import checks as asset_checks
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import materialize_all
from erag_dagster.orchestration.resources import EvalSettings
from tests.pipeline_fixtures import small_registry


def _run(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "rank"], orient="row")


# --- retrieval_run ----------------------------------------------------------------------------


def test_retrieval_run_full_lists_pass():
    run = _run([("q1", "a", 1), ("q1", "b", 2), ("q2", "b", 1), ("q2", "c", 2)])
    outcome = checks.check_retrieval_run(run, ["q1", "q2"], k=2, documents=3, exhaustive=True)
    assert outcome.passed, outcome.description
    assert outcome.description == "2 queries, <= 2 rows each, no duplicate"
    assert outcome.metadata["duplicate_pairs"] == 0


def test_retrieval_run_duplicate_pair_fails():
    run = _run([("q1", "a", 1), ("q1", "a", 2)])
    outcome = checks.check_retrieval_run(run, ["q1"], k=2, documents=3, exhaustive=False)
    assert not outcome.passed
    assert outcome.description == "2 duplicate (query, doc) rows, e.g. (q1, a)"


def test_retrieval_run_more_than_k_fails():
    run = _run([("q1", "a", 1), ("q1", "b", 2), ("q1", "c", 3)])
    outcome = checks.check_retrieval_run(run, ["q1"], k=2, documents=3, exhaustive=True)
    assert not outcome.passed
    assert outcome.description == "query q1 has 3 rows, more than k=2"


def test_retrieval_run_rank_gap_fails():
    run = _run([("q1", "a", 1), ("q1", "b", 3)])
    outcome = checks.check_retrieval_run(run, ["q1"], k=2, documents=3, exhaustive=True)
    assert outcome.description == "query q1 has ranks 1..3 for 2 rows"
    assert not outcome.passed


def test_short_list_fails_for_exhaustive_passes_for_lexical():
    run = _run([("q1", "a", 1), ("q1", "b", 2), ("q2", "a", 1)])
    dense = checks.check_retrieval_run(run, ["q1", "q2"], k=2, documents=5, exhaustive=True)
    assert not dense.passed
    assert dense.description == "query q2 has 1 rows, want 2 (the retriever ranks every document)"
    bm25 = checks.check_retrieval_run(run, ["q1", "q2", "q3"], k=2, documents=5, exhaustive=False)
    assert bm25.passed
    assert bm25.description == "2 queries, <= 2 rows each, no duplicate; 1 lexical short lists"
    assert bm25.metadata["queries_without_results"] == 1


def test_short_lists_allowed_when_the_corpus_is_small():
    run = _run([("q1", "a", 1), ("q1", "b", 2)])
    outcome = checks.check_retrieval_run(run, ["q1"], k=10, documents=2, exhaustive=True)
    assert outcome.passed and outcome.metadata["expected_rows_per_query"] == 2


def test_scores_every_document_follows_the_registry_kinds():
    configs = {
        "bm25": {"kind": "bm25"},
        "dense": {"kind": "dense"},
        "hybrid": {"kind": "hybrid", "fuse": ["bm25", "dense"], "depth": 100},
        "shallow": {"kind": "hybrid", "fuse": ["bm25", "dense"], "depth": 5},
        "lexical": {"kind": "hybrid", "fuse": ["bm25"], "depth": 100},
    }
    got = {name: checks.scores_every_document(configs, name, 50) for name in configs}
    assert got == {"bm25": False, "dense": True, "hybrid": True, "shallow": False, "lexical": False}


# --- doc_labels -------------------------------------------------------------------------------


def _labels(values: list[float | None], fingerprint: str = "fp") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "query_id": ["q1", "q1"][: len(values)],
            "doc_id": ["a", "b"][: len(values)],
            "label": pl.Series(values, dtype=pl.Float64),
            "reader_fingerprint": [fingerprint] * len(values),
        }
    )


TOP = _run([("q1", "a", 1), ("q1", "b", 2)])


def test_doc_labels_pass():
    outcome = checks.check_doc_labels(_labels([0.0, 1.0]), TOP, "fp")
    assert outcome.passed
    assert outcome.description == "2 labels in [0, 1] for every top-k pair, one reader"


@pytest.mark.parametrize(
    ("labels", "description"),
    [
        (_labels([1.5, 0.0]), "1 labels outside [0, 1], e.g. 1.5 at (q1, a)"),
        (_labels([None, 0.0]), "1 labels outside [0, 1], e.g. None at (q1, a)"),
        (_labels([float("nan"), 0.0]), "1 labels outside [0, 1], e.g. nan at (q1, a)"),
        (_labels([0.0]), "1 top-k pairs have no label, e.g. (q1, b)"),
        (
            _labels([0.0, 1.0], fingerprint="other-reader"),
            "2 labels from reader other-reader, not the partition's reader fp",
        ),
    ],
)
def test_doc_labels_fail(labels: pl.DataFrame, description: str):
    outcome = checks.check_doc_labels(labels, TOP, "fp")
    assert not outcome.passed
    assert outcome.description == description


def test_doc_labels_outside_top_k_fail():
    outcome = checks.check_doc_labels(_labels([0.0, 1.0]), TOP.head(1), "fp")
    assert not outcome.passed
    assert outcome.description == "1 labels outside the top-k, 0 repeated"


# --- reports ----------------------------------------------------------------------------------


def test_not_empty():
    assert checks.check_not_empty(pl.DataFrame({"x": [1]}), "r").description == "r: 1 rows"
    empty = checks.check_not_empty(pl.DataFrame(), "erag_report")
    assert not empty.passed and empty.description == "erag_report is empty"
    fine = checks.check_not_empty(pl.DataFrame(), "retrieval_report", "no judgments")
    assert fine.passed and fine.description == "retrieval_report: empty, as expected (no judgments)"


def _board(mean: float, low: float, high: float) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "retriever": ["bm25-1234abcd"],
            "nDCG@10": [mean],
            "nDCG@10_low": [low],
            "nDCG@10_high": [high],
            "nDCG@10_diff": [0.0],
        }
    )


def test_ci_figures_of_leaderboard_and_correlation_tables():
    figures = checks.ci_figures(_board(0.8, 0.7, 0.9))
    assert figures == [
        {"row": "bm25-1234abcd", "figure": "nDCG@10", "value": 0.8, "low": 0.7, "high": 0.9}
    ]
    table = pl.DataFrame(
        {
            "retriever": ["bm25"],
            "method": ["eRAG"],
            "kendall_tau": [0.5],
            "kendall_low": [0.2],
            "kendall_high": [0.7],
            "kendall_ci_note": [None],
        }
    )
    assert checks.ci_figures(table)[0]["row"] == "bm25 / eRAG"
    # A CI that stops being reported changes the note, not the row the figure belongs to.
    noted = table.with_columns(kendall_ci_note=pl.lit("no CI: 36.6% of resamples undefined"))
    assert checks.ci_figures(noted)[0]["row"] == "bm25 / eRAG"
    assert checks.ci_figures(pl.DataFrame({"retriever": ["x"], "P@3": [0.1]})) == []


def test_regression_within_previous_ci_passes():
    previous = checks.ci_figures(_board(0.80, 0.70, 0.90))
    outcome = checks.check_regression(checks.ci_figures(_board(0.85, 0.75, 0.95)), previous)
    assert outcome.passed and outcome.description == "1 figures within their previous CI"


def test_regression_outside_previous_ci_flags():
    previous = checks.ci_figures(_board(0.80, 0.70, 0.90))
    outcome = checks.check_regression(checks.ci_figures(_board(0.40, 0.30, 0.50)), previous)
    assert not outcome.passed
    assert outcome.description == (
        "1 of 1 figures moved outside their previous CI: bm25-1234abcd nDCG@10: "
        "0.8000 -> 0.4000 (previous CI [0.7000, 0.9000])"
    )


def test_regression_tolerates_rounding_at_a_degenerate_ci():
    """A constant column: the mean and its bootstrap CI bounds differ only in the last bits."""
    mean = sum([0.2] * 12) / 12  # 0.19999999999999998
    previous = checks.ci_figures(_board(0.2, 0.2, 0.2))
    outcome = checks.check_regression(checks.ci_figures(_board(mean, mean, mean)), previous)
    assert outcome.passed, outcome.description
    moved = checks.check_regression(checks.ci_figures(_board(0.2001, 0.2, 0.2)), previous)
    assert not moved.passed


def test_regression_first_materialisation_and_nan():
    first = checks.check_regression(checks.ci_figures(_board(0.8, 0.7, 0.9)), None)
    assert first.passed and first.description == "first materialisation: nothing to compare"
    nan = checks.check_regression(
        checks.ci_figures(_board(float("nan"), 0.0, 0.0)), checks.ci_figures(_board(0.8, 0.7, 0.9))
    )
    assert nan.passed and nan.metadata["compared"] == 0


def test_readme_figures_hold_or_differ_or_do_not_apply():
    entries = [
        {
            "id": "fig",
            "condition": {"where": {"retriever": "bm25"}, "column": "nDCG@10"},
            "expected": 0.8,
            "tolerance": 0.0005,
        }
    ]
    held = checks.check_readme_figures(_board(0.8002, 0.7, 0.9), entries, None)
    assert held.passed and held.description == "all 1 README figures of this report hold"
    wrong = checks.check_readme_figures(_board(0.7, 0.6, 0.8), entries, None)
    assert not wrong.passed
    assert wrong.description == "1 of 1 README figures differ: fig: 0.7000, README 0.8"
    skipped = checks.check_readme_figures(_board(0.7, 0.6, 0.8), entries, "settings differ: k")
    assert (
        skipped.passed and skipped.description == "README figures do not apply: settings differ: k"
    )


def test_default_run_figures_are_found_for_the_three_reports():
    for asset in ("retrieval_report", "erag_report", "correlation_report"):
        entries = checks.load_report_figures(asset)
        assert entries and all(e["condition"]["asset"] == asset for e in entries)


def test_report_value_matches_partition_keys_and_aggregates():
    table = pl.DataFrame(
        {"method": ["semantic_answer", "semantic_question"], "kendall_tau": [0.1, float("nan")]}
    )
    condition = {
        "where": {"method": ["semantic_answer", "semantic_question"]},
        "column": "kendall_tau",
        "aggregate": "max",
    }
    assert checks.report_value(table, condition) == 0.1
    with pytest.raises(ValueError, match="2 rows match"):
        checks.report_value(table, {**condition, "aggregate": "only"})


def test_default_run_difference_names_the_changed_settings(tmp_path: Path):
    from erag_dagster.config.registry import load_registry

    packaged = load_registry(str(Path(checks.__file__).parents[1] / "registry.yaml"))
    default = EvalSettings().bound_to(packaged).resolve()
    assert asset_checks.default_run_difference(packaged, default) is None
    changed = EvalSettings(k=7).bound_to(packaged).resolve()
    assert asset_checks.default_run_difference(packaged, changed) == (
        "settings differ from the default run: k"
    )
    other = load_registry(small_registry(tmp_path, **{"retrievers.bm25.k1": 1.2}))
    assert asset_checks.default_run_difference(other, default) == (
        "the registry's retrievers/readers are not the packaged ones"
    )


# --- the real graph, in process ---------------------------------------------------------------


def _bm25_registry(folder: Path, dataset: str) -> Path:
    path = small_registry(folder, dataset=dataset)
    raw = yaml.safe_load(path.read_text())
    raw["retrievers"] = {"bm25": raw["retrievers"]["bm25"]}
    raw["evaluation"].update({"k": 5, "label_k": 1, "e2e_ks": [1]})
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _evaluation(instance: dg.DagsterInstance, asset: str, name: str):
    """(passed, description, severity) of the latest evaluation of a check, or None."""
    key = dg.AssetCheckKey(dg.AssetKey(asset), name)
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key]).get(key)
    if record is None or record.event is None:
        return None
    evaluation = record.event.dagster_event.event_specific_data
    return evaluation.passed, evaluation.description, evaluation.severity


def _materialisations(instance: dg.DagsterInstance, asset: str) -> int:
    return len(instance.fetch_materializations(dg.AssetKey(asset), limit=100).records)


@pytest.mark.slow
def test_blocking_check_stops_the_main_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ERAG_STORAGE", str(tmp_path / "storage"))
    monkeypatch.delenv("ERAG_DATASET", raising=False)
    registry = _bm25_registry(tmp_path, "sample?max_questions=3")
    settings = EvalSettings(registry_path=str(registry))
    instance = dg.DagsterInstance.ephemeral()
    materialize_all(settings, instance, log=lambda _line: None, stages=["labels"])

    passed = {
        ("retrieval_run", asset_checks.RUN_DEPTH),
        ("doc_labels", asset_checks.LABELS_COMPLETE),
        ("retrieval_report", asset_checks.NOT_EMPTY),
        ("retrieval_report", asset_checks.README_FIGURES),
        ("retrieval_report", asset_checks.NO_REGRESSION),
        ("erag_per_query", asset_checks.NOT_EMPTY),
        ("erag_report", asset_checks.NOT_EMPTY),
        ("erag_report", asset_checks.README_FIGURES),
    }
    found = {pair: _evaluation(instance, *pair) for pair in passed}
    assert all(v is not None and v[0] for v in found.values()), found
    assert found[("doc_labels", asset_checks.LABELS_COMPLETE)][1] == (
        "3 labels in [0, 1] for every top-k pair, one reader"
    )
    assert found[("erag_report", asset_checks.README_FIGURES)][1].startswith(
        "README figures do not apply: the registry's retrievers/readers are not the packaged"
    )
    assert _materialisations(instance, "erag_per_query") == 1
    labels_before = _materialisations(instance, "doc_labels")

    # A corrupted label store (a score the schema forbids, written past its CHECK) gives a
    # label of 1.5: the doc_labels check fails, the step fails, and the job stops there.
    store = tmp_path / "storage" / "labels.sqlite"
    with sqlite3.connect(store) as db:
        db.execute("PRAGMA ignore_check_constraints = ON")
        changed = db.execute("UPDATE scores SET score = 1.5").rowcount
    assert changed >= 1
    with pytest.raises(Exception, match="blocking asset check failed"):  # StepFailed in a run
        materialize_all(settings, instance, log=lambda _line: None, stages=["labels"])
    failed = _evaluation(instance, "doc_labels", asset_checks.LABELS_COMPLETE)
    assert failed is not None and not failed[0]
    assert failed[1].startswith("3 labels outside [0, 1], e.g. 1.5 at (")
    assert _materialisations(instance, "erag_per_query") == 1  # downstream not re-materialised
    assert _materialisations(instance, "erag_report") == 1
    # The bad labels were never stored as the asset's value (no new materialisation, so no new
    # data version), so the daemon's conditions compute nothing downstream of them either.
    assert _materialisations(instance, "doc_labels") == labels_before
    evaluation = dg.evaluate_automation_conditions(
        defs=build_defs(str(registry)), instance=instance
    )
    assert evaluation.get_num_requested(dg.AssetKey("erag_per_query")) == 0
    assert evaluation.get_num_requested(dg.AssetKey("doc_labels")) == 0


@pytest.mark.slow
def test_regression_check_warns_on_a_big_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ERAG_STORAGE", str(tmp_path / "storage"))
    monkeypatch.delenv("ERAG_DATASET", raising=False)
    ds = load_dataset("sample?max_questions=3")
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("corpus", "queries", "qrels"):
        getattr(ds, name).write_ndjson(folder / f"{name}.jsonl")
    registry = _bm25_registry(tmp_path, f"jsonl:{folder}")
    settings = EvalSettings(registry_path=str(registry))
    instance = dg.DagsterInstance.ephemeral()
    materialize_all(settings, instance, log=lambda _line: None, stages=[])
    first = _evaluation(instance, "retrieval_report", asset_checks.NO_REGRESSION)
    assert first == (True, "first materialisation: nothing to compare", dg.AssetCheckSeverity.WARN)

    materialize_all(settings, instance, log=lambda _line: None, stages=[])
    again = _evaluation(instance, "retrieval_report", asset_checks.NO_REGRESSION)
    assert again is not None and again[0] and again[1].endswith("figures within their previous CI")

    # The judged documents become ones no query retrieves: every figure collapses to 0.
    run_file = next((tmp_path / "storage" / "assets" / "retrieval_run").glob("*.parquet"))
    retrieved = set(pl.read_parquet(run_file).get_column("doc_id").to_list())
    unretrieved = next(d for d in ds.corpus.get_column("doc_id").to_list() if d not in retrieved)
    qrels = ds.qrels.with_columns(pl.lit(unretrieved).alias("doc_id")).unique(["query_id"])
    qrels.write_ndjson(folder / "qrels.jsonl")
    materialize_all(settings, instance, log=lambda _line: None, stages=[])  # WARN: not blocking
    warned = _evaluation(instance, "retrieval_report", asset_checks.NO_REGRESSION)
    assert warned is not None and not warned[0]
    assert warned[2] == dg.AssetCheckSeverity.WARN
    assert "figures moved outside their previous CI" in warned[1]
    assert _materialisations(instance, "retrieval_report") == 3
