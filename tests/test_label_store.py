"""The content-addressed label store: keys, atomic batches, concurrent writers, crash resume.

Every store test runs on both backends (``store_target``: a fresh SQLite file, and a fresh
database on a real PostgreSQL server started for the session, tests/postgres_server.py).
"""

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
import psycopg
import pytest

from erag_dagster.cli import main as cli_main
from erag_dagster.core.errors import InputError, StorageError
from erag_dagster.core.hashing import sha256_text
from erag_dagster.labels.cached import CommitPolicy, Subject, generate_stored
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import (
    LabelStore,
    generation_key,
    gold_hash,
    open_store,
    score_key,
)
from erag_dagster.labels.tables import GENERATIONS, SCHEMA_VERSION
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.transformers_reader import TransformersReader
from tests.store_rows import _generations, _scores

READER_CONFIG = {"dtype": "float32", "device": "cpu", "num_threads": 1, "batch_size": 4}


def _is_pg(target: str) -> bool:
    return target.startswith("postgresql://")


def _sql(target: str, script: str) -> list[tuple]:
    """Run ``script`` on the store's database with the backend's own client (autocommit);
    the rows of its last statement."""
    if _is_pg(target):
        with psycopg.connect(target, autocommit=True) as conn:
            cursor = conn.execute(script)
            return cursor.fetchall() if cursor.description else []
    conn = sqlite3.connect(target, isolation_level=None)
    try:
        if script.count(";") > 1:
            conn.executescript(script)
            return []
        return conn.execute(script).fetchall()
    finally:
        conn.close()


def _version(target: str) -> int:
    if _is_pg(target):
        return int(_sql(target, "SELECT value FROM erag_store_meta")[0][0])
    return _sql(target, "PRAGMA user_version")[0][0]


def test_keys_are_content_functions() -> None:
    qh, th = sha256_text("Who?"), sha256_text("Text.")
    key = generation_key("fp", "q1", qh, th)
    assert key == generation_key("fp", "q1", qh, th) and len(key) == 64
    assert key != generation_key("fp2", "q1", qh, th)
    assert key != generation_key("fp", "q1", qh, sha256_text("Other text."))
    # an unambiguous encoding: moving a boundary between parts changes the key
    assert generation_key("a", "bc", qh, th) != generation_key("ab", "c", qh, th)
    assert gold_hash(["b", "a"]) == gold_hash(["a", "b"]) != gold_hash(["a"])
    assert score_key(key, gold_hash(["a"]), "em") != score_key(key, gold_hash(["a"]), "f1")


def test_roundtrip_and_first_write_wins(store_target: str) -> None:
    store = open_store(store_target)
    assert store.put_generations(_generations(["k1", "k2"], answer="first")) == 2
    assert store.put_generations(_generations(["k2", "k3"], answer="second")) == 1
    found = store.lookup_generations(["k3", "k2", "k2", "missing"]).sort("generation_key")
    assert found.get_column("answer").to_list() == ["first", "second"]
    assert found.get_column("created_at")[0].endswith("+00:00")
    assert store.count_generations() == 3
    assert store.put_scores(_scores(["k1", "k2"], [1.0, 0.25])) == 2
    got = store.lookup_scores(_scores(["k1", "k2"], [0, 0]).get_column("score_key"))
    assert sorted(got.get_column("score").to_list()) == [0.25, 1.0]
    assert store.count_generations("f" * 64) == 3 and store.count_generations("x") == 0
    if not _is_pg(store_target):
        assert _sql(store_target, "PRAGMA journal_mode") == [("wal",)]


def test_batches_are_atomic(store_target: str) -> None:
    store = open_store(store_target)
    store.put_generations(_generations(["k1", "k2"]))
    # a score out of range refuses the whole frame
    with pytest.raises(InputError, match=r"metric 'em' score \w+: label 1.5 is outside \[0, 1\]"):
        store.put_scores(_scores(["k1", "k2"], [1.0, 1.5]))
    with pytest.raises(InputError, match=r"metric 'em' score \w+: label is NaN"):
        store.put_scores(_scores(["k1"], [float("nan")]))
    # a row failing inside the database (unknown generation) rolls back the rows before it
    with pytest.raises(InputError, match="generation"):
        store.put_scores(_scores(["k1", "k2", "not-stored"], [1.0, 0.0, 0.0]))
    assert store.lookup_scores(_scores(["k1", "k2"], [0, 0]).get_column("score_key")).height == 0
    # the CHECK constraint guards the table itself
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.CheckViolation)):
        _sql(
            store_target,
            "INSERT INTO scores VALUES ('x', 'k1', 'g', 'em', 2.0, NULL, '2026-01-01T00:00:00')",
        )
    with pytest.raises(InputError, match="lacks column"):
        store.put_generations(_generations(["k9"]).drop("answer"))


OPENER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from erag_dagster.labels.store import open_store
    barrier, tag, openers, targets = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    for round_, target in enumerate(targets):
        (barrier / f"{round_}-{tag}").touch()  # a file barrier: all start each round together
        deadline = time.monotonic() + 60  # a peer that died leaves no one waiting forever
        while len(list(barrier.glob(f"{round_}-*"))) < openers:
            if time.monotonic() > deadline:
                sys.exit(f"round {round_}: the other openers never came")
            time.sleep(0.001)
        time.sleep(0.01 * int(tag))  # then one after another, 10 ms apart: into each create
        try:  # a failure is reported and the round goes on (the others wait at the barrier)
            print(open_store(target).schema_version(), flush=True)
        except Exception as exc:
            print(f"round {round_}: {exc}".replace(" ", "_"), flush=True)
    """
)


def test_processes_creating_one_store_at_once_all_open_it(
    tmp_path: Path, store_target: str, request: pytest.FixtureRequest
) -> None:
    """6 processes open the same new store 10 ms apart (so later ones arrive during the first
    one's create), 12 new stores in a row: every open succeeds with the current schema (one
    creates it, the others wait for or see its create; none takes a half-seen create for a
    foreign database, as PostgreSQL's lookups within one statement once let it: CI, stop 28)."""
    rounds, openers = 12, 6
    if _is_pg(store_target):
        server = request.getfixturevalue("postgres")
        name = store_target.rsplit("/", 1)[1]
        targets = [server.create_database(f"{name}_{i}") for i in range(rounds)]
    else:
        targets = [str(tmp_path / f"labels-{i}.sqlite") for i in range(rounds)]
    script, barrier = tmp_path / "opener.py", tmp_path / "barrier"
    script.write_text(OPENER)
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(barrier), str(tag), str(openers), *targets],
            stdout=subprocess.PIPE,
            text=True,
        )
        for tag in range(openers)
    ]
    try:
        outputs = [p.communicate(timeout=180)[0].split() for p in procs]
    finally:
        for p in procs:
            p.kill()  # (a no-op for those that ended)
    assert [p.returncode for p in procs] == [0] * openers
    failures = [line for lines in outputs for line in lines if line != str(SCHEMA_VERSION)]
    assert failures == []
    assert [len(lines) for lines in outputs] == [rounds] * openers


WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from store_rows import _generations, _scores  # polars only: 4 quick process starts
    from erag_dagster.labels.store import open_store
    store = open_store(sys.argv[1])
    start, stop, tag = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    batches = list(range(start, stop, 10))
    added = 0
    for i in batches[::-1] if tag in "BD" else batches:  # two writers walk the other way
        keys = [f"k{{j}}" for j in range(i, min(i + 10, stop))]
        added += store.put_generations(_generations(keys, answer=tag))
        store.put_scores(_scores(keys, [1.0] * len(keys)))
    print(added)
    """
)
WRITERS = {"A": (0, 300), "B": (100, 400), "C": (200, 500), "D": (300, 600)}


def test_four_processes_writing_overlapping_pairs_at_once(
    tmp_path: Path, store_target: str
) -> None:
    """4 writers, each pair written by up to 3 of them at once, into a store none has created:
    every pair is stored once (none lost, none twice), and the answer kept is the one whose
    insert counted (the first committed), never replaced by a later writer's."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = {
        tag: subprocess.Popen(
            [sys.executable, str(script), store_target, str(a), str(b), tag],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for tag, (a, b) in WRITERS.items()
    }
    added = {tag: int(p.communicate(timeout=180)[0]) for tag, p in procs.items()}
    assert {tag: p.returncode for tag, p in procs.items()} == dict.fromkeys(WRITERS, 0)
    store = open_store(store_target)
    counts = "SELECT COUNT(*), COUNT(DISTINCT generation_key) FROM generations"
    assert _sql(store_target, counts) == [(600, 600)]
    assert _sql(store_target, "SELECT COUNT(*) FROM scores") == [(600,)]
    assert sum(added.values()) == 600
    answers = dict(_sql(store_target, "SELECT query_id, answer FROM generations"))
    kept = {tag: sum(a == tag for a in answers.values()) for tag in WRITERS}
    assert kept == added  # each writer's inserts are exactly the rows bearing its answer
    assert answers["qk0"] == "A" and answers["qk599"] == "D"
    late = [f"k{j}" for j in range(600)]
    assert store.put_generations(_generations(late, answer="late")) == 0
    assert dict(_sql(store_target, "SELECT query_id, answer FROM generations")) == answers
    if not _is_pg(store_target):
        assert _sql(store_target, "PRAGMA integrity_check") == [("ok",)]


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
    from erag_dagster.labels.store import open_store
    from erag_dagster.readers.factory import reader_from_config

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
        pl.DataFrame(tables["corpus"]), reader, "em", open_store(sys.argv[1]),
        run_id="killed-run", commit=policy,
    )
    """
)
WINDOW_S = 2.0
COMMIT_SLACK_S = 0.5  # a commit's own duration (a few ms each with synchronous=FULL), bounded
_KILL_BASE = [
    ("q-fr", "What is the capital of France?", "Paris"),
    ("q-wall", "In what year did the Berlin Wall fall?", "1989"),
    ("q-jp", "What is the capital of Japan?", "Tokyo"),
    ("q-legs", "How many legs does a spider have?", "eight"),
    ("q-h2o", "What is water made of?", "hydrogen and oxygen"),
]
#: Each question in 2 wordings (distinct pair keys): 80 pairs. The kill comes a few batches
#: after the first commit was due, i.e. after 2 s of batches of 2 pairs (about 7 batches here;
#: 20 if batches took 0.1 s), so the run is still going.
KILL_QUESTIONS = [
    (f"{qid}-{i}", f"{prefix}{text}", answer)
    for i, prefix in enumerate(("", "Question: "))
    for qid, text, answer in _KILL_BASE
]


@pytest.fixture(scope="session")
def reader() -> TransformersReader:
    return reader_from_config("smollm2-test", READER_CONFIG).load()


@pytest.mark.slow
def test_kill_9_loses_at_most_the_commit_window(
    tmp_path: Path, store_target: str, reader: TransformersReader
) -> None:
    """80 pairs committed by time only (every 2 s; the count trigger is out of reach), killed
    with SIGKILL a random number of batches after the first commit was due (the batch log is
    the clock): every pair whose batch was followed by a batch end at least the window later
    that finished before the kill is in the store (the time rule is checked at batch ends),
    nothing is invented, and the resumed run generates exactly the rest."""
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
    script, path, log = tmp_path / "labeller.py", store_target, tmp_path / "batches"
    script.write_text(LABELLER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ERAG_TORCH_THREADS": "1"}
    args = [sys.executable, str(script), str(path), str(tables), str(log), str(WINDOW_S)]
    proc = subprocess.Popen(args, env=env)
    # The kill waits on events, not on time: the log's batch ends. Once a batch has ended at
    # least the window after the first one, a commit was due at it; a logged batch after that
    # one means that commit has finished (the labeller is sequential). Then a random number of
    # further batches, so the kill lands at a different point of the commit cycle each run.
    extra = random.Random().randint(0, 6)

    def batch_ends() -> list[float]:
        text = log.read_text() if log.exists() else ""
        complete = text[: text.rfind("\n") + 1].splitlines()  # a line being written is not yet
        return [float(line.split()[0]) for line in complete]

    deadline = time.monotonic() + 300  # a failure bound only
    while proc.poll() is None:
        ends = batch_ends()
        first_due = next((i for i, e in enumerate(ends) if ends and e - ends[0] >= WINDOW_S), None)
        if first_due is not None and len(ends) >= first_due + 2 + extra:
            break
        assert time.monotonic() < deadline, f"no commit was due within 300 s ({len(ends)} batches)"
        time.sleep(0.01)
    killed_at = time.time()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, "the labeller finished before it could be killed"

    events = [line.split() for line in log.read_text().splitlines()]
    ends = [float(t) for t, _ in events]
    done = list(itertools.accumulate(int(n) for _, n in events))
    # The time rule is checked at batch ends: the pairs done by batch end e_i are committed at the
    # first later batch end e_j with e_j - e_i >= the window at the latest (the last commit was
    # no later than e_i). That commit has finished when another batch end was logged after e_j
    # (the labeller commits before it starts the next batch). A batch still running at the kill
    # (e.g. one the margin guard decodes again in float64) is not assumed to have any length.
    batch_s = max([b - a for a, b in itertools.pairwise(ends)], default=killed_at - ends[0])
    store = open_store(path)
    committed = store.count_generations()
    finished = ends[:-1]  # batch ends followed by another logged batch end
    due = [
        n
        for end, n in zip(ends, done, strict=True)
        if any(later - end >= WINDOW_S for later in finished)
    ]
    assert due, "the kill came before any commit was due"
    assert committed >= due[-1]
    assert committed <= done[-1] < total  # nothing invented; the kill was mid-run
    rows = store.lookup_generations(store_keys(path))
    stamps = [datetime.fromisoformat(t).timestamp() for t in rows.get_column("created_at")]
    assert all(t <= killed_at for t in stamps)
    lost_s = killed_at - (max(stamps) if stamps else ends[0])
    unsaved_s = killed_at - ends[-1]  # the batch in flight at the kill
    print(
        f"kill after {len(ends)} batches: {done[-1]} generated, {committed} committed, "
        f"newest committed answer {lost_s:.2f} s before the kill, longest batch {batch_s:.2f} s"
    )
    # what was lost is at most the window, the batch after it and the one in flight at the kill
    if committed < done[-1]:
        assert lost_s <= WINDOW_S + 2 * batch_s + unsaved_s + COMMIT_SLACK_S
    assert set(rows.get_column("producer_run_id").to_list()) <= {"killed-run"}

    resumed = label_run(
        pl.DataFrame(run), pl.DataFrame(questions), pl.DataFrame(CORPUS), reader, "em", store
    )
    assert (resumed.judged_now, resumed.from_store) == (total - committed, committed)
    audit = store.audit("q-fr-0", "fr")
    assert audit.height == 1 and audit.get_column("reader_name")[0] == "smollm2-test"


def store_keys(target: str) -> list[str]:
    with open_store(target, read_only=True) as store:
        return [row[0] for rows in store.iter_rows(GENERATIONS) for row in rows]


# -- keys, schema versions, read-only opening ------------------------------------------------------


def test_content_keys_are_those_of_earlier_stores() -> None:
    """Pinned key values: a change to the key encoding is a visible diff (stores written under
    other keys stop hitting). The generation key names the document by its text only (since
    issue 23: re-ingested corpora under new doc ids reuse their answers)."""
    from erag_dagster.labels.cached import task_fingerprint

    key = generation_key("fp\u00e9", "q1", sha256_text("Who? \u00fc"), sha256_text("text\n"))
    assert key == "818b94e58de28bb21032c655f17d70d63ce32e580dca456c64232afe8ffeaac7"
    assert (
        gold_hash(["b", "\u00e4", "a"])
        == "8e993ecd019e5aa44d74e960c5044da0a21fe70224cd4e40fec259acefcdb965"
    )
    assert (
        score_key(key, gold_hash(["x"]), "em")
        == "c2bff62ef630ef65a299ac0f6c7faaee36e0f5d2fec2d82920c76062ec5e2670"
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


PG_V1 = (
    V1_DDL.replace("WITHOUT ROWID", "").replace("REAL", "DOUBLE PRECISION")
    .replace("PRAGMA user_version = 1;", "")
    + "CREATE TABLE erag_store_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);\n"
    + "INSERT INTO erag_store_meta VALUES ('schema_version', '1');\n"
)  # fmt: skip
"""Schema version 1 as a PostgreSQL store would have held it (same tables and columns)."""


def _v1_store(target: str) -> str:
    """A store as schema version 1 wrote it (the run column was ``dagster_run_id``)."""
    _sql(target, PG_V1 if _is_pg(target) else V1_DDL)
    return target


def _columns(target: str, table: str) -> list[str]:
    if _is_pg(target):
        sql = f"SELECT column_name FROM information_schema.columns WHERE table_name = '{table}'"
        return [name for (name,) in _sql(target, sql)]
    return [row[1] for row in _sql(target, f"PRAGMA table_info({table})")]


def _snapshot(target: str) -> object:
    """What must not change: the file's bytes, or every row of every table and the version."""
    if not _is_pg(target):
        return Path(target).read_bytes()
    tables = ("readers", "generations", "gold_answers", "scores", "erag_store_meta")
    return [sorted(_sql(target, f"SELECT * FROM {t}")) for t in tables] + [
        _columns(target, "scores")
    ]


def test_a_version_1_store_is_read_as_is_and_migrated_on_a_writable_open(
    store_target: str,
) -> None:
    path = _v1_store(store_target)
    before = _snapshot(path)
    old = open_store(path, read_only=True).lookup_generations(["k1"])
    assert old.get_column("producer_run_id").to_list() == ["run-7"]
    assert _snapshot(path) == before  # reading did not migrate it
    store = open_store(path)
    assert _version(path) == 2
    columns = _columns(path, "scores")
    assert "producer_run_id" in columns and "dagster_run_id" not in columns
    assert "dagster_run_id" not in _columns(path, "generations")
    assert store.lookup_generations(["k1"]).rows() == old.rows()
    if not _is_pg(path):
        assert _sql(path, "PRAGMA integrity_check") == [("ok",)]


@pytest.mark.parametrize("read_only", [False, True])
def test_a_store_of_a_newer_schema_is_refused_untouched(store_target: str, read_only: bool) -> None:
    path = store_target
    open_store(path).put_generations(_generations(["k1"]))
    if _is_pg(path):
        _sql(path, "UPDATE erag_store_meta SET value = '99' WHERE name = 'schema_version'")
    else:
        _sql(path, "PRAGMA user_version = 99")
    before = _snapshot(path)
    with pytest.raises(StorageError) as err:
        open_store(path, read_only=read_only)
    message = str(err.value)
    assert "schema version 99 is newer" in message and "\n" not in message
    assert _snapshot(path) == before
    assert _version(path) == 99


def test_read_only_postgres_store_writes_nothing(store_target: str) -> None:
    """A read-only open audits and looks up; every write is refused, by the store and (on a
    server) by the server itself."""
    source = open_store(store_target)
    source.register_reader("f" * 64, "reader-x", {"model": {"sha256": "abc"}})
    source.put_generations(_generations(["k1"]))
    source.put_scores(_scores(["k1"], [1.0]))
    before = _snapshot(store_target)
    store = open_store(store_target, read_only=True)
    audit = store.audit("qk1", "dk1")
    assert audit.height == 1 and audit.get_column("score").to_list() == [1.0]
    assert audit.get_column("model_hash").to_list() == ["abc"]
    with pytest.raises(StorageError, match="opened read-only"):
        store.put_generations(_generations(["k2"]))
    with pytest.raises(StorageError, match="opened read-only"):
        store.register_reader("e" * 64, "reader-y", {})
    if _is_pg(store_target):
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            store._conn().execute("DELETE FROM scores")
    store.close()
    assert _snapshot(store_target) == before


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
    import sys, time
    target = sys.argv[1]
    if target.startswith("postgresql://"):  # writers wait; readers do not (EXCLUSIVE mode)
        import psycopg
        conn = psycopg.connect(target, autocommit=True)
        conn.execute("BEGIN")
        conn.execute("LOCK TABLE generations IN EXCLUSIVE MODE")
    else:
        import sqlite3
        conn = sqlite3.connect(target, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("COMMIT")
    """
)


def _hold_lock(tmp_path: Path, target: str, seconds: float) -> subprocess.Popen:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen(
        [sys.executable, str(script), target, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def _upper(part: list[int]) -> list[str]:
    return [LOCK_SUBJECTS[i].text.upper() for i in part]


LOCK_SUBJECTS = [Subject(f"q{i}", "Who?", f"d{i}", f"text {i}") for i in range(5)]


def test_a_lock_that_clears_is_waited_for(tmp_path: Path, store_target: str) -> None:
    path = store_target
    store = open_store(path, busy_timeout_s=0.2)
    store.register_reader("7" * 64, "upper", {})
    holder = _hold_lock(tmp_path, path, 2.0)
    try:
        policy = CommitPolicy(every_pairs=2, every_seconds=60, lock_wait_seconds=30)
        done = generate_stored(LOCK_SUBJECTS, _upper, store, "7" * 64, "upper", {}, commit=policy)
    finally:
        holder.wait(timeout=30)
    assert done.generated == 5 and store.count_generations() == 5
    assert not list(tmp_path.rglob("*.recovery-*"))


def test_a_lock_that_never_clears_sends_the_answers_to_a_recovery_file(
    tmp_path: Path, storage: Path, store_target: str
) -> None:
    """SQLite: the file goes beside the store; PostgreSQL: to <storage root>/label-recovery."""
    path = store_target
    store = open_store(path, busy_timeout_s=0.2)
    store.register_reader("7" * 64, "upper", {})
    holder = _hold_lock(tmp_path, path, 600)
    try:
        policy = CommitPolicy(every_pairs=100, every_seconds=60, lock_wait_seconds=1.0)
        with pytest.raises(StorageError) as err:
            generate_stored(LOCK_SUBJECTS, _upper, store, "7" * 64, "upper", {}, commit=policy)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    (recovery,) = tmp_path.rglob("*.recovery-*.jsonl")
    where = storage / "label-recovery" if _is_pg(path) else tmp_path
    assert recovery.parent == where
    message = str(err.value)
    assert "\n" not in message and "5 generated answers saved to" in message
    assert str(recovery) in message
    assert store.count_generations() == 0
    assert f"erag-dagster import-recovery {recovery} --store {path}" in message
    assert cli_main(["import-recovery", str(recovery), "--store", path]) == 0
    assert store.count_generations() == 5
    assert store.import_recovery(recovery) == 0  # importing twice is harmless
    again = generate_stored(LOCK_SUBJECTS, _upper, store, "7" * 64, "upper", {})
    assert again.generated == 0 and again.outputs == _upper(list(range(5)))


def test_a_server_that_goes_away_sends_the_answers_to_a_recovery_file(
    tmp_path: Path, storage: Path
) -> None:
    """PostgreSQL stopped while the reader runs (its own server, not the session's): the commit
    is retried, then the answers go to a recovery file; once the server is back, importing it
    stores them all."""
    from tests.postgres_server import postgres_server

    with postgres_server() as server:
        url = server.create_database("flaky")
        store = open_store(url, busy_timeout_s=0.2)
        store.register_reader("7" * 64, "upper", {})

        def upper_then_stop(part: list[int]) -> list[str]:
            server.stop()  # the server goes away after the store was read, before the commit
            return _upper(part)

        policy = CommitPolicy(every_pairs=100, every_seconds=60, lock_wait_seconds=1.0)
        with pytest.raises(StorageError) as err:
            generate_stored(
                LOCK_SUBJECTS, upper_then_stop, store, "7" * 64, "upper", {}, commit=policy
            )
        message = str(err.value)
        (recovery,) = (storage / "label-recovery").glob("flaky.recovery-*.jsonl")
        assert "\n" not in message and "still unreachable after" in message
        assert f"5 generated answers saved to {recovery}" in message
        server.start()
        assert cli_main(["import-recovery", str(recovery), "--store", url]) == 0
        again = generate_stored(LOCK_SUBJECTS, _upper, open_store(url), "7" * 64, "upper", {})
        assert again.generated == 0 and again.outputs == _upper(list(range(5)))
