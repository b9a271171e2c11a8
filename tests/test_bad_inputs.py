"""Bad inputs through the real command line: each is ONE line naming what and where.

The table runs ``erag_dagster.cli.main`` in process (exit status, stdout, stderr); a few cases go
through the installed ``erag-dagster`` console script to show that no traceback reaches the
terminal. Inputs are tiny files written to ``tmp_path`` and the embedded ``sample`` dataset, so no
JVM, index or reader is started.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from erag_dagster.cli import main
from erag_dagster.core.errors import InputError, StorageError, as_fault
from erag_dagster.core.paths import atomic_write_text
from erag_dagster.data.loaders import load_dataset
from erag_dagster.data.spec import parse_spec
from erag_dagster.labels.recovery import ReaderRecord
from erag_dagster.labels.store import GENERATIONS_SCHEMA, LabelStore

CONSOLE_SCRIPT = Path(sys.executable).with_name("erag-dagster")


def _beir(folder: Path, qrels: bytes, queries: bytes | None = None) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "", "text": "alpha beta"}\n'
        '{"_id": "d2", "title": "", "text": "gamma delta"}\n'
    )
    (folder / "queries.jsonl").write_bytes(
        queries or b'{"_id": "q1", "text": "alpha"}\n{"_id": "q2", "text": "gamma"}\n'
    )
    (folder / "qrels" / "test.tsv").write_bytes(qrels)
    return folder


def _tables(folder: Path, relevance: list[int | None]) -> Path:
    folder.mkdir()
    pl.DataFrame({"doc_id": ["d1", "d2"], "text": ["alpha", "gamma"]}).write_parquet(
        folder / "corpus.parquet"
    )
    pl.DataFrame({"query_id": ["q1", "q2"], "question": ["alpha", "gamma"]}).write_parquet(
        folder / "queries.parquet"
    )
    pl.DataFrame(
        {"query_id": ["q1", "q2"], "doc_id": ["d1", "d2"], "relevance": relevance},
        schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int64},
    ).write_parquet(folder / "qrels.parquet")
    return folder


@pytest.fixture()
def bad(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every bad file of the table, in ``tmp_path`` (also the working directory)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ERAG_STORAGE", str(tmp_path / "storage"))
    monkeypatch.delenv("ERAG_DEBUG", raising=False)
    good_qrels = b"q1\td1\t1\nq2\td2\t1\n"
    _beir(tmp_path / "good", good_qrels)
    _beir(tmp_path / "latin1", b"q1\td1\t1\nq2\td2\t\xff1\n")
    _beir(tmp_path / "huge", b"q1\td1\t1\nq2\td2\t100000000000000000000000\n")
    _beir(tmp_path / "negative", b"q1\td1\t1\nq2\td2\t-1\n")
    _beir(
        tmp_path / "blank",
        good_qrels,
        b'{"_id": "q1", "text": "alpha"}\n{"_id": "q2", "text": " "}\n',
    )
    _tables(tmp_path / "nullrel", [1, None])
    _tables(tmp_path / "negrel", [1, -2])
    (tmp_path / "run.trec").write_bytes(b"q1 Q0 d1 1 1.0 t\nq2 Q0 d2 1 1.0 t\n")
    (tmp_path / "latin1.trec").write_bytes(b"q1 Q0 d1 1 1.0 t\nq2 Q0 d\xe9 1 1.0 t\n")
    (tmp_path / "latin1.json").write_bytes(b'{"q1": [1, 0],\n "q\xe9": [0, 1]}')
    (tmp_path / "garbage.parquet").write_bytes(os.urandom(200))
    whole = tmp_path / "whole.parquet"
    pl.DataFrame(
        {"query_id": ["q1"] * 50, "rank": range(1, 51), "label": [0.5] * 50}
    ).write_parquet(whole)
    (tmp_path / "truncated.parquet").write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    (tmp_path / "foreign.sqlite").write_text("a text file, not an SQLite database\n" * 40)
    LabelStore(tmp_path / "real.sqlite")
    (tmp_path / "truncated.sqlite").write_bytes((tmp_path / "real.sqlite").read_bytes()[:1000])
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "k1.yaml").write_text(
        'retrievers:\n  bm25:\n    kind: bm25\n    k1: "abc"\nreaders:\n  r:\n    model: m\n'
    )
    (tmp_path / "evalk.yaml").write_text(
        "retrievers:\n  bm25:\n    kind: bm25\nreaders:\n  r:\n    model: m\n"
        "evaluation:\n  k: abc\n"
    )
    (tmp_path / "evaltypo.yaml").write_text(
        "retrievers:\n  bm25:\n    kind: bm25\nreaders:\n  r:\n    model: m\n"
        "evaluation:\n  k: 5\n  lable_k: 2\n"
    )
    (tmp_path / "evallist.yaml").write_text(
        "retrievers:\n  bm25:\n    kind: bm25\nreaders:\n  r:\n    model: m\n"
        "evaluation:\n  list_metrics: P@3\n"
    )
    (tmp_path / "typo.yaml").write_text(
        "retrievers:\n  bm25:\n    kind: bm25\n    k1: 0.9\n    bb: 0.4\n"
        "readers:\n  r:\n    model: m\n"
    )
    for name, run in (
        ("baddoc", "badrun.trec"), ("badq", "badq.trec"), ("gone", "nope.trec"),
        ("noscore", "noscore.parquet"),
    ):  # fmt: skip
        (tmp_path / f"{name}.yaml").write_text(
            f"retrievers:\n  theirs:\n    kind: run_file\n    path: {run}\n"
            "readers:\n  r:\n    model: m\n"
        )
    datasets = {
        "dsname": "datasets:\n  my-set: sample\n",
        "dskey": "datasets:\n  s:\n    spec: sample\n    passage: 3\n",
        "dsboth": "datasets:\n  s:\n    spec: sample?passages=3\n    passages: 4\n",
        "dsok": "datasets:\n  s: sample\n  good: beir:good\n",
    }
    for name, section in datasets.items():
        (tmp_path / f"{name}.yaml").write_text(
            f"{section}retrievers:\n  bm25:\n    kind: bm25\nreaders:\n  r:\n    model: m\n"
        )
    (tmp_path / "dsscope.yaml").write_text(
        "datasets:\n  s: sample\nretrievers:\n  bm25:\n    kind: bm25\n    datasets: [t]\n"
        "readers:\n  r:\n    model: m\n"
    )
    (tmp_path / "dsrun.yaml").write_text(
        "datasets:\n  s: sample\n  good: beir:good\nretrievers:\n  bm25:\n    kind: bm25\n"
        "  theirs:\n    kind: run_file\n    path: badrun.trec\n    datasets: [good]\n"
        "readers:\n  r:\n    model: m\n"
    )
    (tmp_path / "badrun.trec").write_text("q1 Q0 d1 1 1.0 t\nq2 Q0 dx 1 1.0 t\n")
    (tmp_path / "badq.trec").write_text("q9 Q0 d1 1 1.0 t\n")
    pl.DataFrame({"query_id": ["q1"], "doc_id": ["d1"]}).write_parquet(tmp_path / "noscore.parquet")
    return tmp_path


EVAL = ["evaluate-run", "--run", "run.trec", "--metrics", "P@1", "--dataset"]
RETRIEVE = ["retrieve", "--dataset", "sample", "--retriever", "bm25", "--output", "out.trec"]
AUDIT = ["audit", "--query", "q1", "--doc", "d1"]
THEIRS = ["retrieve", "--dataset", "beir:good", "--retriever", "theirs", "--output", "o.trec",
          "--registry"]  # fmt: skip

# (case, argv, environment, exit status, substrings of the one line: what and where)
CASES = [
    ("qrels not UTF-8", [*EVAL, "beir:latin1"], {}, 2, ["latin1/qrels/test.tsv:2", "UTF-8"]),
    ("qrels score 1e23", [*EVAL, "beir:huge"], {}, 2, ["huge/qrels/test.tsv:2", "out of range"]),
    ("negative grade", [*EVAL, "beir:negative"], {}, 2, ["negative/qrels/test.tsv:2", "-1"]),
    ("negative grade, parquet", [*EVAL, "parquet:negrel"], {}, 2, ["'q2'", "'d2'", "-2"]),
    ("null grade, parquet", [*EVAL, "parquet:nullrel"], {}, 2, ["qrels.parquet (row 2)", "null"]),
    ("blank question", [*EVAL, "beir:blank"], {}, 2, ["'q2'", "empty question"]),
    ("split escapes", [*EVAL, "beir:good?split=../../good/qrels/test"], {}, 2, ["split"]),
    ("max_questions=1e23", [*EVAL, "beir:good?max_questions=" + "1" * 24], {}, 2,
     ["max_questions", "2147483647"]),
    ("run not UTF-8",
     ["evaluate-run", "--run", "latin1.trec", "--metrics", "P@1", "--dataset", "beir:good"], {},
     2, ["latin1.trec:2", "0xe9", "UTF-8"]),
    ("labels JSON not UTF-8", ["score", "--labels", "latin1.json", "--metrics", "P@1"], {}, 2,
     ["latin1.json:2", "UTF-8"]),
    ("garbage labels parquet", ["score", "--labels", "garbage.parquet", "--metrics", "P@1"], {},
     2, ["garbage.parquet", "unreadable"]),
    ("truncated labels parquet", ["score", "--labels", "truncated.parquet", "--metrics", "P@1"],
     {}, 2, ["truncated.parquet", "unreadable"]),
    ("k too large", [*RETRIEVE, "--k", "99999999999"], {}, 2, ["--k", "2147483647"]),
    ("k zero", [*RETRIEVE, "--k", "0"], {}, 2, ["--k", "0 is not between 1"]),
    ("k not a number", [*RETRIEVE, "--k", "ten"], {}, 2, ["--k", "'ten'"]),
    ("registry k1 abc", [*RETRIEVE, "--registry", "k1.yaml"], {}, 2, ["k1.yaml", "'bm25'", "k1"]),
    ("registry evaluation k", [*RETRIEVE, "--registry", "evalk.yaml"], {}, 2,
     ["evalk.yaml:8", "evaluation.k", "'abc'", "integer >= 1"]),
    ("registry evaluation unknown key", [*RETRIEVE, "--registry", "evaltypo.yaml"], {}, 2,
     ["evaltypo.yaml:9", "evaluation.lable_k", "not a setting", "label_k"]),
    ("registry evaluation list as a string", [*RETRIEVE, "--registry", "evallist.yaml"], {}, 2,
     ["evallist.yaml:8", "evaluation.list_metrics", "'P@3'", "list of metric names"]),
    ("registry unknown key", [*RETRIEVE, "--registry", "typo.yaml"], {}, 2,
     ["typo.yaml", "'bm25'", "unknown key 'bb'"]),
    ("run file: unknown doc", [*THEIRS, "baddoc.yaml"], {}, 2,
     ["badrun.trec:2", "doc_id 'dx'", "not in the dataset"]),
    ("run file: unknown query", [*THEIRS, "badq.yaml"], {}, 2,
     ["badq.trec:1", "query_id 'q9'"]),
    ("run file checked before a run", ["run", "--dataset", "beir:good", "--registry",
     "baddoc.yaml"], {}, 2, ["badrun.trec:2", "doc_id 'dx'"]),
    ("dataset name not a key part", [*RETRIEVE, "--registry", "dsname.yaml"], {}, 2,
     ["dsname.yaml", "dataset 'my-set'", "a letter, then"]),
    ("dataset unknown key", [*RETRIEVE, "--registry", "dskey.yaml"], {}, 2,
     ["dskey.yaml", "dataset 's'", "unknown key 'passage'"]),
    ("dataset option twice", [*RETRIEVE, "--registry", "dsboth.yaml"], {}, 2,
     ["dsboth.yaml", "dataset 's'", "'passages' is given in the spec and as a key"]),
    ("retriever scoped to an unknown dataset", [*RETRIEVE, "--registry", "dsscope.yaml"], {},
     2, ["dsscope.yaml", "retriever 'bm25'", "unknown dataset 't'", "known: s"]),
    ("--dataset with a datasets section", ["run", "--dataset", "sample", "--registry",
     "dsok.yaml"], {}, 2, ["dataset 'sample' given", "dsok.yaml", "datasets section (s, good)"]),
    ("ERAG_DATASET with a datasets section", ["run", "--registry", "dsok.yaml"],
     {"ERAG_DATASET": "sample"}, 2, ["dataset 'sample' given", "unset ERAG_DATASET"]),
    ("run file of one dataset checked before a run", ["run", "--registry", "dsrun.yaml"], {},
     2, ["dataset 'good'", "badrun.trec:2", "doc_id 'dx'"]),
    ("run file missing", [*THEIRS, "gone.yaml"], {}, 2,
     ["gone.yaml", "run_file 'theirs'", "nope.trec"]),
    ("parquet run without score", [*THEIRS, "noscore.yaml"], {}, 2,
     ["noscore.parquet", "lacks column(s) score"]),
    ("unwritable --output",
     ["retrieve", "--dataset", "sample", "--retriever", "bm25", "--output", "/proc/no/x.trec"],
     {}, 2, ["--output", "/proc/no"]),
    ("--output is a folder", [*RETRIEVE[:-1], "."], {}, 2, ["--output", "folder"]),
    ("foreign store", [*AUDIT, "--store", "foreign.sqlite"], {}, 1,
     ["foreign.sqlite", "not a readable", "--store"]),
    ("label into a foreign store",
     ["label", "--dataset", "sample", "--run", "run.trec", "--store", "foreign.sqlite",
      "--output", "labels.parquet"], {}, 1, ["foreign.sqlite", "not a readable"]),
    ("truncated store", [*AUDIT, "--store", "truncated.sqlite"], {}, 1, ["truncated.sqlite"]),
    ("ERAG_STORAGE is a file", AUDIT, {"ERAG_STORAGE": "a-file"}, 1,
     ["a-file", "ERAG_STORAGE", "not a folder"]),
    ("ERAG_STORAGE cannot be created", RETRIEVE, {"ERAG_STORAGE": "/proc/erag-storage"}, 1,
     ["/proc/erag-storage", "ERAG_STORAGE"]),
    ("DAGSTER_HOME not a folder", ["run", "--dataset", "sample"],
     {"DAGSTER_HOME": "/proc/no-such-home"}, 2,
     ["DAGSTER_HOME=/proc/no-such-home", "not a folder"]),
    ("DAGSTER_HOME relative", ["run", "--dataset", "sample"], {"DAGSTER_HOME": "home"}, 2,
     ["DAGSTER_HOME=home", "not an absolute path"]),
    ("unknown option", ["score", "--labels", "x.json", "--metrics", "P@1", "--bogus"], {}, 2,
     ["--bogus", "--help"]),
    ("missing option", ["retrieve", "--dataset", "sample"], {}, 2, ["--retriever", "--output"]),
]  # fmt: skip

# --- check-dataset (issue 34): the loaders' own line, through the dataset command ---------------
CASES += [
    ("check-dataset: qrels not UTF-8", ["check-dataset", "beir:latin1"], {}, 2,
     ["latin1/qrels/test.tsv:2", "UTF-8"]),
    ("check-dataset: null grade, parquet", ["check-dataset", "parquet:nullrel"], {}, 2,
     ["qrels.parquet (row 2)", "null"]),
    ("check-dataset: no such folder", ["check-dataset", "jsonl:nowhere"], {}, 2,
     ["'jsonl:nowhere'", "no such file or directory"]),
]  # fmt: skip
# --- end check-dataset ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "code", "parts"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_one_line(bad, monkeypatch, capsys, argv, env, code, parts) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == code, err
    assert out == ""
    assert err.startswith("erag-dagster: error: ") and err.count("\n") == 1, err
    for part in parts:
        assert part in err, (part, err)


def test_unwritable_output_is_refused_before_any_work(bad, capsys) -> None:
    assert main(["retrieve", "--dataset", "sample", "--retriever", "bm25", "--output",
                 "/proc/no/x.trec"]) == 2  # fmt: skip
    assert not (bad / "storage" / "indexes").exists()  # no index was built


def test_debug_flag_and_variable_show_the_traceback(bad, monkeypatch, capsys) -> None:
    argv = [*EVAL, "beir:latin1"]
    for extra, env in (([], "1"), (["--debug"], None)):
        if env:
            monkeypatch.setenv("ERAG_DEBUG", env)
        else:
            monkeypatch.delenv("ERAG_DEBUG", raising=False)
        assert main([*extra, *argv]) == 2
        err = capsys.readouterr().err
        assert "Traceback" in err and "UnicodeDecodeError" in err
        assert err.splitlines()[-1].startswith("erag-dagster: error: ")
    monkeypatch.delenv("ERAG_DEBUG", raising=False)
    assert main([*argv[:1], "--debug", *argv[1:]]) == 2  # --debug after the command too
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "code", "part"),
    [
        ([*EVAL, "beir:latin1"], 2, "latin1/qrels/test.tsv:2"),
        ([*AUDIT, "--store", "foreign.sqlite"], 1, "foreign.sqlite"),
    ],
)
def test_console_script_prints_no_traceback(bad, argv, code, part) -> None:
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), *argv], cwd=bad, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == code
    assert done.stdout == ""
    assert done.stderr.startswith("erag-dagster: error: ") and done.stderr.count("\n") == 1
    assert part in done.stderr and "Traceback" not in done.stderr


def test_python_api_refuses_specs_that_are_not_strings() -> None:
    for call, value in ((parse_spec, None), (load_dataset, 5)):
        with pytest.raises(InputError, match="dataset spec is a string"):
            call(value)


def test_store_locked_past_the_timeout_is_one_storage_line(tmp_path: Path) -> None:
    path = tmp_path / "labels.sqlite"
    LabelStore(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        waiter = sqlite3.connect(path, timeout=0.05, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError) as caught:
            waiter.execute("BEGIN IMMEDIATE")
        waiter.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    fault = as_fault(caught.value, path)
    assert isinstance(fault, StorageError) and fault.exit_code == 1
    assert str(path) in str(fault) and "locked" in str(fault) and "retry" in str(fault)


def test_score_compat_erag_takes_booleans_like_the_reference(tmp_path: Path, capsys) -> None:
    pytest.importorskip("erag", reason="reference erag 0.0.1: pip install --no-deps erag==0.0.1")
    from tests.test_erag_compat import reference_eval

    labels = {"q1": [True, False, True], "q2": [False, False, True]}
    file = tmp_path / "labels.json"
    file.write_text(json.dumps(labels))
    assert main(["score", "--labels", str(file), "--metrics", "P_2,success_1", "--compat",
                 "erag", "--json"]) == 0  # fmt: skip
    ours = json.loads(capsys.readouterr().out)
    reference = reference_eval(labels, ["P_2", "success_1"])
    assert ours["aggregate"] == reference["aggregated"]
    assert ours["per_query"] == reference["per_input"]
    # without --compat a boolean is still not a label
    assert main(["score", "--labels", str(file), "--metrics", "P@2"]) == 2
    assert "True, not a number" in capsys.readouterr().err


def test_empty_label_lists_are_counted(tmp_path: Path, capsys) -> None:
    file = tmp_path / "labels.json"
    file.write_text(json.dumps({"q1": [1, 0], "q2": [], "q3": []}))
    assert main(["score", "--labels", str(file), "--metrics", "P@1", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["per_query"]["q2"] == {"P@1": 0.0}
    assert "of 3 queries, 2 with an empty label list scored 0 ('q2', 'q3')" in captured.err


def test_atomic_writes_respect_the_umask(tmp_path: Path) -> None:
    for mask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        old = os.umask(mask)
        try:
            target = tmp_path / f"out-{mask:o}.txt"
            atomic_write_text(target, "x")
        finally:
            os.umask(old)
        assert target.stat().st_mode & 0o777 == mode


# --- issue 24: outputs, secrets, recovery, addresses -------------------------------------------
# Each row: input -> exit status -> the one line; every row also checks that no file that was
# there before changed, and that no secret (SECRETS) reaches stdout, stderr or any store file.
# Policies: docs/safety.md.

SECRETS = ("hunter2", "sk-proj-Zq81xWv3pLm0", "a1b2c3d4e5f6a7b8c9d0e1f2")
OURS = ["retrieve", "--dataset", "beir:good", "--retriever", "theirs", "--registry", "ours.yaml"]
LABEL = ["label", "--dataset", "beir:good", "--run", "run.trec", "--store", "real.sqlite"]


def _reader_yaml(folder: Path, name: str, url: str, **extra: str) -> None:
    text = f"backend: openai\nmodel: the-model\nbase_url: '{url}'\n"
    text += "".join(f"{key}: '{value}'\n" for key, value in extra.items())
    (folder / f"{name}.yaml").write_text(text)


@pytest.fixture()
def hostile(bad: Path) -> Path:
    """The ``bad`` files plus what issue 24's cases need (secrets, forged lines, odd ids)."""
    gc.collect()  # the ``bad`` fixture's store connection closes: its WAL is checkpointed now
    (bad / "ours.yaml").write_text(
        "retrievers:\n  theirs:\n    kind: run_file\n    path: run.trec\n"
        "readers:\n  r:\n    model: m\n"
    )
    (bad / "creds.yaml").write_text(
        "retrievers:\n  theirs:\n    kind: run_file\n    path: run.trec\n"
        "readers:\n  r:\n    backend: openai\n    model: m\n"
        "    base_url: http://bob:hunter2@127.0.0.1:9/v1\n"
    )
    (bad / "keyreg.yaml").write_text(
        "retrievers:\n  theirs:\n    kind: run_file\n    path: run.trec\n"
        "readers:\n  r:\n    backend: openai\n    model: m\n    base_url: http://h/v1\n"
        "    api_key_env: a1b2c3d4e5f6a7b8c9d0e1f2\n"
    )
    (bad / "corpus-link.jsonl").symlink_to(bad / "good" / "corpus.jsonl")
    (bad / "store-link.sqlite").symlink_to(bad / "real.sqlite")
    (bad / "notes.txt").write_text("somebody's notes\n")
    urls = {
        "userinfo": "http://bob:hunter2@127.0.0.1:9/v1",
        "apikey": "http://127.0.0.1:9/v1?api_key=sk-proj-Zq81xWv3pLm0",
        "metadata": "http://169.254.169.254/latest/v1",
        "gce": "http://metadata.google.internal/v1",
        "fe80": "http://[fe80::1]:8000/v1",
        "decimal": "http://2852039166/v1",
        "mapped": "http://[::ffff:169.254.169.254]/v1",
        "ipv6": "http://[::1/v1",
    }
    for name, url in urls.items():
        _reader_yaml(bad, name, url)
    _reader_yaml(bad, "keyinenv", "http://127.0.0.1:9/v1", api_key_env="sk-proj-Zq81xWv3pLm0")
    _reader_yaml(bad, "hexkey", "http://127.0.0.1:9/v1", api_key_env="a1b2c3d4e5f6a7b8c9d0e1f2")
    _beir(
        bad / "nbsp",
        "q\u00a01\td1\t1\nq2\td2\t1\n".encode(),
        '{"_id": "q\u00a01", "text": "alpha"}\n{"_id": "q2", "text": "gamma"}\n'.encode(),
    )
    _beir(bad / "spaced", b"q1\td 1\t1\nq2\td2\t1\n")
    (bad / "spaced" / "corpus.jsonl").write_text(
        '{"_id": "d 1", "title": "", "text": "alpha beta"}\n'
        '{"_id": "d2", "title": "", "text": "gamma delta"}\n'
    )
    _beir(
        bad / "zwsp",
        b"q1\td1\t1\nq2\td2\t1\n",
        '{"_id": "q1", "text": "alpha"}\n{"_id": "q2", "text": " \u200b \u200b "}\n'.encode(),
    )
    good_line = _recovery_line("q1", "d1")
    # the key names (reader, query, question, document text): a line moved to another text,
    # its digest recomputed (the digest alone is no signature: the key is checked too)
    forged = _digested({**good_line, "answer": "forged", "text_hash": "e" * 64})
    (bad / "forged.jsonl").write_text(_recovery_text(good_line, forged))
    (bad / "notjson.jsonl").write_text(_recovery_text(good_line) + "{not json\n")
    return bad


#: The test reader of recovery lines: its fingerprint is the hash of its identity, so a file
#: that carries its record imports into any store (labels/recovery.py).
TEST_READER_IDENTITY = {"test_reader": "hostile inputs"}


def _test_reader() -> ReaderRecord:
    from erag_dagster.core.hashing import sha256_json

    return ReaderRecord(sha256_json(TEST_READER_IDENTITY), "test", TEST_READER_IDENTITY)


def _digested(line: dict) -> dict:
    """``line`` with its ``line_sha256`` recomputed (as the writer does)."""
    from erag_dagster.core.hashing import sha256_json

    body = {k: v for k, v in line.items() if k != "line_sha256"}
    return {**body, "line_sha256": sha256_json(body)}


def _recovery_text(*lines: dict) -> str:
    """A recovery file: the test reader's record, then ``lines`` (as given)."""
    return "".join(json.dumps(x) + "\n" for x in (_test_reader().line(), *lines))


def _recovery_line(query_id: str, doc_id: str) -> dict:
    """One recovery-file line as :meth:`LabelStoreBase.write_recovery` writes it (digested)."""
    from erag_dagster.core.hashing import sha256_text
    from erag_dagster.labels.keys import generation_key

    fingerprint, qh = _test_reader().fingerprint, sha256_text("alpha")
    th = sha256_text("alpha beta")
    return _digested({
        "generation_key": generation_key(fingerprint, query_id, qh, th),
        "reader_fingerprint": fingerprint, "query_id": query_id, "question_hash": qh,
        "doc_id": doc_id, "text_hash": th, "answer": "alpha", "gen_seconds": 0.5,
        "producer_run_id": None, "created_at": "2026-01-01T00:00:00+00:00",
    })  # fmt: skip


ISSUE_24_CASES = [
    # output paths: never over what the run reads, never over a stranger's file
    ("--output is the dataset's corpus", [*OURS, "--output", "good/corpus.jsonl"], {}, 2,
     ["--output good/corpus.jsonl", "a dataset file", "which this run reads"]),
    ("--output is a symlink to the corpus", [*OURS, "--output", "corpus-link.jsonl"], {}, 2,
     ["--output corpus-link.jsonl", "a dataset file"]),
    ("--output is the registry's run file", [*OURS, "--output", "run.trec"], {}, 2,
     ["run_file 'theirs' of the registry", "run.trec"]),
    ("--output is the registry", [*OURS, "--output", "ours.yaml"], {}, 2, ["the registry"]),
    ("--output exists, not ours", [*OURS, "--output", "notes.txt"], {}, 2,
     ["--output notes.txt", "not an earlier output of 'erag-dagster retrieve'", "--force"]),
    ("--force does not lift the input rule", [*OURS, "--force", "--output", "run.trec"], {}, 2,
     ["run_file 'theirs'"]),
    ("label --output is the label store", [*LABEL, "--output", "real.sqlite"], {}, 2,
     ["--output real.sqlite", "the label store"]),
    ("label --output is a symlink to the store", [*LABEL, "--output", "store-link.sqlite"], {},
     2, ["the label store"]),
    ("label --output is the default store", [*LABEL[:-2], "--output", "storage/labels.sqlite"],
     {}, 2, ["the label store"]),
    ("label --output is the store's WAL", [*LABEL, "--output", "real.sqlite-wal"], {}, 2,
     ["the label store's journal"]),
    ("label --output is its --run", [*LABEL, "--output", "run.trec"], {}, 2, ["the run file"]),
    ("label --output is its reader config",
     [*LABEL, "--reader", "userinfo.yaml", "--output", "userinfo.yaml"], {}, 2,
     ["the reader config"]),
    ("rerank --output is its --run",
     ["rerank", "--dataset", "beir:good", "--run", "run.trec", "--output", "run.trec"], {}, 2,
     ["the run file"]),
    ("store copy onto a symlink to itself",
     ["store", "copy", "--from", "real.sqlite", "--to", "store-link.sqlite"], {}, 2,
     ["two different stores"]),
    ("store copy onto a dataset file",
     ["store", "copy", "--from", "real.sqlite", "--to", "good/corpus.jsonl"], {}, 1,
     ["good/corpus.jsonl", "not a readable"]),
    # secrets: refused, never echoed
    ("base_url with user:password", [*LABEL, "--reader", "userinfo.yaml", "--output", "l.pq"],
     {}, 2, ["base_url 'http://bob:***@127.0.0.1:9/v1'", "a password", "api_key_env"]),
    ("base_url with ?api_key=", [*LABEL, "--reader", "apikey.yaml", "--output", "l.pq"], {}, 2,
     ["api_key=***", "the query parameter 'api_key'", "environment variable"]),
    ("api_key_env holds a key", [*LABEL, "--reader", "keyinenv.yaml", "--output", "l.pq"], {}, 2,
     ["api_key_env looks like an API key itself (not shown)", "NAME"]),
    ("api_key_env holds a hex key", [*LABEL, "--reader", "hexkey.yaml", "--output", "l.pq"], {},
     2, ["api_key_env looks like an API key itself (not shown)"]),
    ("registry reader with user:password", [*OURS[:-1], "creds.yaml", "--output", "o.trec"],
     {}, 2, ["creds.yaml: reader 'r'", "http://bob:***@127.0.0.1:9/v1", "api_key_env"]),
    ("registry reader with a key as api_key_env",
     [*OURS[:-1], "keyreg.yaml", "--output", "o.trec"], {}, 2,
     ["keyreg.yaml: reader 'r'", "looks like an API key itself (not shown)"]),
    ("store DSN with password",
     ["store", "copy", "--from", "real.sqlite", "--to", "host=127.0.0.1 dbname=x password=hunter2"],
     {}, 2, ["host=127.0.0.1 dbname=x password=***", "PGPASSWORD"]),
    ("store URL with password",
     ["store", "copy", "--from", "real.sqlite", "--to", "postgresql://u:hunter2@127.0.0.1/x"], {},
     2, ["postgresql://u:***@127.0.0.1/x", "PGPASSWORD"]),
    ("audit store URL with password", [*AUDIT, "--store", "postgres://u:hunter2@h/x"], {}, 2,
     ["postgres://u:***@h/x"]),
    ("ERAG_LABEL_STORE DSN with password", [*AUDIT],
     {"ERAG_LABEL_STORE": "host=h password='hunter2' dbname=x"}, 2, ["password=***"]),
    # reader addresses: link-local and metadata need allow_link_local: true
    ("base_url at 169.254.169.254", [*LABEL, "--reader", "metadata.yaml", "--output", "l.pq"],
     {}, 2, ["169.254.169.254 is a link-local address", "allow_link_local: true"]),
    ("base_url at metadata.google.internal",
     [*LABEL, "--reader", "gce.yaml", "--output", "l.pq"], {}, 2,
     ["metadata.google.internal is a cloud metadata service", "allow_link_local"]),
    ("base_url at fe80::1", [*LABEL, "--reader", "fe80.yaml", "--output", "l.pq"], {}, 2,
     ["fe80::1 is a link-local address"]),
    ("base_url at 2852039166", [*LABEL, "--reader", "decimal.yaml", "--output", "l.pq"], {}, 2,
     ["169.254.169.254 is a link-local address"]),
    ("base_url at ::ffff:169.254.169.254",
     [*LABEL, "--reader", "mapped.yaml", "--output", "l.pq"], {}, 2, ["link-local"]),
    ("base_url an invalid IPv6 URL", [*LABEL, "--reader", "ipv6.yaml", "--output", "l.pq"], {},
     2, ["base_url 'http://[::1/v1' is not a valid URL", "Invalid IPv6 URL"]),
    # forged recovery lines: nothing imported
    ("import-recovery: forged key",
     ["import-recovery", "forged.jsonl", "--store", "real.sqlite"], {}, 2,
     ["forged.jsonl:3", "is not the key of the line's own content", "nothing of the file"]),
    ("import-recovery: not JSON", ["import-recovery", "notjson.jsonl", "--store", "real.sqlite"],
     {}, 2, ["notjson.jsonl:3", "malformed JSON line"]),
    # tracebacks before
    ("P(rel=1e20)@5", [*EVAL[:4], "P(rel=100000000000000000000)@5", "--dataset", "beir:good"],
     {}, 2, ["relevance level must be between 1 and 2147483647"]),
    ("--relevance-level 1e20", [*EVAL, "beir:good", "--relevance-level", "1" + "0" * 20], {}, 2,
     ["--relevance-level", "between 1 and 2147483647"]),
    ("query id with U+00A0",
     ["retrieve", "--dataset", "beir:nbsp", "--retriever", "bm25", "--output", "o.trec"], {}, 2,
     ["beir:nbsp", "query id 'q\\xa01'", "TREC run file cannot hold"]),
    ("doc id with a space",
     ["retrieve", "--dataset", "beir:spaced", "--retriever", "bm25", "--output", "o.trec"], {}, 2,
     ["document id 'd 1'", "TREC run file cannot hold"]),
    ("question of spaces and U+200B", [*EVAL, "beir:zwsp"], {}, 2, ["'q2'", "empty question"]),
]  # fmt: skip


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (symlinks not followed) and its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and not p.name.endswith("-shm")
    }


@pytest.mark.parametrize(
    ("argv", "env", "code", "parts"),
    [c[1:] for c in ISSUE_24_CASES],
    ids=[c[0] for c in ISSUE_24_CASES],
)
def test_issue_24_case_is_one_line_and_leaks_nothing(
    hostile, monkeypatch, capsys, argv, env, code, parts
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = _snapshot(hostile)
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == code, err
    assert out == ""
    assert err.startswith("erag-dagster: error: ") and err.count("\n") == 1, err
    for part in parts:
        assert part in err, (part, err)
    after = _snapshot(hostile)
    changed = [name for name, data in before.items() if after.get(name) != data]
    assert changed == [], f"input files changed: {changed}"
    stores = [data for name, data in after.items() if ".sqlite" in name]
    for secret in SECRETS:
        assert secret not in out and secret not in err
        assert not any(secret.encode() in data for data in stores)


def test_an_earlier_output_of_the_same_command_is_replaced(hostile, capsys) -> None:
    """retrieve twice to one path: replaced; edited in between: refused; --force: replaced;
    another command's output (label after retrieve): refused."""
    argv = [*OURS, "--output", "o.trec"]
    assert main(argv) == 0
    first = (hostile / "o.trec").read_text()
    assert main(argv) == 0  # an earlier output of retrieve, unchanged since
    assert (hostile / "o.trec").read_text() == first
    with (hostile / "o.trec").open("a") as handle:
        handle.write("q2 Q0 d2 2 0.5 mine\n")
    capsys.readouterr()
    assert main(argv) == 2
    assert "not an earlier output" in capsys.readouterr().err
    assert "mine" in (hostile / "o.trec").read_text()
    assert main([*argv, "--force"]) == 0
    assert (hostile / "o.trec").read_text() == first
    assert main([*LABEL, "--output", "o.trec"]) == 2
    assert "not an earlier output of 'erag-dagster label'" in capsys.readouterr().err


def test_store_copy_masks_credentials_of_old_reader_specs(hostile) -> None:
    """A store written before specs were masked: ``store copy`` masks the spec on the way."""
    from erag_dagster.labels.tables import READERS

    source = LabelStore(hostile / "old.sqlite")
    source._insert_rows(  # as an older erag-dagster stored it, verbatim
        READERS, [("f" * 64, "r", "{}", json.dumps({"base_url": "http://bob:hunter2@h/v1"}), "t")]
    )
    source.close()
    assert main(["store", "copy", "--from", "old.sqlite", "--to", "new.sqlite"]) == 0
    copied = sqlite3.connect(hostile / "new.sqlite").execute("SELECT spec_json FROM readers")
    (spec,) = copied.fetchone()
    assert "hunter2" not in spec and "bob:***@h" in spec


def test_register_reader_masks_the_spec(tmp_path: Path) -> None:
    store = LabelStore(tmp_path / "s.sqlite")
    store.register_reader("f" * 64, "r", {"v": 1}, {"model": "https://u:hunter2@hub/x"})
    (spec,) = sqlite3.connect(tmp_path / "s.sqlite").execute("SELECT spec_json FROM readers")
    assert "hunter2" not in spec[0] and "u:***@hub" in spec[0]


def test_allow_link_local_opts_in() -> None:
    from erag_dagster.readers.spec import ReaderSpec

    base = {"backend": "openai", "model": "m", "base_url": "http://169.254.169.254/v1"}
    with pytest.raises(InputError, match="allow_link_local"):
        ReaderSpec.from_dict(base, name="r")
    spec = ReaderSpec.from_dict({**base, "allow_link_local": True}, name="r")
    assert spec.allow_link_local and spec.base_url == base["base_url"]


def test_import_recovery_is_all_or_nothing(hostile, capsys) -> None:
    store = LabelStore(hostile / "real.sqlite")
    assert main(["import-recovery", "forged.jsonl", "--store", "real.sqlite"]) == 2
    assert store.count_generations() == 0  # the good first line was not imported either
    good = hostile / "good.jsonl"
    good.write_text(_recovery_text(_recovery_line("q1", "d1")))
    assert main(["import-recovery", str(good), "--store", "real.sqlite"]) == 0
    assert store.count_generations() == 1


def _lowered_file_size_limit() -> None:
    """preexec_fn: SIGXFSZ ignored, so a write past RLIMIT_FSIZE fails with EFBIG."""
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_output_on_a_full_disk_names_the_path(hostile) -> None:
    """A write past the file-size limit (RLIMIT_FSIZE, set for the child only): the one line
    names --output and its path (was ``None``), and no file is left half-written."""
    import resource

    def limit() -> None:
        _lowered_file_size_limit()
        resource.setrlimit(resource.RLIMIT_FSIZE, (20, 20))

    done = subprocess.run(
        [str(CONSOLE_SCRIPT), *OURS, "--output", "full.trec"], cwd=hostile, preexec_fn=limit,
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "--output full.trec: cannot write the file (File too large)" in done.stderr
    assert not (hostile / "full.trec").exists()
    assert not list(hostile.glob(".full.trec.*"))


def test_a_commit_the_disk_refuses_goes_to_a_recovery_file(tmp_path: Path) -> None:
    """The real reader labels two pairs; once it has opened the store, the child's file-size
    limit drops to 4 KiB (``prlimit`` on the child: no root, no mount), so the commit's WAL
    write fails with EFBIG (SQLite: "disk I/O error", the same path as SQLITE_FULL). One line
    names the store and a recovery file; the file imports every answer afterwards."""
    import resource

    from erag_dagster.data.loaders import load_dataset

    ds = load_dataset("sample?max_questions=1")
    query = ds.queries.get_column("query_id")[0]
    docs = ds.corpus.get_column("doc_id").to_list()[:2]
    run = tmp_path / "run.trec"
    run.write_text("".join(f"{query} Q0 {d} {i} {3 - i}.0 t\n" for i, d in enumerate(docs, 1)))
    store = tmp_path / "labels.sqlite"
    LabelStore(store).close()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "ERAG_STORAGE": str(tmp_path / "st")}
    child = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "label", "--dataset", "sample?max_questions=1", "--run", str(run),
         "--store", str(store), "--output", str(tmp_path / "labels.parquet")],
        preexec_fn=_lowered_file_size_limit, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    lines = []
    assert child.stderr is not None
    for line in child.stderr:
        lines.append(line)
        if "to generate" in line:  # the store is open (WAL and shared memory in place)
            resource.prlimit(child.pid, resource.RLIMIT_FSIZE, (4096, 4096))
    assert child.wait(timeout=600) == 1, "".join(lines)
    last = lines[-1]
    assert last.startswith(f"erag-dagster: error: {store}: the commit failed"), last
    assert "2 generated answers saved to" in last and "import-recovery" in last
    assert not any("Traceback" in line for line in lines)
    (recovery,) = tmp_path.glob("labels.sqlite.recovery-*.jsonl")
    assert f"saved to {recovery}" in last
    assert LabelStore(store).count_generations() == 0  # rolled back, nothing half-written
    assert main(["import-recovery", str(recovery), "--store", str(store)]) == 0
    assert LabelStore(store).count_generations() == 2


def test_store_copy_takes_a_libpq_keyword_dsn(tmp_path: Path, postgres, capsys) -> None:
    """``host=… dbname=…`` is PostgreSQL (not an SQLite file of that name); with a password
    it is refused (above); the copy's lines show the DSN as given, nothing more."""
    url = postgres.create_database("dsn_copy")
    database = url.rsplit("/", 1)[1]
    dsn = f"host={postgres.host} port={postgres.port} user={postgres.user} dbname={database}"
    source = tmp_path / "s.sqlite"
    store = LabelStore(source)
    store.register_reader("f" * 64, "r", {"v": 1}, {"base_url": "http://u:hunter2@h/v1"})
    store.close()
    assert main(["store", "copy", "--from", str(source), "--to", dsn]) == 0
    out = capsys.readouterr().out
    assert f"-> {dsn}: 1 rows added" in out and "hunter2" not in out
    assert not (tmp_path / dsn).exists() and not Path(dsn).exists()
    from erag_dagster.labels.store import open_store

    with open_store(dsn, read_only=True) as copied:
        assert copied.reader_identity("f" * 64) == {"v": 1}


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("http://bob:hunter2@h:8/v1?api_key=abc&x=1", "http://bob:***@h:8/v1?api_key=***&x=1"),
        ("cannot reach http://sk-proj-Zq81xWv3pLm0@h/v1 (x)", "cannot reach http://***@h/v1 (x)"),
        ("postgresql://erag@h/db", "postgresql://erag@h/db"),  # a database user is no secret
        ("host=db password=hunter2 dbname=x", "host=db password=*** dbname=x"),
        ("password='a b' host=x", "password=*** host=x"),
        ("Authorization: Bearer abc.def", "Authorization: Bearer ***"),
        ("key sk-proj-Zq81xWv3pLm0 here", "key *** here"),
        ("ASIAN_STUDIES_2020 AKIAIOSFODNN7EXAMPLE", "ASIAN_STUDIES_2020 ***"),
        ("beir:good?split=test&max_questions=3", "beir:good?split=test&max_questions=3"),
    ],
)
def test_mask_credentials(text: str, masked: str) -> None:
    from erag_dagster.core.credentials import mask_credentials

    assert mask_credentials(text) == masked
    assert mask_credentials(masked) == masked  # idempotent


def test_what_looks_like_a_key_and_what_a_link_local_address_is() -> None:
    from erag_dagster.core.credentials import looks_like_key
    from erag_dagster.readers.addresses import link_local_reason

    for name in ("OPENAI_API_KEY", "my_server_key_2", "VLLM_KEY", "HF_TOKEN"):
        assert not looks_like_key(name), name
    for key in ("sk_live_abcdef", "a1b2c3d4e5f6a7b8c9d0e1", "hf_abcdefgh", "AKIAIOSFODNN7EXAMPLE"):
        assert looks_like_key(key), key
    for host in ("169.254.169.254", "2852039166", "0xa9.0xfe.0xa9.0xfe", "169.254.43518",
                 "fe80::1%eth0", "::ffff:169.254.169.254", "fd00:ec2::254",
                 "Metadata.Google.Internal.", "100.100.100.200"):  # fmt: skip
        assert link_local_reason(host), host
    for host in ("127.0.0.1", "::1", "10.0.0.5", "localhost", "api.openai.com", "2130706433"):
        assert link_local_reason(host) is None, host


def test_sqlite_full_rolls_back_and_keeps_the_answers(tmp_path: Path, capsys) -> None:
    """SQLITE_FULL for real ("database or disk is full": the store may not grow past its
    ``max_page_count``): the commit is rolled back, not "cannot rollback - no transaction is
    active"; the answers go to a recovery file that imports once there is room."""
    from erag_dagster.labels.cached import DEFAULT_COMMIT, _commit

    store = LabelStore(tmp_path / "s.sqlite")
    reader = _test_reader()
    store.register_reader(reader.fingerprint, reader.name, reader.identity)
    pages = store._conn().execute("PRAGMA page_count").fetchone()[0]
    store._conn().execute(f"PRAGMA max_page_count = {pages}")
    lines = [{**_recovery_line(f"q{i}", "d1"), "answer": "x" * 200} for i in range(200)]
    frame = pl.DataFrame(lines, schema=GENERATIONS_SCHEMA)
    with pytest.raises(StorageError) as caught:
        _commit(store, frame, DEFAULT_COMMIT, None)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 's.sqlite'}: the commit failed (database or disk")
    assert "200 generated answers saved to" in message and "cannot rollback" not in message
    (recovery,) = tmp_path.glob("s.sqlite.recovery-*.jsonl")
    assert store.count_generations() == 0
    store.close()  # a new connection: no page limit
    assert main(["import-recovery", str(recovery), "--store", str(tmp_path / "s.sqlite")]) == 0
    assert "200 answers added" in capsys.readouterr().out


# --- issues 23/24: reading inputs (regular files, bounds, BOM, duplicate keys, numbers)
# Every reader goes through erag_dagster/core/input_files.py (regular files only, bounded, a leading
# BOM stripped, duplicate keys and YAML anchors refused, nesting bounded) and reads numbers with
# erag_dagster/core/input_numbers.py (ASCII only). docs/inputs.md holds the same table.

_MINI_REGISTRY = "readers:\n  r:\n    model: m\n"
_ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def _squad(questions: list[dict]) -> dict:
    paragraph = {"context": "The answer is 42.", "qas": questions}
    return {"version": "1.1", "data": [{"title": "T", "paragraphs": [paragraph]}]}


def _tables_jsonl(folder: Path, relevance: str) -> Path:
    folder.mkdir()
    (folder / "corpus.jsonl").write_text(
        '{"doc_id": "d1", "text": "alpha"}\n{"doc_id": "d2", "text": "gamma"}\n'
    )
    (folder / "queries.jsonl").write_text(
        '{"query_id": "q1", "question": "alpha"}\n{"query_id": "q2", "question": "gamma"}\n'
    )
    (folder / "qrels.jsonl").write_text(
        '{"query_id": "q1", "doc_id": "d1", "relevance": 1}\n'
        f'{{"query_id": "q2", "doc_id": "d2", "relevance": {relevance}}}\n'
    )
    return folder


@pytest.fixture()
def reading(bad: Path) -> Path:
    """The files of the reading-inputs table, beside :func:`bad`'s (same working directory)."""
    for name, score in (
        ("plusminus", "+-1"), ("super1", "¹"), ("arabic", "١"), ("under", "1_000"),
        ("e20", "1e20"), ("plus", "+1"),
    ):  # fmt: skip
        _beir(bad / name, f"q1\td1\t1\nq2\td2\t{score}\n".encode())
    _beir(bad / "super2head", "q1\td1\t²\nq2\td2\t1\n".encode())  # line 1: not a header
    for name, relevance in (
        ("jplusminus", '"+-1"'), ("jsuper", '"²"'), ("jarabic", '"١"'), ("je20", "1e20"),
        ("jdupkey", '1, "relevance": 2'),
    ):  # fmt: skip
        _tables_jsonl(bad / name, relevance)
    deep = "[" * 100_000 + "]" * 100_000
    _beir(bad / "deepcorpus", b"q1\td1\t1\n")
    (bad / "deepcorpus" / "corpus.jsonl").write_text(f'{{"_id": "d1", "text": {deep}}}\n')
    (bad / "deep.json").write_text(f'{{"data": {deep}}}')
    (bad / "deeplabels.json").write_text(f'{{"q1": {deep}}}')
    (bad / "dupsquad.json").write_text(
        json.dumps(_squad([{"id": "q1", "question": "What?", "answers": [{"text": "42"}]}]),
                   indent=1).replace('"id": "q1",', '"id": "q1",\n "id": "q2",')
    )  # fmt: skip
    (bad / "intanswer.json").write_text(
        json.dumps(_squad([{"id": "qint", "question": "What?", "answers": [{"text": 42}]}]))
    )
    (bad / "bomsquad.json").write_bytes(
        b"\xef\xbb\xbf"
        + json.dumps(_squad([{"id": "q1", "question": "What?", "answers": [{"text": "42"}]}]))
        .encode()
    )  # fmt: skip
    (bad / "duplabels.json").write_text('{"q1": [1, 0],\n "q2": [0, 1],\n "q1": [0, 0]}\n')
    (bad / "bomlabels.json").write_bytes(b'\xef\xbb\xbf{"q1": [1, 0]}\n')
    (bad / "underscore.trec").write_text("q1 Q0 d1 1 1_000 t\n")
    (bad / "arabic.trec").write_text("q1 Q0 d1 1 ١ t\n")
    (bad / "hexscore.trec").write_text("q1 Q0 d1 1 0x1p3 t\n")
    (bad / "joined.trec").write_bytes(b"q1 Q0 d1 1 1.0 t\n\xef\xbb\xbfq2 Q0 d2 1 1.0 t\n")
    (bad / "dupk1.yaml").write_text(
        f"retrievers:\n  bm25:\n    kind: bm25\n    k1: 0.9\n    k1: 1.2\n{_MINI_REGISTRY}"
    )
    (bad / "dupsection.yaml").write_text(
        f"retrievers:\n  bm25:\n    kind: bm25\n{_MINI_REGISTRY}retrievers:\n  x:\n    kind: bm25\n"
    )
    (bad / "bomb.yaml").write_text(
        f"retrievers:\n  bm25:\n    kind: bm25\n{_MINI_REGISTRY}evaluation:\n  lol:\n"
        + "".join(f"    {line}\n" for line in _ALIAS_BOMB.splitlines())
    )
    (bad / "deep.yaml").write_text("retrievers: " + "[" * 5000 + "]" * 5000 + "\n")
    (bad / "anchor.yaml").write_text(f"retrievers:\n  bm25: &b\n    kind: bm25\n{_MINI_REGISTRY}")
    (bad / "bomregistry.yaml").write_bytes(
        f"\ufeffretrievers:\n  bm25:\n    kind: bm25\n{_MINI_REGISTRY}".encode()
    )
    bomb = bad / "bomb.json.gz"
    import gzip

    with gzip.open(bomb, "wb") as packed:
        packed.write(b" " * 100_000)
    return bad


SCORE = ["score", "--metrics", "P@1", "--labels"]
SQUAD_EVAL = ["evaluate-run", "--run", "run.trec", "--metrics", "P@1", "--dataset"]
EVAL_GOOD = ["evaluate-run", "--metrics", "P@1", "--dataset", "beir:good", "--run"]
NOPE = ["retrieve", "--dataset", "beir:good", "--retriever", "nope", "--output", "o.trec",
        "--registry"]  # fmt: skip

# (case, argv, environment, exit status, substrings of the one line)
READING_CASES = [
    ("qrels score +-1", [*EVAL, "beir:plusminus"], {}, 2,
     ["plusminus/qrels/test.tsv:2", "'+-1'", "not an integer"]),
    ("qrels score superscript one", [*EVAL, "beir:super1"], {}, 2,
     ["super1/qrels/test.tsv:2", "'¹'", "ASCII digits"]),
    ("qrels superscript two on line 1 is no header", [*EVAL, "beir:super2head"], {}, 2,
     ["super2head/qrels/test.tsv:1", "'²'"]),
    ("qrels score Arabic-Indic digit", [*EVAL, "beir:arabic"], {}, 2,
     ["arabic/qrels/test.tsv:2", "'١'", "not an integer"]),
    ("qrels score 1_000", [*EVAL, "beir:under"], {}, 2, ["under/qrels/test.tsv:2", "'1_000'"]),
    ("qrels score 1e20", [*EVAL, "beir:e20"], {}, 2, ["e20/qrels/test.tsv:2", "'1e20'"]),
    ("jsonl relevance '+-1'", [*EVAL, "jsonl:jplusminus"], {}, 2,
     ["jplusminus/qrels.jsonl:2", '"+-1"', "does not fit"]),
    ("jsonl relevance '²'", [*EVAL, "jsonl:jsuper"], {}, 2, ["jsuper/qrels.jsonl:2", '"²"']),
    ("jsonl relevance Arabic-Indic", [*EVAL, "jsonl:jarabic"], {}, 2,
     ["jarabic/qrels.jsonl:2", '"١"']),
    ("jsonl relevance 1e20", [*EVAL, "jsonl:je20"], {}, 2, ["je20/qrels.jsonl:2", "1e+20"]),
    ("jsonl record with a key twice", [*EVAL, "jsonl:jdupkey"], {}, 2,
     ["jdupkey/qrels.jsonl:2", "key 'relevance' appears twice"]),
    ("run score 1_000", [*EVAL_GOOD, "underscore.trec"], {}, 2,
     ["underscore.trec:1", "score '1_000' is not a number"]),
    ("run score Arabic-Indic", [*EVAL_GOOD, "arabic.trec"], {}, 2,
     ["arabic.trec:1", "score '١' is not a number"]),
    ("run score hex float", [*EVAL_GOOD, "hexscore.trec"], {}, 2, ["hexscore.trec:1", "'0x1p3'"]),
    ("BOM inside a run (files joined)", [*EVAL_GOOD, "joined.trec"], {}, 2,
     ["joined.trec:2", "byte-order mark"]),
    ("deeply nested SQuAD JSON", [*SQUAD_EVAL, "squad:deep.json"], {}, 2,
     ["deep.json", "nested too deeply"]),
    ("deeply nested labels JSON", [*SCORE, "deeplabels.json"], {}, 2,
     ["deeplabels.json", "nested too deeply"]),
    ("deeply nested corpus line", [*EVAL, "beir:deepcorpus"], {}, 2,
     ["deepcorpus/corpus.jsonl:1", "nested too deeply"]),
    ("SQuAD JSON with a key twice", [*SQUAD_EVAL, "squad:dupsquad.json"], {}, 2,
     ["dupsquad.json:12", "key 'id' appears twice"]),
    ("SQuAD answer that is a number", [*SQUAD_EVAL, "squad:intanswer.json"], {}, 2,
     ["question 'qint'", "answer 0 'text' is a number (42), not a string"]),
    ("labels JSON with a query twice", [*SCORE, "duplabels.json"], {}, 2,
     ["duplabels.json:3", "key 'q1' appears twice"]),
    ("registry key twice", [*NOPE, "dupk1.yaml"], {}, 2,
     ["dupk1.yaml:5", "key 'k1' appears twice"]),
    ("registry section twice", [*NOPE, "dupsection.yaml"], {}, 2,
     ["dupsection.yaml:7", "key 'retrievers' appears twice"]),
    ("registry alias bomb", [*NOPE, "bomb.yaml"], {}, 2,
     ["bomb.yaml:9", "&a", "anchors and aliases are not accepted"]),
    ("registry anchor", [*NOPE, "anchor.yaml"], {}, 2, ["anchor.yaml:2", "&b"]),
    ("deeply nested registry YAML", [*NOPE, "deep.yaml"], {}, 2,
     ["deep.yaml", "YAML nested too deeply"]),
    ("registry with a BOM is read", [*NOPE, "bomregistry.yaml"], {}, 2,
     ["unknown retriever 'nope'", "known: bm25"]),
    ("SQuAD spec that is a folder", [*SQUAD_EVAL, "squad:."], {}, 2,
     ["is a folder, not a regular file"]),
    ("file over the input limit", [*EVAL_GOOD, "run.trec"], {"ERAG_MAX_INPUT_BYTES": "10"}, 2,
     ["over the input limit of 10 bytes", "ERAG_MAX_INPUT_BYTES"]),
    ("input limit not a number", [*EVAL_GOOD, "run.trec"], {"ERAG_MAX_INPUT_BYTES": "1e9"}, 2,
     ["ERAG_MAX_INPUT_BYTES='1e9'", "not a positive number"]),
    ("gzip bomb", [*SQUAD_EVAL, "squad:bomb.json.gz"], {"ERAG_MAX_INPUT_BYTES": "5000"}, 2,
     ["bomb.json.gz", "more than 5000 bytes once decompressed"]),
]  # fmt: skip


def _inputs(root: Path) -> list[Path]:
    """The table's input files (not the storage folder, not the fixture's SQLite stores)."""
    return [
        p
        for p in root.rglob("*")
        if p.is_file() and "storage" not in p.parts and ".sqlite" not in p.name
    ]


@pytest.mark.parametrize(
    ("argv", "env", "code", "parts"),
    [c[1:] for c in READING_CASES],
    ids=[c[0] for c in READING_CASES],
)
def test_reading_bad_input_is_one_line(
    reading, monkeypatch, capsys, argv, env, code, parts
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = {p: p.read_bytes() for p in _inputs(reading)}
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == code, err
    assert out == ""
    assert err.startswith("erag-dagster: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for part in parts:
        assert part in err, (part, err)
    assert before == {p: p.read_bytes() for p in before}  # no input file changed


@pytest.mark.parametrize(
    ("spec_or_labels", "good"),
    [
        (["evaluate-run", "--run", "run.trec", "--metrics", "P@1", "--dataset", "beir:plus"],
         ["evaluate-run", "--run", "run.trec", "--metrics", "P@1", "--dataset", "beir:good"]),
        ([*SCORE, "bomlabels.json", "--json"], None),
        (["evaluate-run", "--run", "run.trec", "--metrics", "P@1", "--dataset",
          "squad:bomsquad.json"], None),
    ],
    ids=["qrels score +1 reads as 1", "labels JSON with a BOM", "SQuAD JSON with a BOM"],
)  # fmt: skip
def test_reading_accepted_forms(reading, capsys, spec_or_labels, good) -> None:
    """``+1`` is the grade 1 (as trec_eval's atol reads it); a leading BOM is stripped."""
    if spec_or_labels[-1] == "squad:bomsquad.json":
        (reading / "run.trec").write_text("q1 Q0 T_0 1 1.0 t\n")
    assert main(spec_or_labels) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "1.0" in out
    if good is not None:
        assert main(good) == 0
        assert capsys.readouterr().out == out


def _bom_copy(source: Path, target: Path) -> Path:
    target.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
    return target


def test_a_bom_changes_no_score(tmp_path: Path, monkeypatch, capsys) -> None:
    """A UTF-8 BOM opening a TREC run or a BEIR file is stripped: the scores equal those of the
    file without it (it used to make the first query id '\\ufeffq...', matching nothing)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ERAG_STORAGE", str(tmp_path / "storage"))
    sample = load_dataset("sample")
    docs = sample.corpus.get_column("doc_id").to_list()
    lines = []
    for number, (qid, gold) in enumerate(sample.qrels.select("query_id", "doc_id").iter_rows()):
        others = [d for d in docs[:6] if d != gold][:4]
        ranked = [gold, *others] if number == 0 else [*others[:2], gold, *others[2:]]
        lines += [f"{qid} Q0 {doc} {r} {10 - r} t" for r, doc in enumerate(ranked, start=1)]
    plain = tmp_path / "plain.trec"
    plain.write_text("\n".join(lines) + "\n")
    evaluate = ["evaluate-run", "--metrics", "nDCG@5,P@1", "--json", "--dataset", "sample"]
    assert main([*evaluate, "--run", str(plain)]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert expected["per_query"][lines[0].split()[0]]["P@1"] == 1.0  # the first query counts
    assert main([*evaluate, "--run", str(_bom_copy(plain, tmp_path / "bom.trec"))]) == 0
    assert json.loads(capsys.readouterr().out) == expected
    folder = _beir(tmp_path / "plainbeir", b"q1\td1\t1\nq2\td2\t1\n")
    boms = _beir(tmp_path / "bombeir", b"")
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        _bom_copy(folder / name, boms / name)
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\nq2 Q0 d1 1 2.0 t\nq2 Q0 d2 2 1.0 t\n")
    for spec in ("beir:plainbeir", "beir:bombeir"):
        assert main(["evaluate-run", "--run", str(run), "--metrics", "P@1", "--json",
                     "--dataset", spec]) == 0  # fmt: skip
    first, second = capsys.readouterr().out.split("\n}\n", 1)
    assert json.loads(first + "}") == json.loads(second)


def test_trec_qrels_grades_are_ascii_integers(tmp_path: Path) -> None:
    """TREC qrels (read_trec_qrels): ``+1`` is 1 like trec_eval's atol; what atol would read as a
    prefix (``+-1`` → 0, ``1e20`` → 1, ``1_000`` → 1, ``¹`` → 0) is refused at file:line."""
    from erag_dagster.metrics.human import read_trec_qrels

    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d1 +1\nq1 0 d2 -1\nq1 0 d3 007\n", encoding="utf-8")
    assert read_trec_qrels(path).get_column("relevance").to_list() == [1, -1, 7]
    for grade in ("+-1", "1e20", "1_000", "¹", "١", "1.0", "9" * 30):
        path.write_text(f"q1 0 d1 1\nq1 0 d2 {grade}\n", encoding="utf-8")
        with pytest.raises(InputError, match=r"qrels\.txt:2: relevance") as caught:
            read_trec_qrels(path)
        assert repr(grade)[1:-1] in str(caught.value) or grade in str(caught.value)


def _cli(argv: list[str], cwd: Path, env: dict[str, str] | None = None):
    """The console script in a child process, 60 s at most: a regression that blocks on a
    FIFO or reads /dev/zero forever fails (TimeoutExpired) instead of hanging the suite."""
    environment = {**os.environ, "ERAG_STORAGE": str(cwd / "storage"), **(env or {})}
    environment.pop("ERAG_DEBUG", None)
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *argv], cwd=cwd, capture_output=True, text=True, timeout=60,
        env=environment,
    )  # fmt: skip


SPECIAL_CASES = [
    ("SQuAD spec /dev/zero", [*SQUAD_EVAL, "squad:/dev/zero"],
     ["/dev/zero: is a character device, not a regular file"]),
    ("SQuAD spec a FIFO", [*SQUAD_EVAL, "squad:fifo.json"],
     ["fifo.json: is a FIFO (named pipe), not a regular file"]),
    ("BEIR queries a FIFO", [*EVAL, "beir:fifobeir"], ["fifobeir/queries.jsonl: is a FIFO"]),
    ("--run a FIFO", [*EVAL_GOOD, "fifo.trec"], ["fifo.trec: is a FIFO"]),
    ("--labels /dev/zero", [*SCORE, "/dev/zero"], ["/dev/zero: is a character device"]),
    ("run_file a FIFO (hashed at registry load)", [*THEIRS, "fiforun.yaml"],
     ["fiforun.yaml: run_file 'theirs'", "fifo.trec: is a FIFO"]),
    ("run_file /dev/zero", [*THEIRS, "zerorun.yaml"],
     ["zerorun.yaml: run_file 'theirs'", "/dev/zero: is a character device"]),
    ("--registry a FIFO", [*NOPE, "fifo.yaml"], ["fifo.yaml: is a FIFO"]),
    ("recovery file a FIFO", ["import-recovery", "--store", "new.sqlite", "fifo.json"],
     ["fifo.json: is a FIFO"]),
    ("reader config a FIFO", ["label", "--dataset", "beir:good", "--run", "run.trec",
     "--reader", "fifo.yaml", "--output", "l.parquet"], ["fifo.yaml: is a FIFO"]),
]  # fmt: skip


@pytest.fixture()
def special(bad: Path) -> Path:
    for name in ("fifo.json", "fifo.trec", "fifo.yaml"):
        os.mkfifo(bad / name)
    _beir(bad / "fifobeir", b"q1\td1\t1\n")
    (bad / "fifobeir" / "queries.jsonl").unlink()
    os.mkfifo(bad / "fifobeir" / "queries.jsonl")
    for name, path in (("fiforun", "fifo.trec"), ("zerorun", "/dev/zero")):
        (bad / f"{name}.yaml").write_text(
            f"retrievers:\n  theirs:\n    kind: run_file\n    path: {path}\n{_MINI_REGISTRY}"
        )
    return bad


@pytest.mark.parametrize(
    ("argv", "parts"), [c[1:] for c in SPECIAL_CASES], ids=[c[0] for c in SPECIAL_CASES]
)
def test_special_files_are_refused_without_blocking(special, argv, parts) -> None:
    done = _cli(argv, special)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("erag-dagster: error: ") and done.stderr.count("\n") == 1
    for part in parts:
        assert part in done.stderr, (part, done.stderr)


def _java_or_skip() -> None:
    from erag_dagster.core.errors import EnvironmentFault
    from erag_dagster.core.java import find_java_home

    try:
        find_java_home()
    except EnvironmentFault as exc:
        pytest.skip(str(exc))


def test_jvm_that_cannot_reserve_its_heap_is_one_line(bad) -> None:
    """-Xmx900t is more than any machine's address space: the JVM cannot reserve it."""
    _java_or_skip()
    done = _cli(RETRIEVE, bad, {"JAVA_TOOL_OPTIONS": "-Xmx900t"})
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("erag-dagster: error: ") and done.stderr.count("\n") == 1
    assert "JAVA_TOOL_OPTIONS='-Xmx900t'" in done.stderr
    assert "lower -Xms/-Xmx" in done.stderr
    assert not list(bad.glob("hs_err*"))  # no JVM crash report left in the working directory


def test_bm25_query_over_the_lucene_clause_limit_names_the_query(bad) -> None:
    """A query with more distinct terms than Lucene's 1024 clauses is refused before Java
    searches (which would fail with 'queryCount = N is not equal to completedTaskCount')."""
    _java_or_skip()
    words = " ".join(f"w{n}x" for n in range(3000))  # 3000 distinct terms, 19889 characters
    (bad / "good" / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "alpha"}) + "\n"
        + json.dumps({"_id": "q2", "text": words}) + "\n"
    )  # fmt: skip
    done = _cli(["retrieve", "--dataset", "beir:good", "--retriever", "bm25", "--output",
                 "o.trec"], bad)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert "query 'q2': 3000 distinct terms (19889 characters)" in done.stderr
    assert "1024" in done.stderr
    assert not (bad / "o.trec").exists()


def test_number_grammar_accepts_what_trec_eval_and_python_agree_on() -> None:
    """input_numbers: the accepted forms and their values; each refusal names the place."""
    from erag_dagster.core.input_numbers import parse_grade, parse_score

    for text, value in (("1", 1), ("+1", 1), ("-1", -1), ("007", 7), (" 2 ", 2)):
        assert parse_grade(text, "f:1") == value
    for text, value in (("1", 1.0), ("-0.5", -0.5), (".5", 0.5), ("1e-3", 0.001), ("+2.", 2.0)):
        assert parse_score(text, "f:1") == value
    for text in ("+-1", "1.0", "1e20", "1_000", "¹", "١", "0x1", "", "1 2"):
        with pytest.raises(InputError, match=r"^f:1: relevance"):
            parse_grade(text, "f:1")
    for text in ("1_000", "١", "0x1p3", "inf", "nan", "1e400", "--1", "1e"):
        with pytest.raises(InputError, match=r"^f:1: score"):
            parse_score(text, "f:1")


# --- issue 32: the regression gate (erag-dagster compare / baseline) -------------------------
# Every case fails before any reader or retriever starts: the output rule, the option parsing,
# the baseline file's form, digest and answer keys, a stored label against the label store, the
# options a stored baseline contradicts, refs that are not regular files, and power before
# verdict (6 queries, 3 metrics: the gate cannot decide, exit 3). Files are byte-identical after.

GATE_SPEC = "sample?max_questions=6"
GATE_METRICS = ("RR", "nDCG@3", "Success@3")
GATE_FP = "f" * 64


def _gate_baseline(ds, rows: list[dict], **changes) -> dict:
    """A baseline file's object for ``rows`` (query_id, doc_id, rank, label), written as
    ``erag-dagster baseline`` writes it (answer keys, digest) with ``changes`` applied after."""
    from erag_dagster.config.inputs import dataset_digest
    from erag_dagster.gate.baseline_file import baseline_payload
    from erag_dagster.gate.identity import EvalIdentity, RetrieverIdentity
    from erag_dagster.gate.verify import answer_keys

    keys = answer_keys(rows, GATE_FP, ds)
    labels = [{**r, "answer_key": k} for r, k in zip(rows, keys, strict=True)]
    identity = EvalIdentity(dataset_digest(GATE_SPEC), GATE_FP, "erag", "contains",
                            GATE_METRICS, 3)  # fmt: skip
    query_ids = sorted(ds.queries.get_column("query_id").cast(pl.String).to_list())
    payload = baseline_payload(identity, RetrieverIdentity("run_file", "base.trec", "0" * 64),
                               GATE_SPEC, "r", query_ids, labels, {}, {})  # fmt: skip
    return {**payload, **changes}


@pytest.fixture()
def gating(bad: Path) -> Path:
    """Runs of 6 queries, a valid baseline, broken baselines, a store whose stored answers
    contradict the baseline's labels, a FIFO and a registry copy, in ``bad``."""
    from erag_dagster.config.registry import default_registry_path
    from erag_dagster.labels.keys import utc_now

    ds = load_dataset(GATE_SPEC)
    qids = sorted(ds.queries.get_column("query_id").cast(pl.String).to_list())
    docs = ds.corpus.get_column("doc_id").cast(pl.String).to_list()
    rows = [{"query_id": q, "doc_id": docs[(i * 3 + r) % len(docs)], "rank": r + 1, "label": 1.0}
            for i, q in enumerate(qids) for r in range(3)]  # fmt: skip
    trec = "".join(f"{r['query_id']} Q0 {r['doc_id']} {r['rank']} {4 - r['rank']} t\n"
                   for r in rows)  # fmt: skip
    (bad / "base.trec").write_text(trec)
    (bad / "cand.trec").write_text(trec.replace(" t\n", " c\n"))
    (bad / "one.trec").write_text(trec.splitlines(keepends=True)[0])
    (bad / "empty.trec").write_text("")
    (bad / "unknowndoc.trec").write_text(trec.replace(rows[-1]["doc_id"], "no-such-doc"))
    good = _gate_baseline(ds, rows)
    (bad / "gate.json").write_text(json.dumps(good, indent=1))
    (bad / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(good).encode())
    (bad / "qids5.json").write_text(json.dumps({**good, "query_ids": 5}))
    (bad / "labelsobj.json").write_text(json.dumps({**good, "labels": {}}))
    forged = json.loads(json.dumps(good))
    forged["labels"][0]["label"] = 0.0
    (bad / "edited.json").write_text(json.dumps(forged))  # digest no longer matches
    outside = _gate_baseline(ds, rows)
    outside["labels"][0]["query_id"] = "not-a-query"
    (bad / "outside.json").write_text(json.dumps(outside))
    swapped = [{**r, "doc_id": docs[-1 - i]} for i, r in enumerate(rows)]
    keyed = _gate_baseline(ds, rows)
    keyed["labels"] = [{**r, "answer_key": k["answer_key"]}
                       for r, k in zip(swapped, keyed["labels"], strict=True)]  # fmt: skip
    from erag_dagster.gate.baseline_file import baseline_digest

    keyed["digest"] = baseline_digest(keyed["identity"], keyed["retriever"], keyed["query_ids"],
                                      keyed["labels"])  # fmt: skip
    (bad / "rekeyed.json").write_text(json.dumps(keyed))  # digest recomputed, keys forged
    (bad / "v1.json").write_text(json.dumps({**good, "format": "erag-gate-baseline/1"}))
    extra = _gate_baseline(ds, rows)
    extra["query_ids"] = [*extra["query_ids"], "zz-extra"]
    extra["digest"] = baseline_digest(extra["identity"], extra["retriever"], extra["query_ids"],
                                      extra["labels"])  # fmt: skip
    (bad / "extra.json").write_text(json.dumps(extra))  # a query the dataset lacks
    (bad / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (bad / "dupkey.json").write_text('{"format": "erag-gate-baseline/2", "format": "x"}')
    (bad / "big.json").write_text(json.dumps(good) + " " * 2048)
    # a store whose answer to each baseline pair scores 0 with "contains": labels 1.0 were edited
    store = LabelStore(bad / "answers.sqlite")
    store.register_reader(GATE_FP, "r", {"v": 1})
    now = utc_now()
    store.put_generations(pl.DataFrame(
        [{"generation_key": r["answer_key"], "reader_fingerprint": GATE_FP,
          "query_id": r["query_id"], "question_hash": "0" * 64, "doc_id": r["doc_id"],
          "text_hash": "0" * 64, "answer": "zzzz unrelated", "gen_seconds": 0.0,
          "producer_run_id": None, "created_at": now} for r in good["labels"]],
        schema=GENERATIONS_SCHEMA))  # fmt: skip
    store.close()
    (bad / "reg.yaml").write_text(Path(default_registry_path()).read_text(encoding="utf-8"))
    (bad / "stranger.md").write_text("someone's notes\n")
    os.mkfifo(bad / "fifo.trec")
    (bad / "folder.trec").mkdir()
    return bad


GATE = ["compare", "--dataset", GATE_SPEC, "--metric", "contains", "--k", "3", "--metrics",
        ",".join(GATE_METRICS)]  # fmt: skip
RUNS = [*GATE, "--baseline", "base.trec", "--candidate", "cand.trec"]
STORED = [*GATE, "--baseline", "gate.json", "--candidate", "cand.trec"]
BASE = ["baseline", "--retriever", "base.trec", "--dataset", GATE_SPEC, "--metric", "contains",
        "--k", "3", "--metrics", ",".join(GATE_METRICS)]  # fmt: skip


def _against(name: str) -> list[str]:
    return [*GATE, "--baseline", name, "--candidate", "cand.trec"]


# (case, argv, environment, exit status, substrings of the one line on stderr)
GATE_CASES = [
    # 1. loss: every output through the one output rule, before any work
    ("compare --output is the label store", [*RUNS, "--store", "answers.sqlite", "--output",
     "answers.sqlite"], {}, 2, ["--output answers.sqlite", "the label store", "reads"]),
    ("compare --output is the baseline read", [*STORED, "--output", "gate.json"], {}, 2,
     ["--output gate.json", "a ref of this gate"]),
    ("compare --output is the run file read", [*RUNS, "--output", "cand.trec"], {}, 2,
     ["--output cand.trec", "a ref of this gate"]),
    ("compare --output is the registry", [*RUNS, "--registry", "reg.yaml", "--output",
     "reg.yaml"], {}, 2, ["--output reg.yaml", "the registry"]),
    ("compare --output over a stranger's file", [*RUNS, "--output", "stranger.md"], {}, 2,
     ["--output stranger.md", "not an earlier output", "--force"]),
    ("compare --save-candidate is the baseline read", [*STORED, "--save-candidate", "gate.json"],
     {}, 2, ["--save-candidate gate.json", "a ref of this gate"]),
    ("compare --save-candidate is the --output", [*RUNS, "--output", "o.md",
     "--save-candidate", "o.md"], {}, 2, ["--save-candidate o.md", "the --output file"]),
    ("compare --save-candidate is the label store", [*RUNS, "--store", "answers.sqlite",
     "--save-candidate", "answers.sqlite"], {}, 2, ["--save-candidate", "the label store"]),
    ("baseline --output is the run file", [*BASE, "--output", "base.trec"], {}, 2,
     ["--output base.trec", "a ref of this gate"]),
    ("baseline --output is the label store", [*BASE, "--store", "answers.sqlite", "--output",
     "answers.sqlite"], {}, 2, ["--output answers.sqlite", "the label store"]),
    ("baseline --output over a stranger's file", [*BASE, "--output", "stranger.md"], {}, 2,
     ["--output stranger.md", "--force"]),
    # 3. power before verdict, and values that disable the gate
    ("6 queries, 3 metrics, --fail-if worse: cannot decide", [*RUNS, "--fail-if", "worse"], {},
     3, ["gate failed", "6 queries, 3 metrics", "0.09375 >= alpha 0.05", "cannot decide",
         "--allow-underpowered"]),
    ("a candidate covering 1 of 6 queries: cannot decide", [*GATE, "--baseline", "base.trec",
     "--candidate", "one.trec", "--fail-if", "worse"], {}, 3, ["cannot decide"]),
    ("an empty candidate run file (before power)", [*GATE, "--baseline", "base.trec",
     "--candidate", "empty.trec", "--fail-if", "worse"], {}, 2, ["empty.trec", "empty"]),
    ("a candidate naming an unknown document (before power)", [*GATE, "--baseline", "base.trec",
     "--candidate", "unknowndoc.trec", "--fail-if", "worse"], {}, 2,
     ["unknowndoc.trec:", "'no-such-doc'", "not in the dataset"]),
    ("an unknown retriever as the candidate", [*GATE, "--baseline", "base.trec",
     "--candidate", "nosuch", "--fail-if", "worse"], {}, 2, ["unknown retriever 'nosuch'"]),
    ("--alpha 0.001 with 6 queries", [*RUNS, "--fail-if", "worse", "--alpha", "0.001",
     "--metrics", "RR"], {}, 3, ["1 metric:", "0.03125 >= alpha 0.001"]),
    ("--margin inf", [*RUNS, "--margin", "inf"], {}, 2, ["argument --margin", "'inf'"]),
    ("--margin nan", [*RUNS, "--margin", "nan"], {}, 2, ["argument --margin", "'nan'"]),
    ("--margin 1 can never be exceeded", [*RUNS, "--margin", "1"], {}, 2,
     ["argument --margin", "[0, 1)"]),
    ("--margin -0.1", [*RUNS, "--margin=-0.1"], {}, 2, ["argument --margin", "'-0.1'"]),
    ("--alpha 1", [*RUNS, "--alpha", "1"], {}, 2, ["argument --alpha", "(0, 1)"]),
    ("--margin=--", [*RUNS, "--margin=--"], {}, 2, ["argument --margin", "expected one value"]),
    ("--alpha=--", [*RUNS, "--alpha=--"], {}, 2, ["argument --alpha", "expected one value"]),
    ("--k=--", [*RUNS, "--k=--"], {}, 2, ["argument --k", "expected one value"]),
    # 5. stored baselines verified, read through the one input rule
    ('"query_ids": 5', _against("qids5.json"), {}, 2, ["qids5.json", "query_ids must be"]),
    ('"labels": {}', _against("labelsobj.json"), {}, 2,
     ["labelsobj.json", "labels must be a list"]),
    ("a label edited (digest)", _against("edited.json"), {}, 2, ["edited.json", "digest"]),
    ("labels outside query_ids", _against("outside.json"), {}, 2,
     ["outside.json", "'not-a-query'", "not one of the file's query_ids"]),
    ("answer keys forged, digest recomputed", _against("rekeyed.json"), {}, 2,
     ["rekeyed.json", "labels[1]", "answer_key is not the key"]),
    ("every label 1.0, the store's answers score 0", [*STORED, "--store", "answers.sqlite"], {},
     2, ["gate.json", "labels[1]", "is 1.0 but the label store's answer scores 0.0"]),
    ("query_ids other than the dataset's", _against("extra.json"), {}, 2,
     ["extra.json: query_ids are not the queries of", "'zz-extra'"]),
    ("format 1 baseline", _against("v1.json"), {}, 2, ["v1.json", "format 1", "write it again"]),
    ("100,000-deep nesting", _against("deep.json"), {}, 2, ["deep.json", "nested too deeply"]),
    ("duplicate key", _against("dupkey.json"), {}, 2, ["dupkey.json", "'format' appears twice"]),
    ("ERAG_MAX_INPUT_BYTES", _against("big.json"), {"ERAG_MAX_INPUT_BYTES": "1000"}, 2,
     ["big.json", "over the input limit of 1000 bytes"]),
    ("a BOM is stripped (then --k contradicts)", [*_against("bom.json")[:6], "2",
     *_against("bom.json")[7:]], {}, 2, ["--k 2 contradicts the stored baseline bom.json"]),
    ("--k contradicts a stored baseline", [*STORED[:6], "5", *STORED[7:]], {}, 2,
     ["--k 5 contradicts the stored baseline gate.json", "(k 3)"]),
    ("--metrics contradicts a stored baseline", [*STORED, "--metrics", "RR"], {}, 2,
     ["--metrics RR contradicts", "(metrics RR,nDCG@3,Success@3)"]),
    ("--metric contradicts a stored baseline", [*STORED, "--metric", "em"], {}, 2,
     ["--metric em contradicts", "downstream_metric contains"]),
    ("--dataset contradicts a stored baseline", [*STORED, "--dataset", "sample?max_questions=7"],
     {}, 2, ["--dataset sample?max_questions=7 contradicts", GATE_SPEC]),
    ("baseline --retriever X.json --k 5", ["baseline", "--retriever", "gate.json", "--k", "5",
     "--output", "again.json"], {}, 2, ["--k 5 contradicts the stored baseline gate.json"]),
    # 8. refs that are not regular files say what they are
    ("a FIFO as a ref", _against("fifo.trec"), {}, 2, ["fifo.trec: is a FIFO"]),
    ("/dev/null as a ref", _against("/dev/null"), {}, 2, ["/dev/null: is a character device"]),
    ("a folder as a ref", _against("folder.trec"), {}, 2, ["folder.trec: is a folder"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "env", "code", "parts"), [c[1:] for c in GATE_CASES], ids=[c[0] for c in GATE_CASES]
)
def test_gate_bad_input_is_one_line(gating, monkeypatch, capsys, argv, env, code, parts) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = _snapshot(gating)
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    prefix = "erag-dagster: gate failed: " if code == 3 else "erag-dagster: error: "
    assert lines[0].startswith(prefix), err
    for part in parts:
        assert part in lines[0], (part, err)
    if code == 3:  # the report says the gate cannot decide, n and the smallest p
        assert "CANNOT DECIDE" in out and "smallest Holm-corrected p" in out
    else:
        assert out == ""
    after = _snapshot(gating)
    changed = [name for name, data in before.items() if after.get(name) != data]
    assert changed == [], f"files changed: {changed}"
    assert not {"o.md", "again.json"} & set(after)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        ([*RUNS, "--fail-if", "worse", "--output", "full.md"], "--output full.md"),
        (["baseline", "--retriever", "gate.json", "--output", "full.md"], "--output full.md"),
    ],
    ids=["compare --output", "baseline --output"],
)
def test_gate_output_on_a_full_disk_names_the_path(gating, argv, option) -> None:
    """A write past the file-size limit (RLIMIT_FSIZE, the child only): exit 1, one line naming
    the option and the path, nothing half-written (compare: the cannot-decide report; baseline:
    a stored baseline saved again)."""
    import resource

    def limit() -> None:
        _lowered_file_size_limit()
        resource.setrlimit(resource.RLIMIT_FSIZE, (20, 20))

    done = subprocess.run(
        [str(CONSOLE_SCRIPT), *argv], cwd=gating, preexec_fn=limit, capture_output=True,
        text=True, timeout=300, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{option}: cannot write the file (File too large)" in done.stderr
    assert not (gating / "full.md").exists() and not list(gating.glob(".full.md.*"))


# === issue 32, items 6-9 (not the gate): import-recovery, the Python API, storage lines, progress
# Every recovery line is verified whole (labels/recovery.py: a sha256 over every field, the answer
# included; reader records that hash to their fingerprint; one answer per key; sizes, times); a
# store that does not exist is created only with --create; the API checks its arguments at the
# door (api_args.py); a read-only store, a full disk under --output, a FIFO/device/folder where a
# file or store is named each say what they are; ERAG_LOCK_WAIT_SECONDS is honoured; progress comes
# at least every progress_every_s (10 s) while a reader generates.


def _i32_line(query_id: str = "q1", answer: str = "alpha", **changes: object) -> dict:
    """A digested generation line of the test reader, ``changes`` applied before the digest."""
    line = {k: v for k, v in _recovery_line(query_id, "d1").items() if k != "line_sha256"}
    return _digested({**line, "answer": answer, **changes})


def _i32_write(path: Path, *lines: dict | str, record: bool = True) -> None:
    """A recovery file: the test reader's record (unless ``record=False``), then ``lines``."""
    head = [_test_reader().line()] if record else []
    text = [x if isinstance(x, str) else json.dumps(x) for x in (*head, *lines)]
    path.write_text("".join(t + "\n" for t in text))


@pytest.fixture
def recovering(bad: Path) -> Path:
    """Recovery files good and hostile, an existing store ``real.sqlite`` (the test reader not
    registered in it), in the working directory ``bad``."""
    from erag_dagster.core.hashing import sha256_json, sha256_text
    from erag_dagster.labels.keys import generation_key

    gc.collect()  # the bad fixture's store connection closed: its WAL folded in, not mid-test
    LabelStore(bad / "real.sqlite").close()
    _i32_write(bad / "good.jsonl", _i32_line())
    _i32_write(bad / "edited.jsonl", {**_i32_line(), "answer": "edited by hand"})
    _i32_write(bad / "conflict.jsonl", _i32_line(answer="one"), _i32_line(answer="two"))
    stranger = "a" * 64
    qh, th = sha256_text("alpha"), sha256_text("alpha beta")
    strangers = _i32_line(
        reader_fingerprint=stranger, generation_key=generation_key(stranger, "q1", qh, th)
    )
    _i32_write(bad / "unknown-reader.jsonl", strangers)
    forged = {"reader": {"reader_fingerprint": stranger, "name": "r", "identity": {"v": 1},
                         "spec": None}}  # fmt: skip
    forged["line_sha256"] = sha256_json(forged)
    _i32_write(
        bad / "forged-reader.jsonl",
        forged,
        strangers,
        record=False,
    )
    _i32_write(bad / "huge.jsonl", _i32_line(answer="x" * 5_000_000))
    _i32_write(bad / "badtime.jsonl", _i32_line(created_at="not a time"))
    _i32_write(bad / "naive.jsonl", _i32_line(created_at="2026-01-01T00:00:00"))
    _i32_write(bad / "nan.jsonl", _i32_line(gen_seconds=float("nan")))
    _i32_write(bad / "badhash.jsonl", _i32_line(question_hash="xyz"))
    _i32_write(bad / "extra.jsonl", _i32_line(note="hi"))
    old = {k: v for k, v in _i32_line().items() if k != "line_sha256"}
    _i32_write(bad / "undigested.jsonl", old)
    line = json.dumps(_i32_line())
    _i32_write(bad / "dupkey.jsonl", line[:-1] + ', "answer": "again"}')
    _i32_write(bad / "array.jsonl", "[1, 2]")
    _i32_write(bad / "reader-only.jsonl")
    _i32_write(bad / "long-answer.jsonl", _i32_line(answer="x" * 200_000))
    mixed = _digested({**_test_reader().line(), "answer": "smuggled"})
    _i32_write(bad / "mixed.jsonl", mixed, _i32_line(), record=False)
    (bad / "a-folder").mkdir()
    gc.collect()
    return bad


IMPORT = ["import-recovery"]
ON_REAL = ["--store", "real.sqlite"]
ISSUE_32_RECOVERY_CASES = [
    ("edited answer", [*IMPORT, "edited.jsonl", *ON_REAL], 2,
     ["edited.jsonl:2", "line_sha256 does not match", "edited or damaged", "nothing of the file"]),
    ("two answers for one key", [*IMPORT, "conflict.jsonl", *ON_REAL], 2,
     ["conflict.jsonl:3", "a second, different answer", "first is at conflict.jsonl:2"]),
    ("unknown reader fingerprint", [*IMPORT, "unknown-reader.jsonl", *ON_REAL], 2,
     ["unknown-reader.jsonl:2", "aaaaaaaaaaaaaaaa… is not registered", "no reader record"]),
    ("reader record that does not hash to its fingerprint",
     [*IMPORT, "forged-reader.jsonl", *ON_REAL], 2,
     ["forged-reader.jsonl:1", "does not hash to its fingerprint"]),
    ("5 MB answer", [*IMPORT, "huge.jsonl", *ON_REAL], 2,
     ["huge.jsonl:2", "a line of 5000", "characters is over the limit of 4194304"]),
    ("200,000-character answer", [*IMPORT, "long-answer.jsonl", *ON_REAL], 2,
     ["long-answer.jsonl:2", "an answer of 200000 characters is over the limit of 100000"]),
    ("created_at: not a time", [*IMPORT, "badtime.jsonl", *ON_REAL], 2,
     ["badtime.jsonl:2", "created_at 'not a time' is not an ISO 8601 time"]),
    ("created_at without offset", [*IMPORT, "naive.jsonl", *ON_REAL], 2,
     ["naive.jsonl:2", "no UTC offset"]),
    ("gen_seconds NaN", [*IMPORT, "nan.jsonl", *ON_REAL], 2,
     ["nan.jsonl:2", "NaN is not a finite number (JSON has no NaN or Infinity)"]),
    ("a hash that is not hex", [*IMPORT, "badhash.jsonl", *ON_REAL], 2,
     ["badhash.jsonl:2", "question_hash must be 64 lower-case hex digits"]),
    ("an unknown field", [*IMPORT, "extra.jsonl", *ON_REAL], 2,
     ["extra.jsonl:2", "unknown field(s) 'note'"]),
    ("a line written before digests", [*IMPORT, "undigested.jsonl", *ON_REAL], 2,
     ["undigested.jsonl:2", "no line_sha256", "--accept-undigested"]),
    ("a key given twice", [*IMPORT, "dupkey.jsonl", *ON_REAL], 2,
     ["dupkey.jsonl:2", "'answer' appears twice"]),
    ("a line that is an array", [*IMPORT, "array.jsonl", *ON_REAL], 2,
     ["array.jsonl:2", "not a JSON object"]),
    ("a reader line with other fields", [*IMPORT, "mixed.jsonl", *ON_REAL], 2,
     ["mixed.jsonl:1", "a reader record line holds other fields too ('answer')"]),
    ("no answers, only a reader", [*IMPORT, "reader-only.jsonl", *ON_REAL], 2,
     ["reader-only.jsonl: the recovery file holds no answers"]),
    ("a mistyped --store", [*IMPORT, "good.jsonl", "--store", "reel.sqlite"], 2,
     ["reel.sqlite: no label store here", "check --store for a typo", "--create"]),
    ("the default store, absent", [*IMPORT, "good.jsonl"], 2,
     ["storage/labels.sqlite: no label store here", "--create"]),
    ("--store a folder", [*IMPORT, "good.jsonl", "--store", "a-folder"], 2,
     ["a-folder: is a folder, not a regular file"]),
    ("--store /dev/null", [*IMPORT, "good.jsonl", "--store", "/dev/null", "--create"], 2,
     ["/dev/null: is a character device"]),
    ("recovery file /dev/null", [*IMPORT, "/dev/null", *ON_REAL], 2,
     ["/dev/null: is a character device"]),
    ("recovery file a folder", [*IMPORT, "a-folder", *ON_REAL], 2,
     ["a-folder: is a folder"]),
    ("audit --store a folder", ["audit", "--store", "a-folder", "--query", "q", "--doc", "d"], 2,
     ["a-folder: is a folder"]),
    ("label --store a folder", ["label", "--dataset", "beir:good", "--run", "run.trec",
     "--store", "a-folder", "--output", "l.parquet"], 2, ["a-folder: is a folder"]),
    ("label --store /dev/null", ["label", "--dataset", "beir:good", "--run", "run.trec",
     "--store", "/dev/null", "--output", "l.parquet"], 2, ["/dev/null: is a character device"]),
    ("label --reader a folder", ["label", "--dataset", "beir:good", "--run", "run.trec",
     "--reader", "a-folder", *ON_REAL, "--output", "l.parquet"], 2,
     ["a-folder: is a folder"]),
    ("ERAG_LOCK_WAIT_SECONDS not a number", [*IMPORT, "good.jsonl", *ON_REAL], 2,
     ["ERAG_LOCK_WAIT_SECONDS='soon' is not a number of seconds"]),
]  # fmt: skip
_I32_ENV = {"ERAG_LOCK_WAIT_SECONDS not a number": {"ERAG_LOCK_WAIT_SECONDS": "soon"}}


@pytest.mark.parametrize(
    ("argv", "code", "parts"),
    [c[1:] for c in ISSUE_32_RECOVERY_CASES],
    ids=[c[0] for c in ISSUE_32_RECOVERY_CASES],
)
def test_issue_32_recovery_case_is_one_line_and_changes_nothing(
    recovering, monkeypatch, capsys, request, argv, code, parts
) -> None:
    case = request.node.callspec.id
    for key, value in _I32_ENV.get(case, {}).items():
        monkeypatch.setenv(key, value)
    before = _snapshot(recovering)
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == code, err
    assert out == ""
    assert err.startswith("erag-dagster: error: ") and err.count("\n") == 1, err
    for part in parts:
        assert part in err, (part, err)
    after = _snapshot(recovering)
    assert after == before, sorted(set(after) ^ set(before)) or "a file changed"
    monkeypatch.delenv("ERAG_LOCK_WAIT_SECONDS", raising=False)
    assert LabelStore(recovering / "real.sqlite").count_generations() == 0


def test_import_recovery_registers_the_reader_and_counts_what_it_kept(recovering, capsys) -> None:
    """--create starts a new store; the file's reader record is registered; a second file with
    another answer for a stored key keeps the stored one and says so; --accept-undigested reads
    an old file once the store knows its reader."""
    assert main([*IMPORT, "good.jsonl", "--store", "new.sqlite", "--create"]) == 0
    assert "1 answers added to new.sqlite, 0 already stored" in capsys.readouterr().out
    store = LabelStore(recovering / "new.sqlite")
    reader = _test_reader()
    assert store.reader_identity(reader.fingerprint) == TEST_READER_IDENTITY
    _i32_write(recovering / "other.jsonl", _i32_line(answer="another"))
    assert main([*IMPORT, "other.jsonl", "--store", "new.sqlite"]) == 0
    out = capsys.readouterr().out
    assert "0 answers added" in out and "1 stored with another answer (kept" in out
    (answer,) = store.lookup_generations([_i32_line()["generation_key"]])["answer"]
    assert answer == "alpha"
    assert main([*IMPORT, "undigested.jsonl", "--store", "new.sqlite", "--accept-undigested"]) == 0
    assert "1 already stored" in capsys.readouterr().out


def test_the_in_repo_answer_files_verify_and_carry_their_readers() -> None:
    """The two files make test seeds from: every line digested, every fingerprint's reader
    record verified (so they import into a new store)."""
    from erag_dagster.labels.recovery import read_recovery_file

    root = Path(__file__).resolve().parents[1]
    for path in (root / "tests/answers/fixture_answers.jsonl",
                 root / "reproductions/answers/default_run.jsonl"):  # fmt: skip
        file = read_recovery_file(path)
        assert set(file.used_at) == set(file.readers), path
        assert all(record.verified for record in file.readers.values()), path


def test_a_recovery_file_written_on_a_full_disk_imports_into_a_new_store(tmp_path: Path) -> None:
    """write_recovery carries the reader it was given: the file imports where that reader is
    unknown (a fresh store), and every line's digest holds."""
    from erag_dagster.labels.cached import DEFAULT_COMMIT, _commit

    store = LabelStore(tmp_path / "s.sqlite")
    pages = store._conn().execute("PRAGMA page_count").fetchone()[0]
    store._conn().execute(f"PRAGMA max_page_count = {pages}")
    lines = [{**_i32_line(f"q{i}"), "answer": "x" * 200} for i in range(100)]
    frame = pl.DataFrame(lines, schema=GENERATIONS_SCHEMA)
    with pytest.raises(StorageError, match="100 generated answers saved to"):
        _commit(store, frame, DEFAULT_COMMIT, None, [_test_reader()])
    (recovery,) = tmp_path.glob("s.sqlite.recovery-*.jsonl")
    fresh = LabelStore(tmp_path / "fresh.sqlite")
    assert fresh.import_recovery(recovery) == 100
    assert fresh.reader_identity(_test_reader().fingerprint) == TEST_READER_IDENTITY


def test_a_lock_is_waited_for_no_longer_than_erag_lock_wait_seconds(tmp_path: Path) -> None:
    """Another process holds the store's write lock: with ERAG_LOCK_WAIT_SECONDS=1 the command
    gives up after about 1 s (the busy timeout is capped by it), not 60 s."""
    import time

    store = tmp_path / "s.sqlite"
    LabelStore(store).close()
    _i32_write(tmp_path / "good.jsonl", _i32_line())
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], "
         "isolation_level=None); c.execute('BEGIN IMMEDIATE'); print('held', flush=True); "
         "time.sleep(120)", str(store)], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        began = time.monotonic()
        done = _cli([*IMPORT, str(tmp_path / "good.jsonl"), "--store", str(store)], tmp_path,
                    {"ERAG_LOCK_WAIT_SECONDS": "1"})  # fmt: skip
        waited = time.monotonic() - began
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert done.returncode == 1, done.stderr
    assert "locked by another process for more than 1 s" in done.stderr
    assert waited < 30, waited


@contextlib.contextmanager
def _read_only_folder(folder: Path) -> Iterator[Path]:
    """``folder`` as read-only: a read-only bind mount when root (permissions do not stop
    root), else mode 0555; skips when neither is possible."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield folder
        finally:
            folder.chmod(0o755)
        return
    view = folder.with_name(folder.name + "-ro")
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(folder), str(view)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot make a read-only view here (root without mount)")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(view)]
        if subprocess.run(remount, capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield view
    finally:
        subprocess.run(["umount", str(view)], capture_output=True)
        view.rmdir()


def test_a_read_only_store_says_it_is_read_only(tmp_path: Path) -> None:
    """Not "is the disk full?": the one line says read-only and why, exit 1, the store as it
    was."""
    folder = tmp_path / "media"
    folder.mkdir()
    LabelStore(folder / "s.sqlite").close()
    _i32_write(tmp_path / "good.jsonl", _i32_line())
    before = (folder / "s.sqlite").read_bytes()
    with _read_only_folder(folder) as view:
        done = _cli([*IMPORT, str(tmp_path / "good.jsonl"), "--store", str(view / "s.sqlite")],
                    tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "the label store is read-only (" in done.stderr and "disk full" not in done.stderr
    assert (folder / "s.sqlite").read_bytes() == before


def test_label_output_on_a_full_disk_is_exit_1_naming_output(tmp_path: Path, postgres) -> None:
    """``label --output`` past the file-size limit: exit 1, one line naming --output and the
    path (was exit 2 "input: unreadable": polars wraps the OS error). The store is a PostgreSQL
    database (its writes are the server's, not limited) seeded with every answer, so no model
    runs; a first run without the limit warms every cache the command writes."""
    import resource

    from erag_dagster.config.registry import load_registry
    from erag_dagster.core.hashing import sha256_text
    from erag_dagster.labels.keys import generation_key
    from erag_dagster.labels.store import open_store
    from erag_dagster.readers.factory import reader_from_config
    from erag_dagster.readers.passages import run_with_passages

    ds = load_dataset("sample?max_questions=1")
    query = ds.queries.get_column("query_id")[0]
    question = ds.queries.get_column("question")[0]
    docs = ds.corpus.get_column("doc_id").to_list()[:2]
    (tmp_path / "run.trec").write_text(
        "".join(f"{query} Q0 {d} {i} {3 - i}.0 t\n" for i, d in enumerate(docs, 1))
    )
    name, entry = next(iter(load_registry().readers.items()))
    reader = reader_from_config(name, dict(entry.config))
    url = postgres.create_database("full_output")
    store = open_store(url)
    store.register_reader(reader.fingerprint, name, reader.identity())
    run = pl.DataFrame({"query_id": [query] * 2, "doc_id": docs, "rank": [1, 2]})
    rows = [
        {"generation_key": generation_key(reader.fingerprint, query, sha256_text(question),
                                          sha256_text(passage)),
         "reader_fingerprint": reader.fingerprint, "query_id": query,
         "question_hash": sha256_text(question), "doc_id": doc,
         "text_hash": sha256_text(passage), "answer": "x", "gen_seconds": 0.0}
        for doc, passage in run_with_passages(run, ds.corpus).select("doc_id", "passage").rows()
    ]  # fmt: skip
    store.put_generations(pl.DataFrame(rows))
    store.close()
    argv = ["label", "--dataset", "sample?max_questions=1", "--run", "run.trec", "--store", url]
    env = {"ERAG_STORAGE": str(tmp_path / "storage")}
    warm = subprocess.run(
        [str(CONSOLE_SCRIPT), *argv, "--output", "warm.parquet"], cwd=tmp_path,
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip
    assert warm.returncode == 0 and "from store 2" in warm.stderr + warm.stdout, warm.stderr

    def limit() -> None:
        _lowered_file_size_limit()
        resource.setrlimit(resource.RLIMIT_FSIZE, (20, 20))

    done = subprocess.run(
        [str(CONSOLE_SCRIPT), *argv, "--output", "full.parquet"], cwd=tmp_path,
        preexec_fn=limit, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env},
    )  # fmt: skip
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert last.startswith("erag-dagster: error: --output full.parquet: cannot write the file")
    assert "File too large" in last
    assert not (tmp_path / "full.parquet").exists()
    assert not list(tmp_path.glob(".full.parquet.*"))


def test_progress_comes_while_one_step_is_still_running(tmp_path: Path) -> None:
    """One reader step of 1.5 s (a slow batch): the engine reports from its ticker while the
    step runs, not only after it (here every 0.3 s; 10 s by default), with the current count;
    the callback is never called by two threads at once."""
    import threading
    import time

    from erag_dagster.labels.cached import Subject, generate_stored
    from erag_dagster.labels.ticker import PROGRESS_EVERY_S

    assert PROGRESS_EVERY_S <= 10
    subjects = [Subject(f"q{i}", f"question {i}", f"d{i}", f"text {i}") for i in range(4)]
    calls: list[tuple[float, int, int]] = []
    inside = threading.Lock()
    began = time.monotonic()

    def progress(done: int, total: int) -> None:
        assert inside.acquire(blocking=False), "two progress calls at once"
        try:
            calls.append((time.monotonic() - began, done, total))
        finally:
            inside.release()

    def slow(part: list[int]) -> list[str]:
        time.sleep(1.5)
        return [subjects[i].question.upper() for i in part]

    store = LabelStore(tmp_path / "s.sqlite")
    done = generate_stored(subjects, slow, store, "7" * 64, "slow", {}, step=4,
                           progress=progress, progress_every_s=0.3)  # fmt: skip
    assert done.generated == 4
    during = [c for c in calls if c[0] < 1.45]
    assert len(during) >= 3 and all(d == 0 and t == 4 for _, d, t in during), calls
    assert calls[-1][1:] == (4, 4)


def test_label_run_and_the_api_pass_progress_on() -> None:
    """The API's progress callback reaches the engine: label(progress=...) and
    label_run(progress=...) are the same parameter, checked at the door."""
    import inspect

    import erag_dagster
    from erag_dagster.labels.labeller import label_run

    for function in (erag_dagster.label, erag_dagster.evaluate, label_run):
        assert "progress" in inspect.signature(function).parameters, function
    with pytest.raises(InputError, match="progress must be a callable taking"):
        erag_dagster.label("sample", "run.trec", progress=5)


# -- the Python API: arguments refused at the door, before any work or any file is created


def _i32_frame_without_run_columns():
    return pl.DataFrame({"query": ["q1"], "document": ["d1"]})


ISSUE_32_API_CASES = [
    ("label(5, run)", lambda e: e.label(5, "run.trec"), "dataset must be a dataset spec"),
    ("label(ds, 5)", lambda e: e.label("sample", 5),
     "run must be a run file path (TREC or .parquet)"),
    ("label: a frame without the run columns",
     lambda e: e.label("sample", _i32_frame_without_run_columns()),
     "run frame lacks column(s) query_id, doc_id, rank"),
    ("label: a float rank", lambda e: e.label("sample", pl.DataFrame(
        {"query_id": ["q"], "doc_id": ["d"], "rank": [1.5]})), "rank must be an integer column"),
    ("label: reader=[a, b]", lambda e: e.label("sample", "run.trec", reader=["a", "b"]),
     "label takes one reader"),
    ("label: k=0", lambda e: e.label("sample", "run.trec", k=0), "k is 0; it must be an integer"),
    ("label: k=True", lambda e: e.label("sample", "run.trec", k=True), "k is True; it must be"),
    ("label: log=5", lambda e: e.label("sample", "run.trec", log=5), "log must be a callable"),
    ("label: reader='nosuch' on a new store",
     lambda e: e.label("sample", "run.trec", reader="nosuch", store="NEW.sqlite"),
     "unknown reader 'nosuch'"),
    ("score({'q': ['a']})", lambda e: e.score({"q": ["a"]}, "P@1"),
     "label at rank 1 of query 'q' is 'a' (str), not a number"),
    ("score({'q': ['10']})", lambda e: e.score({"q": ["10"]}, "P@1"), "'10' (str), not a number"),
    ("score({'q': '10'})", lambda e: e.score({"q": "10"}, "P@1"),
     "labels of query 'q' must be a list in rank order"),
    ("score({'q': 5})", lambda e: e.score({"q": 5}, "P@1"), "must be a list in rank order"),
    ("score({'q': [True]})", lambda e: e.score({"q": [True]}, "P@1"),
     "booleans are 1/0 only with compat='erag'"),
    ("score({1: [1.0]})", lambda e: e.score({1: [1.0]}, "P@1"), "query id 1 (int) must be a"),
    ("score(5, ...)", lambda e: e.score(5, "P@1"), "labels must be a labels file path"),
    ("score: a boolean label column", lambda e: e.score(pl.DataFrame(
        {"query_id": ["q"], "rank": [1], "label": [True]}), "P@1"), "label is a boolean column"),
    ("score: metrics=[]", lambda e: e.score({"q": [1.0]}, []), "metrics is an empty list"),
    ("score: compat='pytrec'", lambda e: e.score({"q": [1.0]}, "P@1", compat="pytrec"),
     "compat must be None or 'erag'"),
    ("evaluate(seed='abc')", lambda e: e.evaluate(seed="abc"),
     "seed is 'abc'; it must be an integer in [0, 4294967295]"),
    ("evaluate(seed=-1)", lambda e: e.evaluate(seed=-1), "seed is -1; it must be an integer"),
    ("evaluate(seed=2**32)", lambda e: e.evaluate(seed=2**32), "seed is 4294967296; it must be"),
    ("evaluate(retrievers=[])", lambda e: e.evaluate(retrievers=[]),
     "retrievers is an empty list; leave it out for the default"),
    ("evaluate(retrievers='bm25')", lambda e: e.evaluate(retrievers="bm25"),
     "got the string 'bm25' (write ['bm25'] for one)"),
    ("evaluate(metrics=[])", lambda e: e.evaluate(metrics=[]), "metrics is an empty list"),
    ("evaluate(metrics=' , ')", lambda e: e.evaluate(metrics=" , "), "metrics is empty"),
    ("evaluate(reader=[])", lambda e: e.evaluate(reader=[]), "reader is an empty list"),
    ("evaluate(reader=5)", lambda e: e.evaluate(reader=5), "reader must be a list of names"),
    ("evaluate(n_resamples=0)", lambda e: e.evaluate(n_resamples=0),
     "n_resamples is 0; it must be an integer >= 1"),
    ("evaluate(k='10')", lambda e: e.evaluate(k="10"), "k is '10'; it must be an integer >= 1"),
    ("evaluate(dataset=5)", lambda e: e.evaluate(dataset=5), "dataset must be a dataset spec"),
    ("evaluate(store=5)", lambda e: e.evaluate(store=5), "store must be a non-empty path"),
    ("evaluate(reader='nosuch')", lambda e: e.evaluate(reader="nosuch", store="NEW.sqlite"),
     "unknown reader 'nosuch'"),
    ("GateRule(margin='0.1')", lambda e: __import__("erag_dagster.gate.verdict", fromlist=["x"])
     .GateRule(margin="0.1"), "margin must be a number"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "part"), [c[1:] for c in ISSUE_32_API_CASES], ids=[c[0] for c in ISSUE_32_API_CASES]
)
def test_issue_32_api_refuses_at_the_door(bad: Path, call, part) -> None:
    """One InputError naming the argument; nothing created (no store, no storage folder)."""
    import erag_dagster

    gc.collect()  # the bad fixture's store connection closed first (its WAL folded in)
    before = _snapshot(bad)
    with pytest.raises(InputError) as caught:
        call(erag_dagster)
    assert part in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)
    assert _snapshot(bad) == before
    assert not (bad / "NEW.sqlite").exists() and not (bad / "storage").exists()


def test_seed_none_is_the_registrys_fixed_seed() -> None:
    """``seed=None`` is the registry's seed (0 unless set), never a fresh one: CIs repeat."""
    from erag_dagster.api import evaluation_config, load_registry_file

    registry = load_registry_file(None)
    first = evaluation_config(registry, "evaluate", seed=None)
    assert first.seed == registry.evaluation.seed == evaluation_config(registry, "x").seed


# === issue 45: hostile inputs, round 4 — nothing dropped without a word ======================
# Each case goes through a shared rule, so every door that reaches it says the same line: the
# gate refuses a candidate query it would not score (unless --drop-unknown-queries, which names
# them); one rule for empty runs (TREC, parquet, frame); a JSON value of the wrong type where a
# string is documented (records.check_value), NaN/Infinity in any JSON (the input rule); a bad
# reader, store or max_new_tokens refused before a store is created or a reader built; numbers
# printed as given; the settings of `run` refused before the Dagster instance warning.


def _recompute(baseline: dict) -> dict:
    from erag_dagster.gate.baseline_file import baseline_digest

    baseline["digest"] = baseline_digest(baseline["identity"], baseline["retriever"],
                                         baseline["query_ids"], baseline["labels"])  # fmt: skip
    return baseline


@pytest.fixture()
def round4(gating: Path) -> Path:
    """The gate's files plus round 4's hostile ones, in ``gating`` (the working directory)."""
    lines = (gating / "cand.trec").read_text().splitlines(keepends=True)
    first_query = lines[0].split()[0]
    (gating / "typo.trec").write_text("".join(
        line.replace(first_query, "zz-typo", 1) if i == 0 else line
        for i, line in enumerate(lines)))  # fmt: skip
    (gating / "zwsp.trec").write_text("".join(
        line.replace(first_query, first_query + "\u200b", 1) for line in lines))  # fmt: skip
    (gating / "alien.trec").write_text("".join(
        f"other-{i} Q0 {line.split()[2]} 1 1.0 t\n" for i, line in enumerate(lines)))  # fmt: skip
    run = pl.DataFrame([line.split()[:3:2] for line in lines], schema=["query_id", "doc_id"],
                       orient="row").with_columns(score=pl.lit(1.0))  # fmt: skip
    run.with_columns(pl.when(pl.int_range(pl.len()) == 2).then(pl.lit("q with space\n### heading"))
                     .otherwise("query_id").alias("query_id")).write_parquet(
        gating / "heading.parquet")  # fmt: skip
    run.head(0).write_parquet(gating / "empty.parquet")
    good = json.loads((gating / "gate.json").read_text())
    metric = json.loads(json.dumps(good))
    metric["identity"]["metrics"] = ["RR", "nDGC@3", "Success@3"]
    (gating / "metricname.json").write_text(json.dumps(_recompute(metric)))
    (gating / "extrafield.json").write_text(json.dumps({**good, "note": "trust me"}))
    (gating / "nanlabel.json").write_text(
        json.dumps(good, indent=1).replace('"label": 1.0', '"label": NaN', 1)
    )
    (gating / "nanlabels.json").write_text('{"q1": [1.0,\n NaN],\n "q2": [0.0]}')
    pl.DataFrame({"query_id": ["q1", "q1"], "rank": [1, 2], "label": [1.0, float("nan")]}
                 ).write_parquet(gating / "nanlabels.parquet")  # fmt: skip
    (gating / "sample.trec").write_text("".join(lines[:3]))
    (gating / "bigtok.yaml").write_text("max_new_tokens: 10000000000000\n")
    (gating / "zerotok.yaml").write_text("max_new_tokens: 0\n")
    (gating / "nomodel.yaml").write_text("model: /nonexistent/model\n")
    (gating / "bigreader.yaml").write_text(
        "retrievers:\n  bm25:\n    kind: bm25\nreaders:\n  r:\n    max_new_tokens: 10000000000000\n"
    )
    (gating / "a-folder").mkdir()
    corpus = b'{"_id": "d1", "title": "", "text": "alpha beta"}\n'
    _beir(gating / "text5", b"q1\td1\t1\nq2\td2\t1\n")
    (gating / "text5" / "corpus.jsonl").write_bytes(corpus + b'{"_id": "d2", "text": 5}\n')
    _beir(gating / "titlelist", b"q1\td1\t1\nq2\td2\t1\n")
    (gating / "titlelist" / "corpus.jsonl").write_bytes(
        corpus + b'{"_id": "d2", "title": ["a"], "text": "gamma"}\n'
    )
    _beir(gating / "qnum", b"q1\td1\t1\nq2\td2\t1\n",
          b'{"_id": "q1", "text": "alpha"}\n{"_id": "q2", "text": 42}\n')  # fmt: skip
    _beir(gating / "metaans", b"q1\td1\t1\nq2\td2\t1\n",
          b'{"_id": "q1", "text": "alpha", "metadata": {"answers": ["x"]}}\n'
          b'{"_id": "q2", "text": "gamma", "metadata": {"answers": [1969]}}\n')  # fmt: skip
    _beir(gating / "spaced", b"q1\td 1\t1\nq2\td2\t1\n")
    (gating / "spaced" / "corpus.jsonl").write_bytes(
        b'{"_id": "d 1", "text": "alpha beta"}\n{"_id": "d2", "text": "gamma delta"}\n'
    )
    tables = gating / "ans5"
    tables.mkdir()
    (tables / "corpus.jsonl").write_text('{"doc_id": "d1", "text": "alpha"}\n')
    (tables / "queries.jsonl").write_text(
        '{"query_id": "q1", "question": "alpha", "answers": ["x"]}\n'
        '{"query_id": "q2", "question": "beta", "answers": [5]}\n'
    )
    (tables / "qrels.jsonl").write_text('{"query_id": "q1", "doc_id": "d1"}\n')
    kilt = gating / "kilt.jsonl"
    kilt.write_text('{"id": "k1", "input": "who?", "output": [{"answer": "a", "provenance": '
                    '[{"wikipedia_id": "1", "title": "T"}]}]}\n'
                    '{"id": "k2", "input": "when?", "output": [{"answer": 1969}]}\n')  # fmt: skip
    (gating / "theirs.yaml").write_text(
        "retrievers:\n  theirs:\n    kind: run_file\n    path: empty.parquet\n"
        "readers:\n  r:\n    model: m\n")  # fmt: skip
    gc.collect()
    return gating


R4_LABEL = ["label", "--dataset", GATE_SPEC, "--run", "sample.trec", "--output", "l.parquet",
            "--store", "new.sqlite"]  # fmt: skip
DROP = "--drop-unknown-queries"


def _cand(name: str) -> list[str]:
    return [*GATE, "--baseline", "base.trec", "--candidate", name]


# (case, argv, environment, exit status, substrings of the one line on stderr)
ISSUE_45_CASES = [
    # the gate names what it does not score; unknown ids refused unless --drop-unknown-queries
    ("gate: a typo query id", _cand("typo.trec"), {}, 2,
     ["typo.trec:1: query_id 'zz-typo' is not in the dataset", DROP]),
    ("gate: a look-alike id with U+200B", _cand("zwsp.trec"), {}, 2,
     ["zwsp.trec:1: query_id '", "\\u200b' is not in the dataset", DROP]),
    ("gate: an id with a space and a newline (parquet)", _cand("heading.parquet"), {}, 2,
     ["heading.parquet (row 3): query_id 'q with space\\n### heading'", DROP]),
    ("gate: no query of the run is one of the dataset's", [*_cand("alien.trec"), DROP], {}, 2,
     ["alien.trec: none of its 18 queries is a query of the dataset", "'other-0'"]),
    ("gate: baseline with an unknown metric name", _against("metricname.json"), {}, 2,
     ["metricname.json: identity.metrics: unknown metric name 'nDGC@3'"]),
    ("gate: baseline with a field added", _against("extrafield.json"), {}, 2,
     ["extrafield.json: unknown field(s) 'note'"]),
    ("gate: baseline with a NaN label", _against("nanlabel.json"), {}, 2,
     ["nanlabel.json:", "NaN is not a finite number"]),
    # one rule for empty runs, whatever the format
    ("empty parquet candidate", _cand("empty.parquet"), {}, 2,
     ["empty.parquet: the run file is empty"]),
    ("empty TREC run to label", [*R4_LABEL[:4], "empty.trec", *R4_LABEL[5:]], {}, 2,
     ["empty.trec: the run file is empty"]),
    ("empty parquet run to label", [*R4_LABEL[:4], "empty.parquet", *R4_LABEL[5:]], {}, 2,
     ["empty.parquet: the run file is empty"]),
    ("empty registry run_file", ["retrieve", "--dataset", GATE_SPEC, "--retriever", "theirs",
     "--registry", "theirs.yaml", "--output", "o.trec"], {}, 2,
     ["empty.parquet: the run file is empty"]),
    # JSON values of the wrong type where a string is documented (every record format)
    ('BEIR corpus "text": 5', ["check-dataset", "beir:text5"], {}, 2,
     ["text5/corpus.jsonl:2: field 'text' is a number (5), not a string; write it in quotes"]),
    ('BEIR corpus "title": ["a"]', ["check-dataset", "beir:titlelist"], {}, 2,
     ["titlelist/corpus.jsonl:2: field 'title' is a list ([\"a\"]), not a string"]),
    ('BEIR query "text": 42', ["check-dataset", "beir:qnum"], {}, 2,
     ["qnum/queries.jsonl:2: field 'text' is a number (42), not a string"]),
    ('BEIR metadata "answers": [1969]', ["check-dataset", "beir:metaans"], {}, 2,
     ["metaans/queries.jsonl:2: field 'answers' holds a number (1969) at position 0"]),
    ('jsonl table "answers": [5]', ["check-dataset", "jsonl:ans5"], {}, 2,
     ["ans5/queries.jsonl:2: field 'answers' holds a number (5) at position 0, not a string"]),
    ('KILT "answer": 1969', ["check-dataset", "kilt:kilt.jsonl"], {}, 2,
     ["kilt.jsonl:2: field 'answer' is a number (1969), not a string; write it in quotes"]),
    # labels files: NaN named where it is
    ("labels JSON with NaN", ["score", "--labels", "nanlabels.json", "--metrics", "P@1"], {}, 2,
     ["nanlabels.json:2: NaN is not a finite number"]),
    ("labels parquet with NaN", ["score", "--labels", "nanlabels.parquet", "--metrics", "P@1"],
     {}, 2, ["nanlabels.parquet (row 2): query 'q1' rank 2: label is NaN"]),
    # label: a bad reader, run or store refused before a store is created or a reader built
    ("label: max_new_tokens 10000000000000", [*R4_LABEL, "--reader", "bigtok.yaml"], {}, 2,
     ["bigtok.yaml: reader 'bigtok': max_new_tokens 10000000000000 is over 32768"]),
    ("label: max_new_tokens 0", [*R4_LABEL, "--reader", "zerotok.yaml"], {}, 2,
     ["zerotok.yaml: reader 'zerotok': max_new_tokens must be an integer >= 1, got 0"]),
    ("label: a reader whose model does not exist", [*R4_LABEL, "--reader", "nomodel.yaml"], {},
     2, ["reader 'nomodel': model path '/nonexistent/model' does not exist"]),
    ("label: an unknown query in the run file", [*R4_LABEL[:4], "typo.trec", *R4_LABEL[5:]],
     {}, 2, ["typo.trec:1: query_id 'zz-typo' is not in the dataset"]),
    ("label: a run of queries without gold answers", ["label", "--dataset", "beir:good",
     "--run", "run.trec", "--output", "l.parquet", "--store", "new.sqlite"], {}, 2,
     ["query 'q1' has no gold answers"]),
    ("label: --store under a file", [*R4_LABEL[:-1], "run.trec/labels.sqlite"], {}, 2,
     ["run.trec/labels.sqlite: cannot be a label store: run.trec is a file, not a folder"]),
    ("gate: --store a folder, before any retrieval", [*GATE, "--baseline", "bm25",
     "--candidate", "bm25", "--store", "a-folder"], {}, 2, ["a-folder: is a folder"]),
    ("a registry reader with max_new_tokens 10000000000000 (any door: the gate)",
     [*_cand("cand.trec"), "--registry", "bigreader.yaml"], {}, 2,
     ["bigreader.yaml:5: reader 'r': max_new_tokens 10000000000000 is over 32768"]),
    ("... (any door: retrieve)", ["retrieve", "--dataset", GATE_SPEC, "--retriever", "bm25",
     "--registry", "bigreader.yaml", "--output", "o.trec"], {}, 2,
     ["bigreader.yaml:5: reader 'r': max_new_tokens"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "env", "code", "parts"), [c[1:] for c in ISSUE_45_CASES],
    ids=[c[0] for c in ISSUE_45_CASES],
)  # fmt: skip
def test_issue_45_case_is_one_line_and_changes_nothing(
    round4, monkeypatch, capsys, argv, env, code, parts
) -> None:
    """Exit status, ONE line naming what and where, nothing on stdout, every file byte-identical
    after, no label store created."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = _snapshot(round4)
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == code, err
    assert out == ""
    assert err.startswith("erag-dagster: error: ") and err.count("\n") == 1, err
    for part in parts:
        assert part in err, (part, err)
    assert _snapshot(round4) == before
    assert not (round4 / "new.sqlite").exists() and not (round4 / "l.parquet").exists()


def test_issue_45_margin_is_printed_as_given(round4, capsys) -> None:
    """``--margin 0.9999999`` is written as given, never ``:g``'s ``margin 1`` (two stored
    baselines: no reader call)."""
    status = main([*GATE, "--baseline", "gate.json", "--candidate", "gate.json",
                   "--margin", "0.9999999", "--alpha", "0.0500001"])  # fmt: skip
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "margin 0.9999999, alpha 0.0500001 Holm-corrected" in out, out
    assert "margin 1," not in out


def test_issue_45_check_dataset_says_what_trec_cannot_hold(round4, capsys) -> None:
    """A doc id with a space: usable (accepted), and the usable-for line says not with TREC
    run files — the rule `retrieve` refuses by."""
    assert main(["check-dataset", "beir:spaced"]) == 0
    usable = capsys.readouterr().out.strip().splitlines()[-1]
    assert usable.startswith("usable for: eRAG") is False  # BEIR without answers: judgments
    assert "NOT with TREC run files or erag-dagster retrieve: document id 'd 1'" in usable
    assert main(["retrieve", "--dataset", "beir:spaced", "--retriever", "bm25", "--output",
                 "o.trec"]) == 2  # fmt: skip
    assert "document id 'd 1' is empty or holds whitespace" in capsys.readouterr().err


def test_issue_45_run_file_queries_outside_a_subset_are_named(round4, capsys) -> None:
    """A registry run file over more questions than the spec keeps: accepted, and the queries
    left out are named on stderr (they were counted only in metadata before)."""
    (round4 / "wide.yaml").write_text(
        "retrievers:\n  theirs:\n    kind: run_file\n    path: base.trec\n"
        "readers:\n  r:\n    model: m\n")  # fmt: skip
    spec = "sample?max_questions=4"
    assert main(["retrieve", "--dataset", spec, "--retriever", "theirs", "--registry",
                 "wide.yaml", "--output", "wide.trec"]) == 0  # fmt: skip
    err = capsys.readouterr().err

    def queries(name: str) -> set[str]:
        return {line.split()[0] for line in (round4 / name).read_text().splitlines()}

    left_out = sorted(queries("base.trec") - queries("wide.trec"))
    assert len(left_out) == 2
    assert "2 queries of the run are not among the dataset's questions and were left out" in err
    assert all(repr(q) in err for q in left_out), err


def test_issue_45_run_refuses_before_the_instance_warning(tmp_path: Path) -> None:
    """``erag-dagster run --metric nosuch`` with a DAGSTER_HOME lacking dagster.yaml: the one
    refusal line, no instance warning before it."""
    home = tmp_path / "home"
    home.mkdir()
    done = _cli(["run", "--metric", "nosuch"], tmp_path, {"DAGSTER_HOME": str(home)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("erag-dagster: error: ") and "'nosuch'" in done.stderr
    assert "dagster.yaml" not in done.stderr


def _r4_frame(**columns) -> pl.DataFrame:
    return pl.DataFrame(columns)


def _r4_pandas(**columns):
    import pandas as pd

    return pd.DataFrame(columns)


ISSUE_45_API_CASES = [
    ("label: a frame with a rank twice", lambda e: e.label(GATE_SPEC, _r4_frame(
        query_id=["a", "a"], doc_id=["x", "y"], rank=[1, 1])),
     "run frame (row 2): rank 1 appears twice for query 'a'"),
    ("label: a frame with a NaN score", lambda e: e.label(GATE_SPEC, _r4_frame(
        query_id=["a", "a"], doc_id=["x", "y"], rank=[1, 2], score=[1.0, float("nan")])),
     "run frame (row 2): score nan of query 'a', doc 'y' is not finite"),
    ("label: a frame with a document twice", lambda e: e.label(GATE_SPEC, _r4_frame(
        query_id=["a", "a"], doc_id=["x", "x"], rank=[1, 2])),
     "run frame (row 2): document 'x' appears twice for query 'a'"),
    ("label: a frame with rank 0", lambda e: e.label(GATE_SPEC, _r4_frame(
        query_id=["a"], doc_id=["x"], rank=[0])), "rank 0 of query 'a' is below 1"),
    ("label: an empty frame", lambda e: e.label(GATE_SPEC, pl.DataFrame(
        schema={"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64})),
     "run frame: the run frame is empty"),
    ("label: a pandas frame is read (then its unknown query named)", lambda e: e.label(
        GATE_SPEC, _r4_pandas(query_id=["a"], doc_id=["x"], rank=[1])),
     "run frame (row 1): query_id 'a' is not in the dataset"),
    ("label: max_new_tokens on a new store", lambda e: e.label(
        GATE_SPEC, "sample.trec", reader="bigtok.yaml", store="NEW.sqlite"),
     "max_new_tokens 10000000000000 is over 32768"),
    ("label: a missing model on a new store", lambda e: e.label(
        GATE_SPEC, "sample.trec", reader="nomodel.yaml", store="NEW.sqlite"),
     "model path '/nonexistent/model' does not exist"),
    ("label: store under a file", lambda e: e.label(GATE_SPEC, "sample.trec",
     store="run.trec/NEW.sqlite"), "run.trec is a file, not a folder"),
    ("evaluate(store=a folder)", lambda e: e.evaluate(store="a-folder"),
     "a-folder: is a folder, not a regular file"),
    ("score: a pandas frame with a NaN label", lambda e: e.score(_r4_pandas(
        query_id=["q"], rank=[1], label=[float("nan")]), "P@1"),
     "labels frame (row 1): query 'q' rank 1: label is missing or not a number"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "part"), [c[1:] for c in ISSUE_45_API_CASES], ids=[c[0] for c in ISSUE_45_API_CASES]
)
def test_issue_45_api_refuses_at_the_door(round4: Path, call, part) -> None:
    """One InputError line; no store or storage folder created, every file as it was; well
    under the seconds a reader build takes (nothing imported torch for it)."""
    import time

    import erag_dagster

    before = _snapshot(round4)
    began = time.monotonic()
    with pytest.raises(InputError) as caught:
        call(erag_dagster)
    assert part in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)
    assert time.monotonic() - began < 10
    assert _snapshot(round4) == before  # the storage folder too (the fixture made it)
    assert not (round4 / "NEW.sqlite").exists()


def test_issue_45_pandas_frames_score_as_polars(tmp_path: Path) -> None:
    """A pandas labels frame is taken (the component takes pandas): the same scores as polars."""
    import erag_dagster

    data = {"query_id": ["a", "a", "b"], "rank": [1, 2, 1], "label": [0.0, 1.0, 1.0]}
    from_pandas = erag_dagster.score(_r4_pandas(**data), ["RR", "P@1"])
    from_polars = erag_dagster.score(pl.DataFrame(data), ["RR", "P@1"])
    assert from_pandas.aggregate.equals(from_polars.aggregate)
    assert from_polars.aggregate.get_column("value").to_list() == [0.75, 0.5]


def test_issue_45_forged_baseline_with_a_recomputed_digest_is_the_documented_limit(
    round4,
) -> None:
    """Ranks permuted and the digest recomputed: the file reads (the digest is no signature;
    docs/gate.md says how to keep a baseline a pull request cannot write). Its answer keys
    still hold, since a key names (question, document), not a rank."""
    from erag_dagster.gate.baseline_file import read_baseline

    forged = json.loads((round4 / "gate.json").read_text())
    query = forged["labels"][0]["query_id"]
    ranks = [r for r in forged["labels"] if r["query_id"] == query]
    ranks[0]["rank"], ranks[-1]["rank"] = ranks[-1]["rank"], ranks[0]["rank"]
    (round4 / "permuted.json").write_text(json.dumps(_recompute(forged)))
    assert read_baseline(round4 / "permuted.json")["labels"][0]["rank"] == len(ranks)


def test_issue_45_an_assets_run_frame_follows_the_same_rules() -> None:
    """``kind: asset`` (the component's door) reads a run frame by the same rules: a rank twice
    (rank-only frames: its ranks decide), no row, a pandas frame taken."""
    from erag_dagster.retrieval.run_file import run_from_value

    with pytest.raises(InputError, match=r"asset a/run \(row 2\): rank 1 appears twice"):
        run_from_value(
            _r4_frame(query_id=["q", "q"], doc_id=["x", "y"], rank=[1, 1]), "asset a/run"
        )
    with pytest.raises(InputError, match="asset a/run: the run frame is empty"):
        run_from_value(pl.DataFrame(schema={"query_id": pl.String, "doc_id": pl.String,
                                            "score": pl.Float64}), "asset a/run")  # fmt: skip
    taken = run_from_value(_r4_pandas(query_id=["q", "q"], doc_id=["x", "y"], score=[0.1, 0.9]),
                           "asset a/run")  # fmt: skip
    assert taken.get_column("doc_id").to_list() == ["y", "x"]
