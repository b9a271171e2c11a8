"""Every command-line example in the docs matches the code: it runs, or it is marked as not run.

Each ``erag-dagster ...`` line of a fenced block in README.md and docs/*.md (``\\``
continuations joined, ``[optional]`` parts and ``# comments`` dropped) must parse with the real
argument parser — its command and every flag exist and take the value shown — and must be
either run here (:data:`RUN`: the example as written, exit 0) or listed in :data:`NOT_RUN` with
the reason (what it needs that a test run does not have, or the test that runs it). A new
example fails this test until it is one or the other.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import polars as pl
import pytest

from erag_dagster.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EXAMPLE = re.compile(r"^\s*(?:\$ )?erag-dagster (?P<args>.+)$")

#: Examples run here as written, from the repository root (or from a prepared folder).
RUN = {
    "check-dataset beir:../shared/data/scifact/beir": "repository root",
    "score --labels labels.parquet --metrics P@5,Success@5,RR,AP,nDCG@5": "labels.parquet",
}

#: Examples not run here, each with its reason (or the test that runs it).
NOT_RUN = {
    "retrieve --dataset beir:../shared/data/scifact/beir": "BM25 over 5,183 abstracts, k 1000 "
    "(retrieve is run on the sample by tests/test_cli.py)",
    "evaluate-run --dataset beir:../shared/data/scifact/beir": "needs the run file the "
    "retrieve example writes (evaluate-run: tests/test_cli.py)",
    "label --dataset sample --run bm25.trec": "labels a whole run with the reader "
    "(label: tests/test_cli.py, tests/test_labeller.py)",
    "audit --query": "needs a label store holding that pair (audit: tests/test_run_output.py)",
    "run": "the main job (make test runs the default one; tests/test_run_output.py)",
    "import-recovery": "needs a recovery file of a failed run (tests/test_label_store.py)",
    "store copy": "needs a PostgreSQL server at db.internal (store copy: "
    "tests/test_store_backends.py, on a throwaway local server)",
    "rerank --dataset sample": "reranks with the reader (tests/test_rerank.py)",
    "correlate --dataset sample": "end-to-end and baseline labels of two retrievers "
    "(tests/test_cli.py)",
    "baseline --retriever bm25": "labels a run with the reader; the gate's documented "
    "workflow runs in tests/test_gate.py::test_the_documented_workflow_gates_a_pull_request",
    "compare --baseline eval/baseline.json": "the gate's documented workflow: "
    "tests/test_gate.py::test_the_documented_workflow_gates_a_pull_request",
    "compare --baseline runs/main.trec": "the question-log gate, as written, in a folder laid "
    "out as it names: tests/test_gate.py::test_the_documented_question_log_gate_runs",
    "check-dataset jsonl:my-set": "the page's own example folder: tests/test_check_dataset.py "
    "builds it and compares the output with the page",
    "install-models": "installs wheels into the running environment (set-up installs the same "
    "pins: tests/test_component.py::test_install_models_is_what_set_up_installs)",
}


def examples() -> list[tuple[str, int, str]]:
    """``(page, line, arguments)`` of every example (module docstring)."""
    found = []
    for page in PAGES:
        fenced, pending, start = False, "", 0
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced, pending = not fenced, ""
                continue
            if not fenced:
                continue
            if pending:
                line = pending + " " + line.strip()
            else:
                start = number
            if line.rstrip().endswith("\\"):
                pending = line.rstrip()[:-1].rstrip()
                continue
            pending = ""
            match = EXAMPLE.match(line)
            if match:
                found.append((page.name, start, _clean(match["args"])))
    return found


def _clean(args: str) -> str:
    args = re.sub(r"\s+#.*$", "", args)  # a trailing comment
    args = re.sub(r"\s*\[[^\]]*\]", "", args)  # optional parts
    return re.sub(r"\s+", " ", args).strip()


def _starts(args: str, key: str) -> bool:
    """``args`` begins with ``key`` as whole words (``run`` is not ``run_file``)."""
    return args == key or args.startswith(key + " ")


def _classified(args: str) -> str:
    runs = [key for key in RUN if _starts(args, key)]
    skipped = [key for key in NOT_RUN if _starts(args, key)]
    assert runs or skipped, f"example `erag-dagster {args}` is neither run nor marked not run"
    return "run" if runs else "not run"


EXAMPLES = examples()


def test_the_docs_have_examples() -> None:
    assert len(EXAMPLES) >= 15
    assert {page for page, _, _ in EXAMPLES} >= {"cli.md", "gate.md", "data.md"}


@pytest.mark.parametrize(("page", "line", "args"), EXAMPLES, ids=lambda v: str(v)[:40])
def test_example_parses_and_is_run_or_marked(page: str, line: int, args: str) -> None:
    parser = build_parser()
    try:
        parser.parse_args(shlex.split(args))
    except SystemExit:
        pytest.fail(f"{page}:{line}: `erag-dagster {args}` does not parse")
    _classified(args)


def test_every_reason_names_an_example() -> None:
    """No stale entry: each key of RUN and NOT_RUN still starts an example of the docs."""
    for key in [*RUN, *NOT_RUN]:
        assert any(_starts(args, key) for _, _, args in EXAMPLES), key


@pytest.mark.parametrize(
    "args", sorted({a for _, _, a in EXAMPLES if _classified(a) == "run"}), ids=str
)
def test_example_runs(args: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (where,) = [RUN[key] for key in RUN if _starts(args, key)]
    if where == "repository root":
        if not (REPO.parent / "shared" / "data" / "scifact" / "beir").is_dir():
            pytest.skip("../shared/data is not beside this checkout")
        monkeypatch.chdir(REPO)
    else:
        monkeypatch.chdir(tmp_path)
        pl.DataFrame(
            {"query_id": ["q1", "q1", "q2"], "doc_id": ["d1", "d2", "d3"], "rank": [1, 2, 1],
             "label": [0.0, 1.0, 0.5]}
        ).write_parquet(where)  # fmt: skip
    assert main(shlex.split(args)) == 0
