"""Store-backed generation of other reader tasks (end-to-end answers, LLM annotations)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from erag_dagster.core.errors import EnvironmentFault, InputError
from erag_dagster.labels.cached import (
    CommitPolicy,
    Subject,
    generate_stored,
    task_fingerprint,
)
from erag_dagster.labels.store import LabelStore

FP = task_fingerprint("r" * 64, "test-task/v1")
SUBJECTS = [
    Subject("q1", "Who?", "d1", "Alice wrote it."),
    Subject("q1", "Who?", "d2", "Bob read it."),
    Subject("q2", "When?", "d1", "Alice wrote it."),
    Subject("q1", "Who?", "d1", "Alice wrote it."),  # the first subject again
]


class Recorder:
    """A generator that answers with the subject's text upper-cased and records its calls."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.calls: list[list[int]] = []
        self.fail_after = fail_after

    def __call__(self, part: list[int]) -> list[str]:
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise RuntimeError("generator died")
        self.calls.append(list(part))
        return [SUBJECTS[i].text.upper() for i in part]


def _run(store: LabelStore | None, generate: Recorder, chunk: int = 2) -> tuple[list[str], int]:
    done = generate_stored(
        SUBJECTS, generate, store, FP, "reader:test", {"task": "test-task/v1"}, step=chunk
    )
    return done.outputs, done.generated


def test_each_distinct_subject_is_generated_once_and_outputs_follow_input_order(
    tmp_path: Path,
) -> None:
    generate = Recorder()
    outputs, generated = _run(LabelStore(tmp_path / "s.sqlite"), generate)
    assert outputs == [s.text.upper() for s in SUBJECTS]
    assert generated == 3
    assert sorted(i for part in generate.calls for i in part) == [0, 1, 2]


def test_a_rerun_generates_nothing_and_rows_carry_the_task_fingerprint(tmp_path: Path) -> None:
    store = LabelStore(tmp_path / "s.sqlite")
    first, _ = _run(store, Recorder())
    again = Recorder()
    second, generated = _run(store, again)
    assert (second, generated, again.calls) == (first, 0, [])
    assert LabelStore(tmp_path / "s.sqlite").count_generations(FP) == 3
    assert store.count_generations() == 3  # nothing under another fingerprint
    assert store.reader_identity(FP) == {"task": "test-task/v1"}


def test_a_crash_keeps_the_chunks_committed_before_it(tmp_path: Path) -> None:
    store = LabelStore(tmp_path / "s.sqlite")
    with pytest.raises(RuntimeError, match="generator died"):
        _run(store, Recorder(fail_after=1), chunk=2)
    resumed = Recorder()
    outputs, generated = _run(store, resumed, chunk=2)
    assert generated == 1  # only the subject of the lost chunk
    assert outputs == [s.text.upper() for s in SUBJECTS]


def test_without_a_store_everything_is_generated() -> None:
    generate = Recorder()
    outputs, generated = _run(None, generate, chunk=10)
    assert generated == 3 and outputs[3] == outputs[0]


def test_a_generator_returning_the_wrong_count_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="returned 1 outputs for 2 inputs"):
        generate_stored(
            SUBJECTS, lambda part: ["x"], LabelStore(tmp_path / "s.sqlite"), FP, "r", {}, step=2
        )


def test_outputs_are_committed_by_time_while_the_run_goes_on(tmp_path: Path) -> None:
    """every_seconds commits mid-run although the count trigger is out of reach: a second
    connection sees the rows while the generator still runs."""
    path = tmp_path / "s.sqlite"
    seen: list[int] = []

    def slow(part: list[int]) -> list[str]:
        seen.append(LabelStore(path).count_generations())
        time.sleep(0.3)
        return [SUBJECTS[i].text for i in part]

    policy = CommitPolicy(every_pairs=1000, every_seconds=0.25)
    generate_stored(SUBJECTS, slow, LabelStore(path), FP, "r", {}, step=1, commit=policy)
    assert seen == [0, 1, 2]  # each step's output was committed before the next step started


def test_a_none_output_is_never_stored_and_the_outputs_before_it_are(tmp_path: Path) -> None:
    store = LabelStore(tmp_path / "s.sqlite")

    def none_for_q2(part: list[int]) -> list[str | None]:
        return [None if SUBJECTS[i].query_id == "q2" else "ok" for i in part]

    with pytest.raises(EnvironmentFault, match=r"returned None for query 'q2', 'd1': not stored"):
        generate_stored(SUBJECTS, none_for_q2, store, FP, "r", {}, step=1)
    assert store.lookup_generations(store_keys(store)).get_column("answer").to_list() == [
        "ok",
        "ok",
    ]


def store_keys(store: LabelStore) -> list[str]:
    return [k for (k,) in store._conn().execute("SELECT generation_key FROM generations")]


def test_commit_policy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERAG_COMMIT_EVERY_SECONDS", "2.5")
    monkeypatch.setenv("ERAG_COMMIT_EVERY_PAIRS", "8")
    assert CommitPolicy.from_env() == CommitPolicy(every_pairs=8, every_seconds=2.5)
    monkeypatch.setenv("ERAG_COMMIT_EVERY_PAIRS", "0")
    with pytest.raises(InputError, match="every_pairs must be >= 1"):
        CommitPolicy.from_env()
