"""The content-addressed label store: keys, atomic batches, concurrent writers, crash resume."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from erag_dagster.cli import main as cli_main
from erag_dagster.errors import InputError, StorageError
from erag_dagster.hashing import sha256_text
from erag_dagster.labels.cached import CommitPolicy, Subject, generate_stored
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import (
    LabelStore,
    generation_key,
    gold_hash,
    score_key,
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
    with pytest.raises(InputError, match=r"metric 'em' score \w+: label 1.5 is outside \[0, 1\]"):
        store.put_scores(_scores(["k1", "k2"], [1.0, 1.5]))
    with pytest.raises(InputError, match=r"metric 'em' score \w+: label is NaN"):
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
    import json, sys, time, polars as pl
    from erag_dagster.labels.cached import CommitPolicy
    from erag_dagster.labels.labeller import label_run
    from erag_dagster.labels.store import LabelStore
    from erag_dagster.readers.transformers_reader import reader_from_config

    class Logged:
        # the real reader; each model batch's end time and size go to a log before the
        # labeller gets the answers (so the log knows what was generated when)
        def __init__(self, inner, log):
            self.inner, self.log = inner, log
        def __getattr__(self, name):
            return getattr(self.inner, name)
        def answer(self, items, on_batch=None):
            def tap(positions, answers):
                self.log.write(f"{time.time()!r} {len(positions)}\\n")
                self.log.flush()
                on_batch(positions, answers)
            return self.inner.answer(items, on_batch=tap)

    tables = json.loads(open(sys.argv[2]).read())
    inner = reader_from_config("smollm2-test", tables["reader"]).load()
    reader = Logged(inner, open(sys.argv[3], "w"))
    policy = CommitPolicy(every_pairs=1000, every_seconds=float(sys.argv[4]))
    label_run(
        pl.DataFrame(tables["run"]), pl.DataFrame(tables["queries"]),
        pl.DataFrame(tables["corpus"]), reader, "em", LabelStore(sys.argv[1]),
        run_id="killed-run", commit=policy,
    )
    """
)
WINDOW_S = 2.0
COMMIT_SLACK_S = 0.5  # two commits' own duration (a few ms each with synchronous=FULL), bounded
KILL_QUESTIONS = [
    ("q-fr", "What is the capital of France?", "Paris"),
    ("q-wall", "In what year did the Berlin Wall fall?", "1989"),
    ("q-jp", "What is the capital of Japan?", "Tokyo"),
    ("q-legs", "How many legs does a spider have?", "eight"),
    ("q-h2o", "What is water made of?", "hydrogen and oxygen"),
]


@pytest.fixture(scope="session")
def reader() -> TransformersReader:
    return reader_from_config("smollm2-test", READER_CONFIG).load()


@pytest.mark.slow
def test_kill_9_loses_at_most_the_commit_window(tmp_path: Path, reader: TransformersReader) -> None:
    """40 pairs committed by time only (every 2 s; the count trigger is out of reach), killed
    with SIGKILL at a random moment: every pair whose model batch ended more than the window
    plus one batch (plus two commits' duration) before the kill is in the store: the time rule
    is checked at batch ends, so the last commit before the kill is at most that long ago."""
    questions = {
        "query_id": [q for q, _, _ in KILL_QUESTIONS],
        "question": [t for _, t, _ in KILL_QUESTIONS],
        "answers": [[a] for _, _, a in KILL_QUESTIONS],
    }
    docs = CORPUS["doc_id"]
    run = {
        "query_id": [q for q, _, _ in KILL_QUESTIONS for _ in docs],
        "doc_id": [d for _ in KILL_QUESTIONS for d in docs],
        "rank": [r for _ in KILL_QUESTIONS for r in range(1, len(docs) + 1)],
    }
    total = len(run["doc_id"])
    config = {**READER_CONFIG, "batch_size": 2}
    tables = tmp_path / "tables.json"
    tables.write_text(
        json.dumps({"run": run, "queries": questions, "corpus": CORPUS, "reader": config})
    )
    script, path, log = tmp_path / "labeller.py", tmp_path / "killed.sqlite", tmp_path / "batches"
    script.write_text(LABELLER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ERAG_TORCH_THREADS": "1"}
    args = [sys.executable, str(script), str(path), str(tables), str(log), str(WINDOW_S)]
    proc = subprocess.Popen(args, env=env)
    rng = random.Random()
    delay = rng.uniform(3.0, 8.0)  # seconds of generation before the kill
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and log.stat().st_size:
            break
        time.sleep(0.02)
    time.sleep(delay)
    killed_at = time.time()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the labeller finished before it could be killed"

    events = [line.split() for line in log.read_text().splitlines()]
    ends = [float(t) for t, _ in events]
    done = list(itertools.accumulate(int(n) for _, n in events))
    # B: the longest time between two batch ends (a batch plus any commit made at its end)
    batch_s = max([b - a for a, b in itertools.pairwise(ends)], default=killed_at - ends[0])
    bound = WINDOW_S + batch_s + COMMIT_SLACK_S
    store = LabelStore(path)
    committed = store.count_generations()
    # the guarantee: at the kill, everything generated before (kill - window - one batch) is in
    due = [n for end, n in zip(ends, done, strict=True) if end < killed_at - bound]
    assert committed >= (due[-1] if due else 0)
    assert committed <= done[-1] < total  # nothing invented; the kill was mid-run
    rows = store.lookup_generations(store_keys(path))
    stamps = [datetime.fromisoformat(t).timestamp() for t in rows.get_column("created_at")]
    assert all(t <= killed_at for t in stamps)
    lost_s = killed_at - (max(stamps) if stamps else ends[0])
    print(
        f"kill after {delay:.1f} s: {done[-1]} generated, {committed} committed, "
        f"newest committed answer {lost_s:.2f} s before the kill, longest batch {batch_s:.2f} s"
    )
    assert lost_s <= bound
    assert set(rows.get_column("producer_run_id").to_list()) <= {"killed-run"}

    resumed = label_run(
        pl.DataFrame(run), pl.DataFrame(questions), pl.DataFrame(CORPUS), reader, "em", store
    )
    assert (resumed.judged_now, resumed.from_store) == (total - committed, committed)
    audit = store.audit("q-fr", "fr")
    assert audit.height == 1 and audit.get_column("reader_name")[0] == "smollm2-test"


def store_keys(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [k for (k,) in conn.execute("SELECT generation_key FROM generations")]
    finally:
        conn.close()


# -- keys, schema versions, read-only opening ------------------------------------------------------


def test_content_keys_are_those_of_earlier_stores() -> None:
    """Values computed by the code before hashing moved to erag_dagster/hashing.py: existing
    stores must keep hitting."""
    from erag_dagster.labels.cached import task_fingerprint

    key = generation_key("fp\u00e9", "q1", sha256_text("Who? \u00fc"), 'd"1', sha256_text("text\n"))
    assert key == "b170064779f1b50ece62c1c046bfd1f174d64cc4fd0f481a1bab6f92d8c43205"
    assert (
        gold_hash(["b", "\u00e4", "a"])
        == "8e993ecd019e5aa44d74e960c5044da0a21fe70224cd4e40fec259acefcdb965"
    )
    assert (
        score_key(key, gold_hash(["x"]), "em")
        == "4b5624b4683cd3e802c5e92eb4a1094c7c78684954e50673598240c76498c803"
    )
    assert (
        task_fingerprint("fp", "end_to_end_concatenated/v1")
        == "0848b31f2a46df39863a952b2f8edc3472e034a0a8e5695b9625462794cd70e9"
    )


V1_DDL = """
CREATE TABLE readers (reader_fingerprint TEXT PRIMARY KEY, name TEXT NOT NULL,
    identity_json TEXT NOT NULL, spec_json TEXT, created_at TEXT NOT NULL);
CREATE TABLE generations (generation_key TEXT PRIMARY KEY, reader_fingerprint TEXT NOT NULL,
    query_id TEXT NOT NULL, question_hash TEXT NOT NULL, doc_id TEXT NOT NULL,
    text_hash TEXT NOT NULL, answer TEXT NOT NULL,
    gen_seconds REAL NOT NULL CHECK (gen_seconds >= 0), dagster_run_id TEXT,
    created_at TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX generations_pair ON generations (query_id, doc_id);
CREATE TABLE gold_answers (gold_hash TEXT PRIMARY KEY, answers_json TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE scores (score_key TEXT PRIMARY KEY,
    generation_key TEXT NOT NULL REFERENCES generations (generation_key),
    gold_hash TEXT NOT NULL, metric TEXT NOT NULL,
    score REAL NOT NULL CHECK (score >= 0.0 AND score <= 1.0), dagster_run_id TEXT,
    created_at TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX scores_generation ON scores (generation_key);
INSERT INTO generations VALUES ('k1', 'fp', 'q1', 'qh', 'd1', 'th', 'Paris', 0.5, 'run-7',
    '2026-01-01T00:00:00+00:00');
PRAGMA user_version = 1;
"""


def _v1_store(path: Path) -> Path:
    """A store as schema version 1 wrote it (the run column was ``dagster_run_id``)."""
    conn = sqlite3.connect(path)
    conn.executescript(V1_DDL)
    conn.close()
    return path


def test_a_version_1_store_is_read_as_is_and_migrated_on_a_writable_open(tmp_path: Path) -> None:
    path = _v1_store(tmp_path / "v1.sqlite")
    before = path.read_bytes()
    old = LabelStore(path, read_only=True).lookup_generations(["k1"])
    assert old.get_column("producer_run_id").to_list() == ["run-7"]
    assert path.read_bytes() == before  # reading did not migrate it
    store = LabelStore(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    columns = [row[1] for row in conn.execute("PRAGMA table_info(scores)")]
    assert "producer_run_id" in columns and "dagster_run_id" not in columns
    assert store.lookup_generations(["k1"]).rows() == old.rows()
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("read_only", [False, True])
def test_a_store_of_a_newer_schema_is_refused_untouched(tmp_path: Path, read_only: bool) -> None:
    path = tmp_path / "future.sqlite"
    LabelStore(path).put_generations(_generations(["k1"]))
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StorageError) as err:
        LabelStore(path, read_only=read_only)
    message = str(err.value)
    assert "schema version 99 is newer" in message and "\n" not in message
    assert path.read_bytes() == before
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 99


def test_read_only_open_writes_nothing(tmp_path: Path) -> None:
    """Root ignores file modes, so the check is on the bytes: audit on a read-only copy leaves
    the file, its mtime and its folder exactly as they were (no -wal/-shm either)."""
    source = LabelStore(tmp_path / "labels.sqlite")
    source.register_reader("f" * 64, "reader-x", {"model": {"sha256": "abc"}})
    source.put_generations(_generations(["k1"]))
    source.put_scores(_scores(["k1"], [1.0]))
    source.close()
    media = tmp_path / "media"
    media.mkdir()
    copy = media / "labels.sqlite"
    copy.write_bytes((tmp_path / "labels.sqlite").read_bytes())
    copy.chmod(0o444)
    media.chmod(0o555)
    try:
        stat = copy.stat()
        before = copy.read_bytes()
        store = LabelStore(copy, read_only=True)
        audit = store.audit("qk1", "dk1")
        assert audit.height == 1 and audit.get_column("score").to_list() == [1.0]
        assert audit.get_column("model_hash").to_list() == ["abc"]
        assert store.lookup_generations(["k1"]).height == 1
        with pytest.raises(StorageError, match="opened read-only"):
            store.put_generations(_generations(["k2"]))
        store.close()
        assert copy.read_bytes() == before and copy.stat().st_mtime_ns == stat.st_mtime_ns
        assert sorted(p.name for p in media.iterdir()) == ["labels.sqlite"]
    finally:
        media.chmod(0o755)


# -- a store locked by another process ------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("COMMIT")
    """
)


def _hold_lock(tmp_path: Path, path: Path, seconds: float) -> subprocess.Popen:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def _upper(part: list[int]) -> list[str]:
    return [LOCK_SUBJECTS[i].text.upper() for i in part]


LOCK_SUBJECTS = [Subject(f"q{i}", "Who?", f"d{i}", f"text {i}") for i in range(5)]


def test_a_lock_that_clears_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "labels.sqlite"
    store = LabelStore(path, busy_timeout_s=0.2)
    store.register_reader("t" * 64, "upper", {})
    holder = _hold_lock(tmp_path, path, 2.0)
    try:
        policy = CommitPolicy(every_pairs=2, every_seconds=60, lock_wait_seconds=30)
        done = generate_stored(LOCK_SUBJECTS, _upper, store, "t" * 64, "upper", {}, commit=policy)
    finally:
        holder.wait(timeout=30)
    assert done.generated == 5 and store.count_generations() == 5
    assert not list(tmp_path.glob("*.recovery-*"))


def test_a_lock_that_never_clears_sends_the_answers_to_a_recovery_file(tmp_path: Path) -> None:
    path = tmp_path / "labels.sqlite"
    store = LabelStore(path, busy_timeout_s=0.2)
    store.register_reader("t" * 64, "upper", {})
    holder = _hold_lock(tmp_path, path, 600)
    try:
        policy = CommitPolicy(every_pairs=100, every_seconds=60, lock_wait_seconds=1.0)
        with pytest.raises(StorageError) as err:
            generate_stored(LOCK_SUBJECTS, _upper, store, "t" * 64, "upper", {}, commit=policy)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    (recovery,) = tmp_path.glob("labels.sqlite.recovery-*.jsonl")
    message = str(err.value)
    assert "\n" not in message and "5 generated answers saved to" in message
    assert str(recovery) in message
    assert store.count_generations() == 0
    assert f"erag-dagster import-recovery {recovery} --store {path}" in message
    assert cli_main(["import-recovery", str(recovery), "--store", str(path)]) == 0
    assert store.count_generations() == 5
    assert store.import_recovery(recovery) == 0  # importing twice is harmless
    again = generate_stored(LOCK_SUBJECTS, _upper, store, "t" * 64, "upper", {})
    assert again.generated == 0 and again.outputs == _upper(list(range(5)))
