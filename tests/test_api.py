"""The Python API (erag_dagster/api.py): the documented example runs as written, and
``label``/``score`` share the CLI's label store, numbers and errors.

The example block of docs/python-api.md is executed as it is (real BM25 and dense retrieval,
the packaged 135M reader, a fresh storage root); every assertion is on the frames it returns.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys

import polars as pl
import pytest

import erag_dagster
from erag_dagster.cli import main
from tests.answer_seed import shared_answers
from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "python-api.md"


def _example() -> str:
    """The first ```python block of docs/python-api.md."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert blocks, f"{DOC}: no python block"
    return blocks[0]


def test_the_example_is_five_lines() -> None:
    lines = [line for line in _example().splitlines() if line.strip()]
    assert len(lines) <= 5, lines


@pytest.fixture(scope="module")
def example(tmp_path_factory, monkeypatch_module) -> dict:
    """Run the documented example in a fresh storage root (its index, its label store)."""
    root = tmp_path_factory.mktemp("api")
    monkeypatch_module.setenv("ERAG_STORAGE", str(root / "storage"))
    monkeypatch_module.delenv("ERAG_LABEL_STORE", raising=False)
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as printed, shared_answers(tmp_path_factory):
        exec(compile(_example(), str(DOC), "exec"), namespace)  # the doc block, as written
    return namespace | {"root": root, "printed": printed.getvalue()}


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        yield mp


@pytest.mark.slow
def test_the_documented_example_returns_the_reports(example) -> None:
    report = example["report"]
    erag = report.erag_report
    assert erag.columns == ["reader", "retriever", "queries", "nDCG@2", "P@2"]
    assert erag["retriever"].to_list() == ["bm25-286b153c", "dense-0b52e784"]
    assert erag["queries"].to_list() == [6, 6]
    per_query = report.erag_per_query
    assert per_query.height == 12
    # the report's means are the means of the per-query table, which come from the labels
    means = per_query.group_by("retriever").agg(pl.col("nDCG@2").mean()).sort("retriever")
    assert means["nDCG@2"].to_list() == pytest.approx(erag["nDCG@2"].to_list())
    labels = report["doc_labels"]
    assert labels.height == 2 * 6 * 2  # retrievers x questions x label_k
    assert labels["label"].is_between(0, 1).all() and labels["answer"].str.len_chars().min() > 0
    v = report.verdict
    assert v.metric == "nDCG@2"  # the first metric asked is the headline
    assert v.ranking.height == 2 and v.pairs.height == 1
    assert v.ranking["mean"].to_list() == sorted(erag["nDCG@2"].to_list(), reverse=True)
    pair = v.pairs.row(0, named=True)
    assert pair["difference"] >= 0 and pair["low"] <= pair["difference"] <= pair["high"]
    assert 0 < pair["p_holm"] <= 1
    board = report.retrieval_report
    assert board["retriever"].to_list() == ["bm25-286b153c", "dense-0b52e784"]
    assert str(report).startswith("== Verdict: ")
    printed = example["printed"]
    assert printed.startswith("reader gemma3-270m: retrievers ranked by eRAG nDCG@2")
    assert printed.strip() == v.text
    # what the page shows is what it prints (the default readers are deterministic)
    shown = re.findall(r"```text\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)[0]
    assert printed == shown
    assert "on 6 questions" in printed


@pytest.mark.slow
def test_label_and_score_share_the_store_and_the_numbers(example, tmp_path) -> None:
    report = example["report"]
    run = report["retrieval_run"].filter(pl.col("retriever") == "bm25-286b153c").drop("retriever")
    result = erag_dagster.label("sample?spread_questions=6", run, "gemma3-270m", k=2)  # f1
    assert (result.judged_now, result.from_store) == (0, 12)  # every pair from evaluate's store
    stored = report["doc_labels"].filter(pl.col("retriever") == "bm25-286b153c")
    assert result.labels["label"].to_list() == stored["label"].to_list()
    scores = erag_dagster.score(result.labels, ["nDCG@2", "P@2"])
    expected = report.erag_report.filter(pl.col("retriever") == "bm25-286b153c")
    assert scores.aggregate["value"].to_list() == pytest.approx(
        [expected["nDCG@2"][0], expected["P@2"][0]]
    )
    # the CLI's score command prints the same numbers (it calls score)
    path = tmp_path / "labels.parquet"
    result.labels.write_parquet(path)
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from erag_dagster.cli import main; sys.exit(main())",
         "score", "--labels", str(path), "--metrics", "nDCG@2,P@2", "--json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert json.loads(out)["aggregate"] == pytest.approx(scores.report.aggregate)


def test_score_takes_a_mapping_and_keeps_the_empty_list_policy() -> None:
    scores = erag_dagster.score({"q1": [1.0, 0.0], "q2": []}, "P@2,RR")
    assert scores.per_query.sort("query_id").rows() == [("q1", 0.5, 1.0), ("q2", 0.0, 0.0)]
    assert scores.aggregate.rows() == [("P@2", 0.25), ("RR", 0.5)]
    assert scores.note == "of 2 queries, 1 with an empty label list scored 0 ('q2')"
    compat = erag_dagster.score({"q1": [1.0, 0.0], "q2": []}, ["P_2"], compat="erag")
    assert compat.per_query["query_id"].to_list() == ["q1"]


def test_api_errors_are_the_clis(tmp_path, storage, capsys) -> None:
    bad = tmp_path / "labels.json"
    bad.write_text('{"q1": [1, "x"]}')
    with pytest.raises(erag_dagster.InputError, match=r"label at rank 2 of query 'q1' is 'x'"):
        erag_dagster.score(bad, ["P@1"])
    assert main(["score", "--labels", str(bad), "--metrics", "P@1"]) == 2
    assert "label at rank 2 of query 'q1' is 'x'" in capsys.readouterr().err
    with pytest.raises(erag_dagster.InputError, match="metrics is empty"):
        erag_dagster.score({"q": [1.0]}, " , ")
    with pytest.raises(erag_dagster.InputError, match="nope"):
        erag_dagster.evaluate(dataset="sample", reader="nope")
    with pytest.raises(erag_dagster.InputError, match="label_k is 0; it must be an integer >= 1"):
        erag_dagster.evaluate(dataset="sample", label_k=0)
    with pytest.raises(erag_dagster.InputError, match="unknown dataset kind 'nope'"):
        erag_dagster.label("nope:x", tmp_path / "run.trec")


def test_import_is_cheap_and_lazy() -> None:
    """``import erag_dagster`` loads neither Dagster, torch nor polars; the API loads on use."""
    code = (
        "import sys, erag_dagster; heavy = [m for m in ('dagster', 'torch', 'polars') "
        "if m in sys.modules]; assert not heavy, heavy; erag_dagster.evaluate; "
        "assert 'erag_dagster.api' in sys.modules; print(sorted(erag_dagster.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(
        ["ERagEvaluation", "EnvironmentFault", "InputError", "evaluate", "label", "score"]
    )
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        erag_dagster.nope  # noqa: B018
