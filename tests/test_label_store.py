"""The content-addressed label store: keys, atomic batches, concurrent writers, crash resume."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest

from erag_dagster.errors import InputError
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import (
    LabelStore,
    generation_key,
    gold_hash,
    score_key,
    sha256_text,
)
from erag_dagster.readers.transformers_reader import TransformersReader, reader_from_config

READER_CONFIG = {"dtype": "float32", "device": "cpu", "num_threads": 1, "batch_size": 4}


def _generations(keys: list[str], answer: str = "a", fp: str = "f" * 64) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "generation_key": keys,
            "reader_fingerprint": [fp] * len(keys),
            "query_id": [f"q{k}" for k in keys],
            "question_hash": [sha256_text("question")] * len(keys),
            "doc_id": [f"d{k}" for k in keys],
            "text_hash": [sha256_text(k) for k in keys],
            "answer": [answer] * len(keys),
            "gen_seconds": [0.5] * len(keys),
        }
    )


def _scores(gen_keys: list[str], values: list[float], metric: str = "em") -> pl.DataFrame:
    gh = gold_hash(["Paris"])
    return pl.DataFrame(
        {
            "score_key": [score_key(k, gh, metric) for k in gen_keys],
            "generation_key": gen_keys,
            "gold_hash": [gh] * len(gen_keys),
            "metric": [metric] * len(gen_keys),
            "score": values,
            "gold_answers": [["Paris"]] * len(gen_keys),
        }
    )


def test_keys_are_content_functions() -> None:
    qh, th = sha256_text("Who?"), sha256_text("Text.")
    key = generation_key("fp", "q1", qh, "d1", th)
    assert key == generation_key("fp", "q1", qh, "d1", th) and len(key) == 64
    assert key != generation_key("fp2", "q1", qh, "d1", th)
    assert key != generation_key("fp", "q1", qh, "d1", sha256_text("Other text."))
    # an unambiguous encoding: moving a boundary between parts changes the key
    assert generation_key("a", "bc", qh, "d", th) != generation_key("ab", "c", qh, "d", th)
    assert gold_hash(["b", "a"]) == gold_hash(["a", "b"]) != gold_hash(["a"])
    assert score_key(key, gold_hash(["a"]), "em") != score_key(key, gold_hash(["a"]), "f1")


def test_roundtrip_and_first_write_wins(tmp_path: Path) -> None:
    store = LabelStore(tmp_path / "labels.sqlite")
    assert store.put_generations(_generations(["k1", "k2"], answer="first")) == 2
    assert store.put_generations(_generations(["k2", "k3"], answer="second")) == 1
    found = store.lookup_generations(["k3", "k2", "k2", "missing"]).sort("generation_key")
    assert found.get_column("answer").to_list() == ["first", "second"]
    assert found.get_column("created_at")[0].endswith("+00:00")
    assert store.count_generations() == 3
    assert store.put_scores(_scores(["k1", "k2"], [1.0, 0.25])) == 2
    got = store.lookup_scores(_scores(["k1", "k2"], [0, 0]).get_column("score_key"))
    assert sorted(got.get_column("score").to_list()) == [0.25, 1.0]
    journal = sqlite3.connect(tmp_path / "labels.sqlite").execute("PRAGMA journal_mode").fetchone()
    assert journal[0] == "wal"


def test_batches_are_atomic(tmp_path: Path) -> None:
    store = LabelStore(tmp_path / "labels.sqlite")
    store.put_generations(_generations(["k1", "k2"]))
    # a score out of range refuses the whole frame
    with pytest.raises(InputError, match=r"not in \[0, 1\]"):
        store.put_scores(_scores(["k1", "k2"], [1.0, 1.5]))
    with pytest.raises(InputError, match=r"not in \[0, 1\]"):
        store.put_scores(_scores(["k1"], [float("nan")]))
    # a row failing inside SQLite (unknown generation) rolls back the rows before it
    with pytest.raises(InputError, match="generation"):
        store.put_scores(_scores(["k1", "k2", "not-stored"], [1.0, 0.0, 0.0]))
    assert store.lookup_scores(_scores(["k1", "k2"], [0, 0]).get_column("score_key")).height == 0
    # the CHECK constraint guards the table itself
    conn = sqlite3.connect(tmp_path / "labels.sqlite")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO scores VALUES ('x', 'k1', 'g', 'em', 2.0, NULL, '2026-01-01T00:00:00')"
        )
    with pytest.raises(InputError, match="lacks column"):
        store.put_generations(_generations(["k9"]).drop("answer"))


WRITER = textwrap.dedent(
    """
    import sys, polars as pl
    sys.path.insert(0, {tests!r})
    from test_label_store import _generations, _scores
    from erag_dagster.labels.store import LabelStore
    store = LabelStore(sys.argv[1])
    start, stop, tag = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    for i in range(start, stop, 10):
        keys = [f"k{{j}}" for j in range(i, min(i + 10, stop))]
        store.put_generations(_generations(keys, answer=tag))
        store.put_scores(_scores(keys, [1.0] * len(keys)))
    """
)


def test_two_processes_writing_at_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"  # both processes create it: a fresh file
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen([sys.executable, str(script), str(path), "0", "300", "A"], env=env),
        subprocess.Popen([sys.executable, str(script), str(path), "150", "450", "B"], env=env),
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = LabelStore(path)
    assert store.count_generations() == 450
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT COUNT(*) FROM scores").fetchone()[0] == 450
    answers = dict(conn.execute("SELECT query_id, answer FROM generations").fetchall())
    assert answers["qk0"] == "A" and answers["qk449"] == "B"


# -- crash resume with the real reader -------------------------------------------------------------

CORPUS = {
    "doc_id": ["fr", "de", "sky", "spider", "sb50", "wall", "jp", "h2o"],
    "title": ["France", "Germany", "", "", "Super Bowl 50", "", "Japan", ""],
    "text": [
        "Paris is the capital and largest city of France.",
        "Berlin is the capital of Germany and its largest city.",
        "On a clear day the sky is blue because air scatters blue light.",
        "Every spider has eight legs and most have eight eyes.",
        "The Denver Broncos defeated the Carolina Panthers to win Super Bowl 50.",
        "The Berlin Wall fell in 1989.",
        "Tokyo is the capital of Japan.",
        "Water is made of hydrogen and oxygen.",
    ],
}
QUERIES = {
    "query_id": ["q-fr", "q-wall"],
    "question": ["What is the capital of France?", "In what year did the Berlin Wall fall?"],
    "answers": [["Paris"], ["1989"]],
}
RUN = {
    "query_id": ["q-fr"] * 4 + ["q-wall"] * 4,
    "doc_id": ["fr", "de", "jp", "sky", "wall", "de", "spider", "h2o"],
    "rank": [1, 2, 3, 4, 1, 2, 3, 4],
}

LABELLER = textwrap.dedent(
    """
    import json, sys, polars as pl
    from erag_dagster.labels.labeller import label_run
    from erag_dagster.labels.store import LabelStore
    from erag_dagster.readers.transformers_reader import reader_from_config
    tables = json.loads(open(sys.argv[2]).read())
    reader = reader_from_config("smollm2-test", tables["reader"])
    label_run(
        pl.DataFrame(tables["run"]), pl.DataFrame(tables["queries"]),
        pl.DataFrame(tables["corpus"]), reader, "em", LabelStore(sys.argv[1]),
        dagster_run_id="killed-run", flush_every=2,
    )
    """
)


@pytest.fixture(scope="session")
def reader() -> TransformersReader:
    return reader_from_config("smollm2-test", READER_CONFIG).load()


def test_resume_after_kill_9(tmp_path: Path, reader: TransformersReader) -> None:
    run, queries, corpus = pl.DataFrame(RUN), pl.DataFrame(QUERIES), pl.DataFrame(CORPUS)
    tables = tmp_path / "tables.json"
    tables.write_text(
        json.dumps({"run": RUN, "queries": QUERIES, "corpus": CORPUS, "reader": READER_CONFIG})
    )
    script = tmp_path / "labeller.py"
    script.write_text(LABELLER)
    path = tmp_path / "killed.sqlite"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ERAG_TORCH_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(path), str(tables)], env=env)
    deadline = time.monotonic() + 90
    committed = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists():
            committed = _count(path)
            if committed >= 2:
                break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the labeller finished before it could be killed"
    store = LabelStore(path)
    committed = store.count_generations()
    assert 2 <= committed < 8 and committed % 2 == 0  # whole chunks of flush_every=2

    resumed = label_run(run, queries, corpus, reader, "em", store, flush_every=2)
    assert (resumed.judged_now, resumed.from_store) == (8 - committed, committed)
    fresh = label_run(
        run, queries, corpus, reader, "em", LabelStore(tmp_path / "fresh.sqlite"), flush_every=2
    )
    assert resumed.labels.equals(fresh.labels)
    assert resumed.labels.filter(pl.col("doc_id") == "fr").get_column("label").to_list() == [1.0]
    audit = store.audit("q-fr", "fr")
    assert audit.height == 1 and audit.get_column("reader_name")[0] == "smollm2-test"


def _count(path: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM generations").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0
