"""The erag-dagster command line: real commands on real data, one-line errors with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from erag_dagster.cli import main


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_score_json_labels_graded_and_binary(tmp_path: Path, capsys) -> None:
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"q1": [0, 1, 0], "q2": [0.5, 0.0, 1.0]}))
    code, out, err = run_cli(
        ["score", "--labels", str(labels), "--metrics", "P@2,Success@3,RR", "--json"], capsys
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["per_query"]["q1"] == {"P@2": 0.5, "Success@3": 1.0, "RR": 0.5}
    assert report["per_query"]["q2"]["P@2"] == pytest.approx(0.25)
    assert report["per_query"]["q2"]["Success@3"] == 1.0
    assert report["aggregate"]["P@2"] == pytest.approx(0.375)


def test_score_compat_erag_matches_reference_semantics(tmp_path: Path, capsys) -> None:
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"q1": [0, 1, 1], "q2": [1, 0, 0]}))
    code, out, _ = run_cli(
        ["score", "--labels", str(labels), "--metrics", "P_2,success_1", "--compat", "erag",
         "--json"], capsys,
    )  # fmt: skip
    assert code == 0
    assert json.loads(out)["aggregate"] == {"P_2": 0.5, "success_1": 0.5}


@pytest.mark.parametrize(
    ("content", "metrics", "message"),
    [
        ({"q1": [0.5, float("nan")]}, "P@2", "labels.json:1: NaN is not a finite number"),
        ({"q1": [1.5, 0]}, "P@2", "query 'q1'"),
        ({"q1": [1, 0]}, "Bogus@3", "Bogus@3"),
        ({"q1": ["x"]}, "P@1", "rank 1 of query 'q1'"),
    ],
)
def test_score_refuses_bad_input_with_one_line(tmp_path: Path, capsys, content, metrics, message):
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(content).replace("NaN", "NaN"))
    code, out, err = run_cli(["score", "--labels", str(labels), "--metrics", metrics], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("erag-dagster: error:")
    assert message in err


def test_unknown_dataset_spec_and_missing_path(capsys, tmp_path: Path) -> None:
    code, _, err = run_cli(
        ["evaluate-run", "--dataset", "nope:x", "--run", "r", "--metrics", "P@5"], capsys
    )
    assert code == 2 and "nope" in err and err.count("\n") == 1
    code, _, err = run_cli(
        ["evaluate-run", "--dataset", f"beir:{tmp_path / 'missing'}", "--run", "r",
         "--metrics", "P@5"], capsys,
    )  # fmt: skip
    assert code == 2 and "missing" in err


def test_retrieve_then_evaluate_run(shared_data: Path, tmp_path: Path, storage, capsys) -> None:
    spec = f"beir:{shared_data / 'beir-msmarco-dl19-subset'}"
    run = tmp_path / "bm25.trec"
    code, _, err = run_cli(
        ["retrieve", "--dataset", spec, "--retriever", "bm25", "--k", "100", "--output", str(run)],
        capsys,
    )
    assert code == 0, err
    assert len(run.read_text().splitlines()) == 43 * 100
    code, out, err = run_cli(
        ["evaluate-run", "--dataset", spec, "--run", str(run), "--metrics", "nDCG@10,R@100",
         "--relevance-level", "2", "--json"], capsys,
    )  # fmt: skip
    assert code == 0, err
    aggregate = json.loads(out)["aggregate"]
    assert 0.5 < aggregate["nDCG@10"] < 0.9
    # a run naming a document the dataset does not have
    bad = tmp_path / "bad.trec"
    bad.write_text(run.read_text().replace(run.read_text().split()[2], "not-a-doc", 1))
    code, _, err = run_cli(
        ["evaluate-run", "--dataset", spec, "--run", str(bad), "--metrics", "P@5"], capsys
    )
    assert code == 2 and "not-a-doc" in err


def test_retrieve_prints_one_line_and_no_jvm_warnings(tmp_path: Path) -> None:
    """A fresh JVM (new process) building and then reusing an index: only our summary line."""
    script = Path(sys.executable).with_name("erag-dagster")
    env = {**os.environ, "ERAG_STORAGE": str(tmp_path / "storage")}
    for attempt in ("build", "reuse"):
        out = tmp_path / f"{attempt}.trec"
        done = subprocess.run(
            [str(script), "retrieve", "--dataset", "sample", "--retriever", "bm25", "--k", "5",
             "--output", str(out)],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stderr == f"wrote 600 lines (120 queries, k=5) to {out}\n", attempt
        assert done.stdout == ""
    assert (tmp_path / "build.trec").read_text() == (tmp_path / "reuse.trec").read_text()
