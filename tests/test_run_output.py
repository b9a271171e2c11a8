"""What ``erag-dagster run`` prints, through the installed console script (a real process).

Bad input (dataset, metric, registry) is one line and exit status 2 before any Dagster run
starts; a successful run prints one progress line per step on stderr and the reports on stdout
(no Beta/Preview warning, no Dagster log line), and ``--verbose`` brings Dagster's console log
back. The run drives the real graph on three questions, a BM25-only registry and label_k 1.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from erag_dagster.cli import main
from erag_dagster.config.registry import load_registry
from erag_dagster.core.callbacks import NOTES
from erag_dagster.core.errors import InputError
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import StepFailed, _failure, _run_config
from erag_dagster.orchestration.progress import Progress, relaying_notes
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml

CONSOLE_SCRIPT = Path(sys.executable).with_name("erag-dagster")
PROGRESS = re.compile(r"^\[(\d+)/(\d+)\] \S.* \d+\.\ds · elapsed \d+:\d\d · ETA (\d+:\d\d|\?)$")
#: The labeller's estimate before a doc_labels partition generates (issue #11).
ESTIMATE = re.compile(
    r"^doc_labels \[(\S+)\]: (\d+) pairs to generate, ~[\d,]+ prompt tokens \(\d+ per pair\), "
    r"at most [\d,]+ output tokens \(estimate\)$"
)
#: A reader step's estimate or ETA line (labels/step_notes.py), under the running step's label.
STEP_NOTE = re.compile(
    r"^\S.*: (eRAG labels|end_to_end \(top \d+\)|LLM annotation|semantic labels \(\w+\)): "
    r"(\d+/\d+ done, \d+:\d\d elapsed, (ETA \d+:\d\d|ETA \?|done)$|[\d,]+ pairs to "
    r"(generate|encode), |[\d,]+ pairs encoded in [\d.]+ s$)"
)
DAGSTER_LOG = " - dagster - "
REPORT_TITLES = (
    "== Verdict: ",
    "== Retrieval quality",
    "== Meta-evaluation: Kendall tau-b",
    "== Agreement of automatic labels",
)
#: Printed with --full only (compact: the verdict is its headline column).
FULL_ONLY_TITLE = "== eRAG: list metrics"


def _tiny_registry(folder: Path, **changes) -> Path:
    """BM25 only, one reader, three questions, label and end-to-end depth 1."""
    path = small_registry(folder, dataset="sample?max_questions=3", **changes)
    import yaml

    raw = yaml.safe_load(path.read_text())
    raw["retrievers"] = {"bm25": raw["retrievers"]["bm25"]}
    raw["evaluation"].update({"k": 5, "label_k": 1, "e2e_ks": [1], "list_metrics": ["P@1", "RR"]})
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _run(root: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DAGSTER_HOME": str(write_instance_yaml(root / "home")),
        "ERAG_STORAGE": str(root / "storage"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("ERAG_DEBUG", None)
    env.pop("ERAG_REGISTRY", None)
    return subprocess.run(
        [str(CONSOLE_SCRIPT), "run", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def _runs(root: Path) -> int:
    instance = dg.DagsterInstance.from_config(str(root / "home"))
    try:
        return instance.get_runs_count()
    finally:
        instance.dispose()


@pytest.mark.parametrize(
    ("argv", "registry_changes", "part"),
    [
        (["--dataset", "nope:x"], {}, "unknown dataset kind 'nope'"),
        (["--dataset", "squad:/no/such/file.json"], {}, "/no/such/file.json"),
        (["--metric", "nope"], {}, "unknown downstream metric 'nope'"),
        ([], {"evaluation.human_metrics": ["nDCG@x"]}, "nDCG@x"),
    ],
    ids=["dataset-kind", "dataset-missing", "metric", "registry-metric"],
)
def test_bad_input_is_one_line_and_no_run_starts(tmp_path, argv, registry_changes, part) -> None:
    registry = _tiny_registry(tmp_path / "reg", **registry_changes)
    done = _run(tmp_path, "--registry", str(registry), *argv)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("erag-dagster: error: ") and done.stderr.count("\n") == 1, (
        done.stderr
    )
    assert part in done.stderr
    assert _runs(tmp_path) == 0  # refused before observe_inputs or any materialisation


@pytest.fixture(scope="module")
def quiet_and_verbose(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("run-output")
    registry = _tiny_registry(root / "reg")
    quiet = _run(root, "--registry", str(registry))
    runs_after_quiet = _runs(root)
    verbose = _run(root, "--registry", str(registry), "--verbose", "--full")
    return {"root": root, "quiet": quiet, "verbose": verbose, "runs": runs_after_quiet}


@pytest.mark.slow
def test_run_prints_progress_lines_and_reports_only(quiet_and_verbose) -> None:
    done = quiet_and_verbose["quiet"]
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert lines, "no progress line"
    # Before generating, the one doc_labels partition says what it will cost: 3 questions x the
    # top 1, none in the fresh label store; then that step's progress line.
    # The reader steps' own notes (labels/step_notes.py): estimates and ETA lines, each under
    # the running step's label; the eRAG labels step says how far it is.
    notes = [line for line in lines if STEP_NOTE.match(line)]
    assert any(re.search(r": eRAG labels: \d+/3 done, \d+:\d\d elapsed, ", n) for n in notes)
    lines = [line for line in lines if not STEP_NOTE.match(line)]
    estimates = [i for i, line in enumerate(lines) if ESTIMATE.match(line)]
    assert len(estimates) == 1, done.stderr
    (at,) = estimates
    partition, pairs = ESTIMATE.match(lines.pop(at)).groups()
    assert pairs == "3"
    assert lines[at].startswith("[") and f"doc_labels [{partition}]" in lines[at]
    for line in lines:
        assert PROGRESS.match(line), line
    counts = [PROGRESS.match(line).groups()[:2] for line in lines]
    total = len(lines)
    assert counts == [(str(i), str(total)) for i in range(1, total + 1)]
    assert lines[-1].endswith("ETA 0:00")
    assert any("doc_labels [" in line for line in lines)
    assert not any("efficiency_report" in line for line in lines)  # a benchmark, not the run
    for text in (done.stdout, done.stderr):
        assert "Warning" not in text and DAGSTER_LOG not in text
    positions = [done.stdout.index(title) for title in REPORT_TITLES]
    assert positions == sorted(positions) and positions[0] == 0  # the verdict first
    assert FULL_ONLY_TITLE not in done.stdout
    assert "Efficiency" not in done.stdout
    # the full tables are written beside the reports, and the output says where
    (said,) = [x for x in done.stdout.splitlines() if x.startswith("Full tables as CSV")]
    tables = quiet_and_verbose["root"] / "storage" / "reports" / "tables"
    assert said.startswith(f"Full tables as CSV and parquet: {tables} ")
    for name in ("erag_report", "correlation_report", "verdict_pairs", "verdict_ranking"):
        assert (tables / f"{name}.csv").is_file() and (tables / f"{name}.parquet").is_file()
    # Dagster's log went to the runs' event logs: one run per progress line, in the instance
    assert quiet_and_verbose["runs"] == total


@pytest.mark.slow
def test_runs_are_named_and_say_which_command_launched_them(quiet_and_verbose) -> None:
    """In the UI's Runs list, the run command's runs are ``observe_inputs`` and
    ``erag_evaluation`` (not ``__ephemeral_asset_job__``), each tagged with the command."""
    instance = dg.DagsterInstance.from_config(str(quiet_and_verbose["root"] / "home"))
    try:
        runs = instance.get_runs()
    finally:
        instance.dispose()
    assert len(runs) >= quiet_and_verbose["runs"] > 1
    assert {run.job_name for run in runs} == {"observe_inputs", "erag_evaluation"}
    assert {run.tags.get("erag/launched_by") for run in runs} == {"erag-dagster run"}


@pytest.mark.slow
def test_run_ends_with_the_path_of_its_html_report(quiet_and_verbose) -> None:
    """The last line names the page the run's ``html_report`` step wrote (docs/html-report.md)."""
    done = quiet_and_verbose["quiet"]
    page = quiet_and_verbose["root"] / "storage" / "reports" / "report.html"
    assert done.stdout.rstrip("\n").splitlines()[-1] == f"HTML report: {page}"
    assert done.stdout.count("HTML report:") == 1
    text = page.read_text(encoding="utf-8")
    assert "<h3>eRAG leaderboard</h3>" in text and "data:image/png;base64," in text


@pytest.mark.slow
def test_run_report_names_the_dataset_briefly(quiet_and_verbose) -> None:
    table = quiet_and_verbose["quiet"].stdout.split("== Meta-evaluation")[1]
    assert "sample" in table and "max_questions" not in table


@pytest.mark.slow
def test_verbose_brings_the_dagster_log_back(quiet_and_verbose) -> None:
    done = quiet_and_verbose["verbose"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert DAGSTER_LOG in done.stderr
    assert "STEP_SUCCESS" in done.stderr
    # Every pair is in the label store after the first run: nothing to generate, no estimate.
    assert "pairs to generate" not in done.stderr
    assert "Warning" not in done.stderr
    assert all(title in done.stdout for title in (*REPORT_TITLES, FULL_ONLY_TITLE))


@pytest.mark.slow
def test_audit_names_the_run_that_generated_a_label(quiet_and_verbose, capsys) -> None:
    """``audit`` of a label this run generated: its reader, answer, score and decoding, and the
    id of the Dagster run (of this instance) that generated it."""
    root = quiet_and_verbose["root"]
    registry_path = root / "reg" / "registry.yaml"
    registry = load_registry(registry_path)
    part = dg.MultiPartitionKey(
        {"reader": registry.reader_partitions[0], "retriever": registry.retriever_partitions[0]}
    )
    home, storage = root / "home", root / "storage"
    instance = dg.DagsterInstance.from_config(str(home))
    with scoped_env(DAGSTER_HOME=str(home), ERAG_STORAGE=str(storage)):
        defs = build_defs(str(registry_path))
        with defs.get_asset_value_loader(instance=instance) as loader:
            labels = loader.load_asset_value("doc_labels", partition_key=part)
    row = labels.row(0, named=True)
    store = str(storage / "labels.sqlite")
    argv = ["audit", "--query", row["query_id"], "--doc", row["doc_id"], "--store", store]
    assert main([*argv, "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    f1 = [r for r in records if r["metric"] == "f1"]  # the registry's downstream metric
    assert f1, records
    assert f1[0]["reader_fingerprint"] == row["reader_fingerprint"]
    assert f1[0]["reader_name"] == "smollm2-135m"
    assert (f1[0]["answer"], f1[0]["score"]) == (row["answer"], row["label"])
    assert instance.get_run_by_id(f1[0]["generation_run_id"]) is not None
    from erag_dagster.readers.factory import reader_from_config

    entry = registry.readers["smollm2-135m"]
    spec = reader_from_config(entry.name, entry.config).spec  # the entry's keys, else its preset's
    assert json.loads(f1[0]["decoding"])["max_new_tokens"] == spec.max_new_tokens
    assert main(["audit", "--query", "nope", "--doc", "nope", "--store", store]) == 2
    instance.dispose()


def test_progress_lines_count_steps_and_estimate_the_rest() -> None:
    ticks = iter([0.0, 0.0, 2.0, 2.0, 12.0, 12.0, 22.0, 22.0, 52.0])
    lines: list[str] = []
    progress = Progress(["observe", "a", "a", "b"], lines.append, now=lambda: next(ticks))
    for label in ("observe", "a [p1]", "a [p2]", "b"):
        progress.started(label)
        progress.finished(label)
    assert lines == [
        "[1/4] observe 2.0s · elapsed 0:02 · ETA ?",
        "[2/4] a [p1] 10.0s · elapsed 0:12 · ETA 0:16",  # a [p2] as a [p1], b as the mean (6 s)
        "[3/4] a [p2] 10.0s · elapsed 0:22 · ETA 0:07",
        "[4/4] b 30.0s · elapsed 0:52 · ETA 0:00",
    ]
    assert all(PROGRESS.match(line) for line in lines)


def test_progress_on_a_terminal_draws_a_bar() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    progress = Progress.to_stream(["a", "b"], out)
    progress.started("a")
    progress.finished("a")
    text = out.getvalue()
    assert text.startswith("\r[" + "-" * 20 + "] 1/2 a …")
    assert "\r[" + "#" * 10 + "-" * 10 + "] [1/2] a " in text and text.endswith("\n")


def test_notes_name_the_running_step_and_go_only_where_relayed() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    lines: list[str] = []
    NOTES.info("dropped: nobody relays it")
    with relaying_notes(lambda planned: Progress(planned, lines.append)) as factory:
        progress = factory(["a", "b"])
        progress.started("doc_labels [r|x]")
        NOTES.info("3 pairs to generate")
        progress.finished("doc_labels [r|x]")
        NOTES.info("between steps")
    NOTES.info("dropped too")
    assert lines[0] == "doc_labels [r|x]: 3 pairs to generate"
    assert PROGRESS.match(lines[1]) and lines[2:] == ["between steps"]
    out = Terminal()
    with relaying_notes(lambda planned: Progress.to_stream(planned, out)) as factory:
        factory(["a"]).started("a")
        NOTES.info("note")
    # The note replaces the running line, which is drawn again under it.
    assert out.getvalue().endswith("\ra: note\x1b[K\n\r[" + "-" * 20 + "] 1/1 a …\x1b[K")


@pytest.mark.parametrize(
    ("error", "kind", "part"),
    [
        (InputError("queries.jsonl:3: empty question"), InputError, "queries.jsonl:3"),
        (RuntimeError("model exploded"), StepFailed, "RuntimeError: model exploded"),
    ],
)
def test_a_failed_step_is_one_line_naming_asset_partition_and_run(error, kind, part) -> None:
    partitions = dg.StaticPartitionsDefinition(["bm25-1234abcd"])

    @dg.asset(partitions_def=partitions)
    def retrieval_run() -> int:
        raise error

    result = dg.materialize(
        [retrieval_run],
        partition_key="bm25-1234abcd",
        instance=dg.DagsterInstance.ephemeral(),
        run_config=_run_config(verbose=False),
        raise_on_error=False,
    )
    failure = _failure(result, "retrieval_run [bm25-1234abcd]")
    assert type(failure) is kind
    message = str(failure)
    assert "\n" not in message
    assert message.startswith("retrieval_run [bm25-1234abcd] failed: ") and part in message
    assert result.run_id in message
    assert "raise error" in failure.__notes__[0]  # the step's stack, what --debug prints
