"""Dataset loaders: real shared data for the happy paths, small bad files for every error."""

from __future__ import annotations

import gzip
import json
import re
import time
import zipfile
from pathlib import Path

import polars as pl
import pytest

from erag_dagster.core.errors import InputError
from erag_dagster.data.loaders import (
    KNOWN_KINDS,
    SAMPLE_FILE,
    DatasetSpec,
    load_dataset,
    parse_spec,
)
from erag_dagster.data.schema import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
from tests.conftest import load_script

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO_ROOT / "erag_dagster" / "data" / "sample"


@pytest.fixture(scope="module")
def squad_zip(shared_data: Path) -> Path:
    return shared_data / "squad-v1.1-dev" / "dev-v1.1.json.zip"


@pytest.fixture(scope="module")
def squad_dev(squad_zip: Path):
    return load_dataset(f"squad:{squad_zip}")


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_beir(root: Path, qrels: str, corpus: list[dict] | None = None) -> Path:
    """A tiny BEIR folder: docs d1, d2; queries q1, q2 (q2 carries answers in metadata)."""
    write_jsonl(
        root / "corpus.jsonl",
        corpus
        or [
            {"_id": "d1", "title": "One", "text": "first doc"},
            {"_id": "d2", "title": "Two", "text": "second doc"},
        ],
    )
    write_jsonl(
        root / "queries.jsonl",
        [
            {"_id": "q1", "text": "what is one"},
            {"_id": "q2", "text": "what is two", "metadata": {"answers": ["two", "2"]}},
            {"_id": "q3", "text": "unjudged"},
        ],
    )
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    return root


def error_of(spec: str) -> str:
    with pytest.raises(InputError) as info:
        load_dataset(spec)
    message = str(info.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- spec grammar


def test_parse_spec_splits_kind_path_and_options() -> None:
    parsed = parse_spec("beir:/data/scifact?split=dev&max_questions=20")
    assert parsed == DatasetSpec(
        "beir", Path("/data/scifact"), {"split": "dev", "max_questions": "20"}
    )
    kind, path, options = parse_spec("sample?passages=100")  # unpacks as a tuple
    assert (kind, path, options) == ("sample", None, {"passages": "100"})
    assert parse_spec("jsonl:d?doc_id=_id&question=query").options == {
        "doc_id": "_id",
        "question": "query",
    }
    assert parse_spec("KILT:a%20b.jsonl?corpus=ks.jsonl").path == Path("a b.jsonl")
    assert set(KNOWN_KINDS) == {"sample", "squad", "beir", "kilt", "jsonl", "parquet"}


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("nq:/x", "unknown dataset kind 'nq'"),
        ("/some/file.json", "known kinds: sample, squad:PATH, beir:DIR, kilt:FILE"),
        ("squad", "'squad' needs a path"),
        ("sample:/x", "'sample' takes no path"),
        ("squad:x?max_questions=0", "max_questions must be a positive integer"),
        ("squad:x?passages=ten", "passages must be a positive integer"),
        ("squad:x?split=dev", "unknown option 'split' for 'squad'"),
        ("beir:x?split", "option 'split' is not key=value"),
        ("beir:x?split=a&split=b", "option 'split' given twice"),
        ("jsonl:x?doc=_id", "unknown option 'doc' for 'jsonl'"),
    ],
)
def test_parse_spec_rejects(spec: str, needle: str) -> None:
    with pytest.raises(InputError, match=re.escape(needle)):
        parse_spec(spec)


def test_unknown_kind_lists_every_known_kind() -> None:
    message = error_of("hotpot:/tmp/x")
    for kind in KNOWN_KINDS:
        assert kind in message


def test_nonexistent_path_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    assert f"no such file or directory: {missing}" in error_of(f"squad:{missing}")
    assert str(tmp_path / "ks.jsonl") in error_of(
        f"kilt:{write_jsonl(tmp_path / 'k.jsonl', [])}?corpus={tmp_path / 'ks.jsonl'}"
    )


# --------------------------------------------------------------------------- SQuAD


def test_squad_dev_counts_and_ids(squad_dev) -> None:
    corpus, queries, qrels = squad_dev.corpus, squad_dev.queries, squad_dev.qrels
    assert (corpus.height, queries.height, qrels.height) == (2067, 10570, 10570)
    assert corpus.schema == pl.Schema(CORPUS_SCHEMA)
    assert queries.schema == pl.Schema(QUERIES_SCHEMA)
    assert qrels.schema == pl.Schema(QRELS_SCHEMA)
    first = corpus.row(0, named=True)
    assert first["doc_id"] == "Super_Bowl_50_0"
    assert first["title"] == "Super Bowl 50"
    assert first["text"].startswith("Super Bowl 50 was an American football game")
    assert (
        corpus.filter(pl.col("doc_id") == "Fresno,_California_0")["title"][0]
        == "Fresno, California"
    )
    assert corpus["doc_id"][-1] == "Force_43"  # the last article has 44 paragraphs
    # three identical gold answers collapse to one; distinct ones keep their order
    q = queries.filter(pl.col("query_id") == "56be4db0acb8001400a502ec").row(0, named=True)
    assert q["answers"] == ["Denver Broncos"]
    assert q["question"] == "Which NFL team represented the AFC at Super Bowl 50?"
    assert qrels.row(0) == ("56be4db0acb8001400a502ec", "Super_Bowl_50_0", 1)
    assert queries["question"].str.strip_chars().equals(queries["question"])
    assert queries["answers"].list.len().min() >= 1
    assert set(qrels["relevance"].unique()) == {1}


def test_squad_plain_and_gz_json_equal_the_zip(squad_zip: Path, squad_dev, tmp_path: Path) -> None:
    raw = zipfile.ZipFile(squad_zip).read("dev-v1.1.json")
    (tmp_path / "dev.json").write_bytes(raw)
    (tmp_path / "dev.json.gz").write_bytes(gzip.compress(raw))
    for name in ("dev.json", "dev.json.gz"):
        other = load_dataset(f"squad:{tmp_path / name}")
        assert other.corpus.equals(squad_dev.corpus)
        assert other.queries.equals(squad_dev.queries)
        assert other.qrels.equals(squad_dev.qrels)


def test_max_questions_keeps_first_queries_and_whole_corpus(squad_zip: Path, squad_dev) -> None:
    spec = f"squad:{squad_zip}?max_questions=200"
    small = load_dataset(spec)
    assert small.spec == spec
    assert small.queries.equals(squad_dev.queries.head(200))
    assert small.qrels.equals(squad_dev.qrels.head(200))
    assert small.corpus.height == 2067


def squad_file(tmp_path: Path, qas: list[dict], name: str = "bad.json") -> Path:
    data = {
        "version": "1.1",
        "data": [{"title": "T_x", "paragraphs": [{"context": "c", "qas": qas}]}],
    }
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("answers", [[], [{"text": "", "answer_start": 0}], None])
def test_squad_question_without_answers_names_file_and_id(tmp_path: Path, answers) -> None:
    qa = {"id": "qz", "question": "why?", "answers": answers}
    path = squad_file(tmp_path, [{"id": "ok", "question": "a?", "answers": [{"text": "a"}]}, qa])
    message = error_of(f"squad:{path}")
    assert str(path) in message and "'qz'" in message and "no gold answers" in message


def test_squad_duplicate_question_id(tmp_path: Path) -> None:
    qa = {"id": "q1", "question": "a?", "answers": [{"text": "a"}]}
    path = squad_file(tmp_path, [qa, qa])
    assert error_of(f"squad:{path}") == f"{path}: question 'q1' appears twice"


def test_squad_malformed_json_names_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"version": "1.1",\n "data": [\n  {"title": oops}\n ]}\n', encoding="utf-8")
    assert error_of(f"squad:{path}").startswith(f"{path}:3: malformed JSON")


def test_squad_zip_member_error_names_member(tmp_path: Path) -> None:
    path = tmp_path / "broken.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("inner.json", '{"data": [}')
    assert error_of(f"squad:{path}").startswith(f"{path}/inner.json:1: malformed JSON")


def test_squad_not_squad_structure(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"rows": []}', encoding="utf-8")
    assert "no top-level 'data' list" in error_of(f"squad:{path}")


def test_squad_empty_corpus(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text('{"version": "1.1", "data": []}', encoding="utf-8")
    assert error_of(f"squad:{path}") == f"{path}: the corpus is empty (no paragraphs)"


# --------------------------------------------------------------------------- embedded sample


def test_sample_numbers_and_files() -> None:
    sample = load_dataset("sample")
    assert (sample.corpus.height, sample.queries.height, sample.qrels.height) == (364, 120, 120)
    assert sample.spec == "sample"
    # questions spread over all eight articles
    articles = sample.qrels.select(pl.col("doc_id").str.replace(r"_\d+$", "")).unique()
    assert articles.height == 8
    size = (SAMPLE_DIR / SAMPLE_FILE).stat().st_size
    assert size < 400_000
    licence = (SAMPLE_DIR / "LICENSE").read_text(encoding="utf-8")
    assert "Attribution-ShareAlike 4.0 International Public License" in licence
    attribution = (SAMPLE_DIR / "ATTRIBUTION.md").read_text(encoding="utf-8")
    assert "SQuAD" in attribution and "Rajpurkar" in attribution and "CC BY-SA 4.0" in attribution
    assert "364 paragraphs, 120 questions" in attribution


def test_sample_ids_and_texts_match_the_full_dev_file(squad_dev) -> None:
    sample = load_dataset("sample?max_questions=120")
    joined = sample.corpus.join(squad_dev.corpus, on="doc_id", how="left", suffix="_dev")
    assert joined["text_dev"].null_count() == 0
    assert joined["text"].equals(joined["text_dev"], check_names=False)
    assert joined["title"].equals(joined["title_dev"], check_names=False)
    q = sample.queries.join(squad_dev.queries, on="query_id", how="left", suffix="_dev")
    assert q["question"].equals(q["question_dev"], check_names=False)
    assert q["answers"].equals(q["answers_dev"], check_names=False)
    assert sample.qrels.join(squad_dev.qrels, on=["query_id", "doc_id"], how="anti").is_empty()


def test_make_sample_is_deterministic(squad_zip: Path, tmp_path: Path) -> None:
    stats = load_script("make_sample").make_sample(squad_zip, tmp_path)
    assert stats == {
        "articles": 8,
        "paragraphs": 364,
        "questions": 120,
        "bytes": (SAMPLE_DIR / SAMPLE_FILE).stat().st_size,
    }
    for name in (SAMPLE_FILE, "ATTRIBUTION.md"):
        assert (tmp_path / name).read_bytes() == (SAMPLE_DIR / name).read_bytes()


# --------------------------------------------------------------------------- BEIR


def test_beir_scifact(shared_data: Path) -> None:
    started = time.perf_counter()
    data = load_dataset(f"beir:{shared_data / 'scifact' / 'beir'}")
    elapsed = time.perf_counter() - started
    assert (data.corpus.height, data.queries.height, data.qrels.height) == (5183, 300, 339)
    assert data.corpus["doc_id"][0] == "4983"
    assert data.queries.row(0) == ("1", "0-dimensional biomaterials show inductive properties.", [])
    assert data.qrels.row(0) == ("1", "31715818", 1)
    assert elapsed < 2.0, f"loading SciFact took {elapsed:.2f}s"


def test_beir_without_header_keeps_every_judgment(shared_data: Path) -> None:
    folder = shared_data / "beir-msmarco-dl19-subset"
    data = load_dataset(f"beir:{folder}")
    assert data.qrels.height == 4102
    # the file's first line is a judgment, not a header: BEIR's loader would lose it
    assert data.qrels.row(0) == ("19335", "1720389", 1)
    assert data.queries.height == 43  # 50 in queries.jsonl, 7 without judgments
    counts = dict(data.qrels.group_by("relevance").len().iter_rows())
    assert counts == {1: 1601, 2: 1804, 3: 697}
    assert data.corpus.height == 5000


def test_beir_header_detection_and_metadata_answers(tmp_path: Path) -> None:
    for qrels in ("q1\td1\t1\nq2\td2\t2\n", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n"):
        data = load_dataset(f"beir:{write_beir(tmp_path / str(len(qrels)), qrels)}")
        assert data.qrels.rows() == [("q1", "d1", 1), ("q2", "d2", 2)]
        assert data.queries.rows() == [
            ("q1", "what is one", []),
            ("q2", "what is two", ["two", "2"]),
        ]


def test_beir_split_option_and_missing_split(tmp_path: Path) -> None:
    root = write_beir(tmp_path, "q1\td1\t1\n")
    (root / "qrels" / "dev.tsv").write_text("q2\td2\t1\n", encoding="utf-8")
    assert load_dataset(f"beir:{root}?split=dev").qrels.rows() == [("q2", "d2", 1)]
    message = error_of(f"beir:{root}?split=train")
    assert "train.tsv: no such file; splits available: dev, test" in message


@pytest.mark.parametrize(
    ("qrels", "line", "needle"),
    [
        ("query-id\tcorpus-id\tscore\nq1\td1\n", 2, "expected 3 tab-separated fields"),
        ("q1\td1\t1\nq2\td2\tyes\n", 2, "score 'yes' is not an integer"),
        ("q1\td1\t1\n\nq2\td2\t1\tx\n", 3, "found 4"),
        ("q1\td1\t1\nq2\td9\t1\n", 2, "judgment names doc_id 'd9', which is not in"),
        ("q1\td1\t1\nq7\td2\t1\n", 2, "judgment names query_id 'q7', which is not in"),
        ("q1\td1\t1\nq1\td1\t0\n", 2, "second judgment for query 'q1' and document 'd1'"),
    ],
)
def test_beir_bad_qrels_line(tmp_path: Path, qrels: str, line: int, needle: str) -> None:
    root = write_beir(tmp_path, qrels)
    message = error_of(f"beir:{root}")
    assert message.startswith(f"{root / 'qrels' / 'test.tsv'}:{line}: ")
    assert needle in message


def test_beir_malformed_corpus_line(tmp_path: Path) -> None:
    root = write_beir(tmp_path, "q1\td1\t1\n")
    with open(root / "corpus.jsonl", "a", encoding="utf-8") as handle:
        handle.write('\n{"_id": "d3", "text": "unterminated}\n')
    message = error_of(f"beir:{root}")
    assert message.startswith(f"{root / 'corpus.jsonl'}:4: malformed JSON line")


def test_beir_duplicate_doc_and_query_ids(tmp_path: Path) -> None:
    docs = [{"_id": "d1", "text": "a"}, {"_id": "d2", "text": "b"}, {"_id": "d1", "text": "c"}]
    root = write_beir(tmp_path / "docs", "q1\td1\t1\n", corpus=docs)
    assert error_of(f"beir:{root}") == (
        f"{root / 'corpus.jsonl'}:3: duplicate doc_id 'd1' (first at line 1)"
    )
    root = write_beir(tmp_path / "queries", "q1\td1\t1\n")
    with open(root / "queries.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"_id": "q1", "text": "again"}\n')
    assert error_of(f"beir:{root}") == (
        f"{root / 'queries.jsonl'}:4: duplicate query_id 'q1' (first at line 1)"
    )


def test_beir_mixed_int_and_str_ids(tmp_path: Path) -> None:
    docs = [{"_id": 1, "text": "a"}, {"_id": "2", "text": "b"}]
    root = write_beir(tmp_path, "q1\t1\t1\nq2\t2\t1\n", corpus=docs)
    data = load_dataset(f"beir:{root}")
    assert data.corpus["doc_id"].to_list() == ["1", "2"]
    assert data.corpus["title"].to_list() == ["", ""]


def test_beir_empty_corpus_and_missing_id(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "empty", "q1\td1\t1\n")
    (root / "corpus.jsonl").write_text("\n", encoding="utf-8")
    assert (
        error_of(f"beir:{root}") == f"{root / 'corpus.jsonl'}: the corpus is empty (no documents)"
    )
    root = write_beir(tmp_path / "noid", "q1\td1\t1\n", corpus=[{"_id": "d1"}, {"text": "x"}])
    assert error_of(f"beir:{root}") == f"{root / 'corpus.jsonl'}:2: missing or empty '_id'"


# --------------------------------------------------------------------------- KILT


def test_kilt_gold1(shared_data: Path) -> None:
    data = load_dataset(f"kilt:{shared_data / 'kilt-test-fixtures' / 'gold1.jsonl'}")
    assert data.queries.rows() == [
        ("1", "In one word, how did Chen Yi-hsiung die?", ["suicide"]),
        ("2", "In one word, how did Chen Yi-hsiung die?", ["suicide"]),
        ("3", "In one word, how did Chen Yi-hsiung die?", ["it was suicide"]),
    ]
    assert data.qrels.rows() == [("1", "10287141", 1), ("2", "10287141", 1), ("3", "10287141", 1)]
    # no knowledge source given: the corpus is the provenance's pages (title, no text)
    assert data.corpus.rows() == [("10287141", "Chen Yi-hsiung", "")]


def test_kilt_pretty_printed_json_is_not_json_lines(shared_data: Path) -> None:
    path = shared_data / "kilt-test-fixtures" / "guess3_1.json"
    assert error_of(f"kilt:{path}").startswith(f"{path}:1: malformed JSON line")


@pytest.mark.parametrize("name", ["gold2.jsonl", "gold3.jsonl"])
def test_kilt_record_without_input(shared_data: Path, name: str) -> None:
    path = shared_data / "kilt-test-fixtures" / name
    assert error_of(f"kilt:{path}") == f"{path}:1: record '1' has no 'input' question"


def with_inputs(source: Path, target: Path) -> Path:
    """The KILT file with an ``input`` added to every record (the fixtures lack some)."""
    records = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    return write_jsonl(target, [{**r, "input": f"question {r['id']}"} for r in records])


def test_kilt_mixed_int_and_str_page_ids(shared_data: Path, tmp_path: Path) -> None:
    path = with_inputs(shared_data / "kilt-test-fixtures" / "gold2.jsonl", tmp_path / "g2.jsonl")
    data = load_dataset(f"kilt:{path}")
    assert data.queries.rows() == [("1", "question 1", ["test1", "test2", "test3"])]
    # wikipedia_id 1 (int) and "2" (str) etc. all become string doc ids, deduplicated
    assert data.qrels["doc_id"].to_list() == ["1", "2", "5", "7", "9", "11"]
    assert data.corpus["doc_id"].to_list() == ["1", "2", "5", "7", "9", "11"]


def test_kilt_record_without_answers(shared_data: Path, tmp_path: Path) -> None:
    path = with_inputs(shared_data / "kilt-test-fixtures" / "guess2_1.jsonl", tmp_path / "g.jsonl")
    assert error_of(f"kilt:{path}") == f"{path}:1: record '1' has no non-empty 'output' answer"


def test_kilt_without_provenance_has_an_empty_corpus(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "k.jsonl", [{"id": "a", "input": "q?", "output": [{"answer": "x"}]}]
    )
    message = error_of(f"kilt:{path}")
    assert message.startswith(f"{path}: the corpus is empty") and "corpus=FILE" in message


def test_kilt_with_knowledge_source(shared_data: Path, tmp_path: Path) -> None:
    ks = write_jsonl(
        tmp_path / "ks.jsonl",
        [
            {
                "wikipedia_id": "10287141",
                "wikipedia_title": "Chen Yi-hsiung",
                "text": ["Chen Yi-hsiung\n", "He was a painter.\n", "\n", "He died by suicide.\n"],
            },
            {"wikipedia_id": 42, "wikipedia_title": "Other", "text": ["Other page.\n"]},
        ],
    )
    gold = shared_data / "kilt-test-fixtures" / "gold1.jsonl"
    # corpus= relative to the KILT file's folder is found too
    (tmp_path / "gold1.jsonl").write_bytes(gold.read_bytes())
    data = load_dataset(f"kilt:{tmp_path / 'gold1.jsonl'}?corpus=ks.jsonl")
    assert data.corpus.rows() == [
        ("10287141", "Chen Yi-hsiung", "Chen Yi-hsiung\nHe was a painter.\nHe died by suicide."),
        ("42", "Other", "Other page."),
    ]
    assert data.qrels.height == 3
    ks.write_text(json.dumps({"wikipedia_id": "42", "text": ["x"]}) + "\n", encoding="utf-8")
    message = error_of(f"kilt:{gold}?corpus={ks}")
    assert message.startswith(f"{gold}:1: judgment names doc_id '10287141', which is not in")


def test_kilt_duplicate_id(tmp_path: Path) -> None:
    record = {
        "id": 7,
        "input": "q?",
        "output": [{"answer": "x", "provenance": [{"wikipedia_id": 1}]}],
    }
    path = write_jsonl(tmp_path / "k.jsonl", [record, {**record, "id": "7"}])
    assert error_of(f"kilt:{path}") == f"{path}:2: duplicate id '7' (first at line 1)"


# --------------------------------------------------------------------------- jsonl / parquet


def table_dir(root: Path, fmt: str, tables: dict[str, list[dict]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, rows in tables.items():
        if fmt == "jsonl":
            write_jsonl(root / f"{name}.jsonl", rows)
        else:
            pl.DataFrame(rows).write_parquet(root / f"{name}.parquet")
    return root


TABLES = {
    "corpus": [
        {"_id": "a", "title": "A", "text": "alpha"},
        {"_id": "b", "title": "B", "text": "beta"},
    ],
    "queries": [
        {"qid": "1", "query": "first?", "answers": ["x", "y"]},
        {"qid": "2", "query": "second?", "answers": []},
    ],
    "qrels": [{"qid": "1", "_id": "b", "relevance": 2}],
}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_tables_with_renamed_columns(tmp_path: Path, fmt: str) -> None:
    root = table_dir(tmp_path, fmt, TABLES)
    data = load_dataset(f"{fmt}:{root}?doc_id=_id&query_id=qid&question=query")
    assert data.corpus.rows() == [("a", "A", "alpha"), ("b", "B", "beta")]
    assert data.queries.rows() == [("1", "first?", ["x", "y"]), ("2", "second?", [])]
    assert data.qrels.rows() == [("1", "b", 2)]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_tables_defaults_answers_as_string_and_no_qrels(tmp_path: Path, fmt: str) -> None:
    root = table_dir(
        tmp_path,
        fmt,
        {
            "corpus": [{"doc_id": 1, "text": "alpha"}, {"doc_id": 2, "text": "beta"}],
            "queries": [{"query_id": "q", "question": "what?", "answers": "alpha"}],
        },
    )
    data = load_dataset(f"{fmt}:{root}")
    assert data.corpus.rows() == [("1", "", "alpha"), ("2", "", "beta")]
    assert data.queries.rows() == [("q", "what?", ["alpha"])]
    assert data.qrels.is_empty() and data.qrels.schema == pl.Schema(QRELS_SCHEMA)


def test_jsonl_answers_mixing_strings_and_lists(tmp_path: Path) -> None:
    root = table_dir(
        tmp_path,
        "jsonl",
        {
            "corpus": [{"doc_id": "d", "text": "t"}],
            "queries": [
                {"query_id": "1", "question": "a?", "answers": "x"},
                {"query_id": "2", "question": "b?", "answers": ["y", "", "y", "z"]},
                {"query_id": "3", "question": "c?"},
            ],
            "qrels": [{"query_id": "1", "doc_id": "d"}],
        },
    )
    data = load_dataset(f"jsonl:{root}")
    assert data.queries["answers"].to_list() == [["x"], ["y", "z"], []]
    assert data.qrels.rows() == [("1", "d", 1)]  # relevance defaults to 1


def test_tables_errors(tmp_path: Path) -> None:
    root = table_dir(tmp_path / "missing", "jsonl", {"corpus": TABLES["corpus"]})
    assert error_of(f"jsonl:{root}?doc_id=_id") == f"{root / 'queries.jsonl'}: no such file"
    root = table_dir(tmp_path / "noname", "jsonl", TABLES)
    assert error_of(f"jsonl:{root}") == f"{root / 'corpus.jsonl'}: no record has a field 'doc_id'"
    bad = dict(TABLES, qrels=[{"qid": "1", "_id": "b"}, {"qid": "2", "_id": "zz"}])
    root = table_dir(tmp_path / "unknown", "parquet", bad)
    assert error_of(f"parquet:{root}?doc_id=_id&query_id=qid&question=query").startswith(
        f"{root / 'qrels.parquet'} (row 2): judgment names doc_id 'zz'"
    )
    dup = dict(TABLES, corpus=[*TABLES["corpus"], {"_id": "a", "title": "", "text": "again"}])
    root = table_dir(tmp_path / "dup", "jsonl", dup)
    assert error_of(f"jsonl:{root}?doc_id=_id&query_id=qid&question=query") == (
        f"{root / 'corpus.jsonl'}:3: duplicate doc_id 'a' (first at line 1)"
    )
    root = table_dir(
        tmp_path / "type", "jsonl", dict(TABLES, qrels=[{"qid": "1", "_id": "a", "relevance": 0.5}])
    )
    assert error_of(f"jsonl:{root}?doc_id=_id&query_id=qid&question=query") == (
        f"{root / 'qrels.jsonl'}:1: field 'relevance' = 0.5 does not fit 'relevance' (int)"
    )


# --------------------------------------------------------------------------- passages option


def test_passages_option_splits_and_maps_qrels() -> None:
    data = load_dataset("sample?passages=100")
    assert data.spec == "sample?passages=100"
    assert data.corpus.columns == ["doc_id", "parent_id", "title", "text"]
    assert data.corpus.height > 364
    assert data.corpus["parent_id"].n_unique() == 364
    parents = data.qrels.join(data.corpus.select("doc_id", "parent_id"), on="doc_id")
    plain = load_dataset("sample")
    expected = plain.qrels.join(plain.corpus.select("doc_id"), on="doc_id")
    assert set(parents.select("query_id", "parent_id").unique().iter_rows()) == set(
        expected.select("query_id", "doc_id").iter_rows()
    )


def test_jsonl_line_level_errors(tmp_path: Path) -> None:
    base = {"corpus": [{"doc_id": "d", "text": "t"}]}
    root = table_dir(
        tmp_path / "noq",
        "jsonl",
        {**base, "queries": [{"query_id": "1", "question": "a?"}, {"query_id": "2"}]},
    )
    assert error_of(f"jsonl:{root}") == f"{root / 'queries.jsonl'}:2: missing 'question'"
    root = table_dir(
        tmp_path / "array",
        "jsonl",
        {**base, "queries": [{"query_id": "1", "question": "a?"}, [1, 2]]},
    )
    assert (
        error_of(f"jsonl:{root}")
        == f"{root / 'queries.jsonl'}:2: expected a JSON object, found list"
    )
    root = table_dir(
        tmp_path / "latin1", "jsonl", {**base, "queries": [{"query_id": "1", "question": "a?"}]}
    )
    with open(root / "queries.jsonl", "ab") as handle:
        handle.write(b'{"query_id": "2", "question": "caf\xe9?"}\n')
    assert error_of(f"jsonl:{root}").startswith(f"{root / 'queries.jsonl'}:2: not UTF-8 text")


def test_sample_with_max_questions() -> None:
    data = load_dataset("sample?max_questions=10")
    assert (data.corpus.height, data.queries.height, data.qrels.height) == (364, 10, 10)
    assert data.qrels["query_id"].to_list() == data.queries["query_id"].to_list()


def test_spread_questions_covers_the_whole_file(shared_data: Path) -> None:
    spec = f"squad:{shared_data / 'squad-v1.1-dev' / 'dev-v1.1.json.zip'}?spread_questions=200"
    ds = load_dataset(spec)
    assert ds.queries.height == 200 and ds.qrels.height == 200
    assert ds.corpus.height == 2067
    articles = ds.qrels.get_column("doc_id").str.replace(r"_\d+$", "").n_unique()
    assert articles == 48  # every article of SQuAD dev, not only the first ones
    assert load_dataset("sample?spread_questions=500").queries.height == 120
