"""Every costly reader step says what it will cost and how long is left (issue 34 item 4).

The estimate is the labels' own token counting (the packaged reader's tokenizer); the ETA
lines are driven by a clock the test moves (no wall-clock window). The end-to-end pass of the
packaged reader on two questions writes both, through the main job's note channel.
"""

from __future__ import annotations

import logging

import polars as pl
import pytest

from erag_dagster.config.registry import load_registry
from erag_dagster.core.callbacks import NOTES
from erag_dagster.data.loaders import load_dataset
from erag_dagster.labels.step_notes import StepNotes, eta_seconds
from erag_dagster.labels.store import open_store
from erag_dagster.meta.end_to_end import evaluate_end_to_end
from erag_dagster.readers.factory import reader_from_config


class _Notes:
    """The main job's notes logged so far (read at each use)."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    def __iter__(self):
        return iter([r.getMessage() for r in self._caplog.records if r.name == NOTES.name])


@pytest.fixture()
def notes(caplog: pytest.LogCaptureFixture) -> _Notes:
    caplog.set_level(logging.INFO, logger=NOTES.name)
    return _Notes(caplog)


def test_eta_is_the_mean_rate_so_far() -> None:
    assert eta_seconds(0, 10, 5.0) is None
    assert eta_seconds(4, 10, 8.0) == pytest.approx(12.0)
    assert eta_seconds(10, 10, 8.0) == 0


def test_eta_lines_are_throttled_and_the_last_is_written(notes) -> None:
    now = [0.0]
    step = StepNotes("end_to_end (top 3)", None, lambda part: [], now=lambda: now[0], every_s=20)
    for done in range(1, 30):
        now[0] += 2.0
        step.progress(done, 30)
    now[0] += 2.0
    step.progress(30, 30)
    lines = [m for m in notes if m.startswith("end_to_end (top 3):")]
    assert lines[0] == "end_to_end (top 3): 1/30 done, 0:02 elapsed, ETA 0:58"
    assert len(lines) == 1 + 58 // 20 + 1  # the first, one per 20 s, and the last
    assert lines[-1] == "end_to_end (top 3): 30/30 done, 1:00 elapsed, done"


@pytest.mark.slow
def test_end_to_end_pass_writes_its_estimate_and_eta(tmp_path, notes) -> None:
    registry = load_registry()
    entry = next(iter(registry.readers.values()))
    reader = reader_from_config(entry.name, entry.config)
    data = load_dataset("sample?max_questions=2")
    others = data.corpus.get_column("doc_id").head(2).to_list()
    run = pl.DataFrame(  # each question's judged document first, then two others
        [
            (qid, did, rank, 1.0 / rank)
            for qid, gold in data.qrels.select("query_id", "doc_id").rows()
            for rank, did in enumerate([gold, *others], start=1)
        ],
        schema={"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64,
                "score": pl.Float64},
        orient="row",
    )  # fmt: skip
    with open_store(tmp_path / "labels.sqlite") as store:
        result = evaluate_end_to_end(run, data.queries, data.corpus, reader, "f1", 3, store=store)
    assert result.scores.height == 2
    (estimate,) = [m for m in notes if "to generate" in m]
    assert estimate.startswith("end_to_end (top 3): 2 pairs to generate, ~")
    counted = reader.estimate_prompt_tokens([("q", "p")])  # the labels' own counting
    assert counted and counted[0] > 0
    assert any(m.startswith("end_to_end (top 3): 2/2 done") for m in notes)
