"""label_run: generate only unseen pairs, re-score without generating, refuse bad input.

The reader is the real packaged SmolLM2 model (float32, CPU, one thread), wrapped to count the
pairs it is asked to answer.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from erag_dagster.core.errors import EnvironmentFault, InputError
from erag_dagster.labels import labeller
from erag_dagster.labels.labeller import LABEL_COLUMNS, label_run
from erag_dagster.labels.store import LabelStore
from erag_dagster.metrics.downstream import DownstreamMeasure
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.transformers_reader import TransformersReader

CORPUS = pl.DataFrame(
    {
        "doc_id": ["fr", "de", "wall", "sky", "jp"],
        "title": ["France", "Germany", "", "", "Japan"],
        "text": [
            "Paris is the capital and largest city of France.",
            "Berlin is the capital of Germany and its largest city.",
            "The Berlin Wall fell in 1989.",
            "On a clear day the sky is blue because air scatters blue light.",
            "Tokyo is the capital of Japan.",
        ],
    }
)
QUERIES = pl.DataFrame(
    {
        "query_id": ["q-fr", "q-wall", "q-none"],
        "question": [
            "What is the capital of France?",
            "In what year did the Berlin Wall fall?",
            "What is unknown?",
        ],
        "answers": [["Paris"], ["1989", "in 1989"], []],
    }
)
# Two retrievers' runs sharing the pairs (q-fr, fr) and (q-wall, wall).
RUN_A = pl.DataFrame(
    {
        "query_id": ["q-fr", "q-fr", "q-wall", "q-wall"],
        "doc_id": ["fr", "de", "wall", "sky"],
        "rank": [1, 2, 1, 2],
        "score": [3.0, 2.0, 3.0, 2.0],
    }
)
RUN_B = pl.DataFrame(
    {
        "query_id": ["q-fr", "q-fr", "q-wall", "q-wall"],
        "doc_id": ["jp", "fr", "wall", "de"],
        "rank": [1, 2, 1, 2],
        "score": [3.0, 2.0, 3.0, 2.0],
    }
)


class CountingReader:
    """The real reader, counting the (question, passage) pairs it answers."""

    def __init__(self, inner: TransformersReader) -> None:
        self.inner = inner
        self.pairs = 0
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    @property
    def name(self) -> str:
        return self.inner.name

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    def answer(self, items: Sequence[tuple[str, str]]) -> list[str]:
        self.calls += 1
        self.pairs += len(items)
        return self.inner.answer(items)


@pytest.fixture(scope="session")
def real_reader() -> TransformersReader:
    config = {"dtype": "float32", "device": "cpu", "num_threads": 1, "batch_size": 8}
    return reader_from_config("smollm2-test", config).load()


@pytest.fixture()
def reader(real_reader: TransformersReader) -> CountingReader:
    return CountingReader(real_reader)


def test_second_retriever_generates_only_unseen_pairs(
    tmp_path: Path, reader: CountingReader
) -> None:
    store = LabelStore(tmp_path / "labels.sqlite")
    messages: list[str] = []
    first = label_run(RUN_A, QUERIES, CORPUS, reader, "em", store, "run-1", log=messages.append)
    assert (first.judged_now, first.from_store, first.scored_now) == (4, 0, 4)
    assert reader.pairs == 4 and store.count_generations() == 4
    assert any("4 to generate" in m for m in messages)

    labels = first.labels
    assert labels.columns == list(LABEL_COLUMNS)
    assert labels.select("query_id", "rank").rows() == [
        ("q-fr", 1), ("q-fr", 2), ("q-wall", 1), ("q-wall", 2)
    ]  # fmt: skip
    assert labels.get_column("label").to_list()[0] == 1.0  # "Paris" from the France passage
    assert labels.get_column("answer")[0] == "Paris"
    assert labels.get_column("metric").unique().to_list() == ["em"]
    assert labels.get_column("reader_fingerprint")[0] == reader.fingerprint

    reader.pairs = 0
    second = label_run(RUN_B, QUERIES, CORPUS, reader, "em", store, "run-2")
    assert reader.pairs == 2  # (q-fr, jp) and (q-wall, de); the shared pairs come from the store
    assert (second.judged_now, second.from_store, second.scored_now) == (2, 2, 2)
    assert store.count_generations() == 6
    shared = second.labels.filter(pl.col("doc_id").is_in(["fr", "wall"]))
    before = first.labels.filter(pl.col("doc_id").is_in(["fr", "wall"]))
    assert shared.select("query_id", "doc_id", "label", "answer").equals(
        before.select("query_id", "doc_id", "label", "answer")
    )


def test_metric_change_generates_nothing(tmp_path: Path, reader: CountingReader) -> None:
    store = LabelStore(tmp_path / "labels.sqlite")
    em = label_run(RUN_A, QUERIES, CORPUS, reader, "em", store)
    reader.pairs = reader.calls = 0
    f1 = label_run(RUN_A, QUERIES, CORPUS, reader, "f1", store)
    assert reader.calls == 0 and reader.pairs == 0
    assert (f1.judged_now, f1.from_store, f1.scored_now) == (0, 4, 4)
    assert f1.labels.get_column("answer").equals(em.labels.get_column("answer"))
    again = label_run(RUN_A, QUERIES, CORPUS, reader, "f1", store)
    assert (again.judged_now, again.scored_now) == (0, 0)
    assert again.labels.equals(f1.labels)
    metrics = set(store.audit("q-fr", "fr").get_column("metric").to_list())
    assert metrics == {"em", "f1"}


def test_duplicate_pairs_in_one_run_are_generated_once(
    tmp_path: Path, reader: CountingReader
) -> None:
    run = pl.DataFrame(
        {"query_id": ["q-fr", "q-fr"], "doc_id": ["fr", "fr"], "rank": [1, 2], "score": [1.0, 0.5]}
    )
    result = label_run(run, QUERIES, CORPUS, reader, "em", LabelStore(tmp_path / "s.sqlite"))
    assert reader.pairs == 1 and result.judged_now == 1
    assert result.labels.get_column("label").to_list() == [1.0, 1.0]


def _bad_run(**columns: list[Any]) -> pl.DataFrame:
    base = {"query_id": ["q-fr"], "doc_id": ["fr"], "rank": [1], "score": [1.0]}
    return pl.DataFrame({**base, **columns})


@pytest.mark.parametrize(
    ("run", "metric", "needle"),
    [
        (RUN_A.clear(), "em", "the run is empty"),
        (
            _bad_run(doc_id=["no-such-doc"]),
            "em",
            "doc_id 'no-such-doc' (query 'q-fr'; 1 such rows), which is not in the corpus",
        ),
        (
            _bad_run(query_id=["q-ghost"]),
            "em",
            "query_id 'q-ghost' (1 such rows), which is not in the queries",
        ),
        (_bad_run(query_id=["q-none"]), "em", "query 'q-none' has no gold answers"),
        (_bad_run(), "bleu", "unknown downstream metric 'bleu'"),
        (_bad_run().drop("rank"), "em", "run lacks column(s) rank"),
    ],
)
def test_bad_input_is_one_line_input_error(
    tmp_path: Path, reader: CountingReader, run: pl.DataFrame, metric: str, needle: str
) -> None:
    store = LabelStore(tmp_path / "labels.sqlite")
    with pytest.raises(InputError) as err:
        label_run(run, QUERIES, CORPUS, reader, metric, store)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert reader.pairs == 0 and store.count_generations() == 0


@pytest.mark.parametrize("bad", [math.nan, 1.5, -0.1, None])
def test_bad_metric_values_are_refused(
    tmp_path: Path, reader: CountingReader, monkeypatch: pytest.MonkeyPatch, bad: Any
) -> None:
    store = LabelStore(tmp_path / "labels.sqlite")
    label_run(_bad_run(), QUERIES, CORPUS, reader, "em", store)  # generation stored
    broken = DownstreamMeasure("broken", "1", lambda p, g: bad)  # a declared metric, bad values
    monkeypatch.setattr(labeller, "get_downstream_metric", lambda name: broken)
    with pytest.raises(
        InputError, match=r"downstream metric 'broken' for query 'q-fr', doc 'fr': label"
    ):
        label_run(_bad_run(), QUERIES, CORPUS, reader, "broken", store)
    assert store.lookup_scores([]).height == 0


class NoneForOnePair(CountingReader):
    """The real reader, except that it returns None for the Germany passage."""

    def answer(self, items: Sequence[tuple[str, str]]) -> list[str | None]:  # type: ignore[override]
        answers: list[str | None] = list(super().answer(items))
        return [
            None if "Berlin is the capital" in p else a
            for (_, p), a in zip(items, answers, strict=True)
        ]


def test_a_reader_returning_none_is_refused_naming_the_pair(
    tmp_path: Path, real_reader: TransformersReader
) -> None:
    store = LabelStore(tmp_path / "labels.sqlite")
    with pytest.raises(EnvironmentFault) as err:
        label_run(RUN_A, QUERIES, CORPUS, NoneForOnePair(real_reader), "em", store)
    message = str(err.value)
    assert "returned None for query 'q-fr', 'de'" in message and "\n" not in message
    conn = sqlite3.connect(tmp_path / "labels.sqlite")
    answers = [a for (a,) in conn.execute("SELECT answer FROM generations")]
    assert "None" not in answers and len(answers) < 4  # the None pair is not stored
    # the answers generated before it were kept (the pairs are answered shortest first)
    again = label_run(RUN_A, QUERIES, CORPUS, CountingReader(real_reader), "em", store)
    assert again.from_store == len(answers) and again.judged_now == 4 - len(answers)
