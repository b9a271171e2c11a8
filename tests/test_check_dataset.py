"""``erag-dagster check-dataset SPEC``: what a dataset holds, through the loaders every command
uses (erag_dagster/data/check.py), on the embedded sample, a real BEIR folder and broken
folders. Runs the real command line in process (exit status, stdout, stderr)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from erag_dagster.cli import main
from erag_dagster.data.check import check_dataset


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["check-dataset", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_sample(capsys) -> None:
    status, out, err = _run(capsys, "sample")
    assert status == 0 and err == ""
    assert "documents 364; queries 120; judgments 120 (120 with relevance >= 1)" in out
    assert "queries with gold answers 120 of 120; judged 120 of 120" in out
    assert "squad-v1.1-dev-sample.json\n    (one JSON document)" in out
    assert '  queries  {"query_id": "56be4db0acb8001400a502ec", "question": "Which NFL team' in out
    assert "usable for: eRAG labels (gold answers) and human-judgment metrics" in out
    assert "note:" not in out


def test_beir_folder(capsys, shared_data: Path) -> None:
    folder = shared_data / "beir-msmarco-dl19-subset"
    status, out, err = _run(capsys, f"beir:{folder}")
    assert status == 0 and err == ""
    check = check_dataset(f"beir:{folder}")
    assert (check.documents, check.queries, check.judgments) == (5000, 43, 4102)
    assert check.queries_with_answers == 0 and check.judged_queries == 43
    assert check.left_out_queries == 7  # queries.jsonl holds 50; 43 are judged in test.tsv
    assert "documents 5,000; queries 43; judgments 4,102" in out
    assert "note: no query has gold answers: judgments only" in out
    assert "note: 7 queries of queries.jsonl left out" in out
    lines = (folder / "qrels" / "test.tsv").read_text().splitlines()
    first = next(line for line in lines if line and line.split("\t")[2][:1].isdigit())
    assert f"qrels/test.tsv\n    {first}\n" in out  # the first judgment (a header is skipped)
    assert "cannot compute without gold answers: labels against gold" in out
    assert out.rstrip().endswith(
        "usable for: human-judgment metrics (judgments) and eRAG labels against a reference "
        "answer (evaluation.reference, e.g. self@union)"
    )


def _tables(folder: Path, queries: list[dict], qrels: list[dict] | None = None) -> Path:
    folder.mkdir()
    docs = [{"doc_id": "d1", "title": "A", "text": "alpha"}, {"doc_id": "d2", "text": "gamma"}]
    files = {"corpus": docs, "queries": queries, "qrels": qrels}
    for name, rows in files.items():
        if rows is not None:
            (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_jsonl_folder_notes_what_limits_an_evaluation(capsys, tmp_path: Path) -> None:
    folder = _tables(
        tmp_path / "t",
        [{"query_id": 1, "question": "alpha?", "answers": "alpha"},
         {"query_id": 2, "question": "gamma?"}],
        [{"query_id": 1, "doc_id": "d1"}],
    )  # fmt: skip
    status, out, err = _run(capsys, f"jsonl:{folder}")
    assert status == 0 and err == ""
    assert '  queries  {"query_id": "1", "question": "alpha?", "answers": ["alpha"]}' in out
    assert '  qrels    {"query_id": "1", "doc_id": "d1", "relevance": 1}' in out
    assert "note: 1 of 2 queries have no judgment" in out
    assert "note: 1 of 2 queries have no gold answers (first: '2')" in out


def test_broken_folder_is_one_line_at_file_and_line(capsys, tmp_path: Path) -> None:
    folder = _tables(tmp_path / "broken", [{"query_id": "q1", "question": "alpha?"}])
    with (folder / "queries.jsonl").open("a") as handle:
        handle.write('{"query_id": "q2", "question": "gamma?"\n')  # no closing brace
    status, out, err = _run(capsys, f"jsonl:{folder}")
    assert status == 2 and out == ""
    assert err.startswith("erag-dagster: error: ") and err.count("\n") == 1, err
    assert f"{folder / 'queries.jsonl'}:2" in err


def test_questions_without_answers_or_judgments_are_labelled_against_a_reference(
    capsys, tmp_path: Path
) -> None:
    folder = _tables(tmp_path / "bare", [{"query_id": "q1", "question": "alpha?"}])
    status, out, err = _run(capsys, f"jsonl:{folder}")
    assert status == 0 and err == ""
    assert "note: questions only: eRAG labels against a reference answer" in out
    assert "cannot compute without judgments: the human-judgment metrics" in out
    assert out.rstrip().endswith("usable for: eRAG labels against a reference answer "
                                 "(evaluation.reference, e.g. self@union)")  # fmt: skip


def test_the_example_of_docs_data_md_prints_what_the_page_shows(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "data.md").read_text()
    jsonl_section = page.split("### `jsonl:DIR` and `parquet:DIR`")[1]
    records = jsonl_section.split("```json\n")[1].split("```")[0].splitlines()
    folder = tmp_path / "my-set"
    folder.mkdir()
    for name, line in zip(("corpus", "queries", "qrels"), records, strict=True):
        (folder / f"{name}.jsonl").write_text(line + "\n")
    console = page.split("```console\n$ erag-dagster check-dataset jsonl:my-set\n")[1]
    monkeypatch.chdir(tmp_path)
    status, out, err = _run(capsys, "jsonl:my-set")
    assert status == 0 and err == ""
    assert out == console.split("```")[0]


def test_the_long_answer_set_is_a_jsonl_dataset(tmp_path: Path, shared_data: Path) -> None:
    """scripts/make_long_answer_set.py (docs/label-methods.md, "Long answers"): deterministic,
    read by the jsonl: loader, one gold passage and three others per question."""
    from tests.conftest import load_script

    script = load_script("make_long_answer_set")
    source = shared_data / "squad-v1.1-dev" / "dev-v1.1.json.zip"
    built = script.build(script.read_squad(source), 10)
    assert built == script.build(script.read_squad(source), 10)
    script.write(built, tmp_path / "long")
    check = check_dataset(f"jsonl:{tmp_path / 'long'}")
    assert (check.queries, check.judgments, check.relevant_judgments) == (10, 40, 10)
    assert check.queries_with_answers == 10 and check.notes == ()
    assert all(len(q["answers"][0].split()) >= script.MIN_WORDS for q in built.queries)
    assert len(built.run) == 40 and {r for _, _, r in built.run} == {1, 2, 3, 4}
