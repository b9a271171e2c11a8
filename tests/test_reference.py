"""Labels without gold answers (issue 46): the reference grammar, the union of runs, the question
log format, ``check-dataset`` on it, and labels scored against reference answers through the
real label store and the packaged reader (the reference's provenance in every label, in the
score key and in ``erag-dagster audit``; a new reference re-scores stored answers without a
reader call)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml

from erag_dagster.cli import main
from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.config.registry import default_registry_path, load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.data.formats.questions import question_id
from erag_dagster.data.loaders import load_dataset
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.reference import (
    ReferenceSpec,
    parse_reference,
    reference_answers,
    reference_hash,
    union_lists,
)
from erag_dagster.labels.store import LabelStore, gold_hash
from erag_dagster.readers.factory import reader_from_config

READER_CONFIG = {"dtype": "float32", "device": "cpu", "num_threads": 1, "batch_size": 4}


# -- the setting ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("self@union", ReferenceSpec("self", "union")),
        ("self@bm25", ReferenceSpec("self", "bm25")),
        (" reader:gemma3-270m@dense?k=5 ", ReferenceSpec("gemma3-270m", "dense", 5)),
        ("reader:big@none", ReferenceSpec("big", "none")),
    ],
)
def test_reference_grammar_and_its_one_spelling(text: str, parsed: ReferenceSpec) -> None:
    assert parse_reference(text) == parsed
    assert parse_reference(parsed.text) == parsed  # the canonical text parses back
    assert parse_reference("gold") is None


@pytest.mark.parametrize(
    "bad",
    ["", "self", "union", "someone@bm25", "self@", "self@none", "self@bm25?k=0",
     "self@bm25?k=x", "self@bm25?depth=3", "self@bm25?k=2&k=3", "reader:big@none?k=2"],
)  # fmt: skip
def test_a_bad_reference_is_one_line_naming_the_key(bad: str) -> None:
    with pytest.raises(InputError) as caught:
        EvaluationConfig().with_overrides("evaluate", reference=bad or " ")
    assert "reference" in str(caught.value) and "\n" not in str(caught.value)
    assert EvaluationConfig().reference == "gold"


def test_the_registry_refuses_a_reference_naming_what_it_lacks(tmp_path: Path) -> None:
    raw = yaml.safe_load(Path(default_registry_path()).read_text())
    for reference, what in (("self@bm26", "retriever 'bm26'"), ("reader:big@union", "'big'")):
        raw["evaluation"]["reference"] = reference
        path = tmp_path / "registry.yaml"
        path.write_text(yaml.safe_dump(raw))
        with pytest.raises(InputError, match=what) as caught:
            load_registry(path)
        assert str(path) in str(caught.value)
    raw["evaluation"]["reference"] = "reader:gemma3-270m@bm25?k=2"
    path.write_text(yaml.safe_dump(raw))
    registry = load_registry(path)
    assert registry.has_reference and registry.evaluation.reference == "reader:gemma3-270m@bm25?k=2"


def test_the_union_ranks_by_best_rank_whatever_the_order_of_the_runs() -> None:
    a = pl.DataFrame({"query_id": ["q"] * 3, "doc_id": ["d1", "d2", "d3"], "rank": [1, 2, 3]})
    b = pl.DataFrame({"query_id": ["q"] * 3, "doc_id": ["d4", "d1", "d5"], "rank": [1, 2, 3]})
    one = union_lists([a, b], depth=2)
    assert one.equals(union_lists([b, a], depth=2))
    assert one["doc_id"].to_list() == ["d1", "d4", "d2"]  # best ranks 1, 1, 2; ties by doc id
    assert one["rank"].to_list() == [1, 2, 3]
    assert union_lists([a], depth=2)["doc_id"].to_list() == ["d1", "d2"]


def test_a_label_output_reference_is_scored_by_its_label() -> None:
    from erag_dagster.labels.reference import scored_against
    from erag_dagster.metrics.downstream import accuracy

    assert scored_against("Yes, the study shows it.", "accuracy") == "yes"
    assert scored_against("  ", "accuracy") == ""
    assert scored_against("Yes, the study shows it.", "f1") == "Yes, the study shows it."
    target = scored_against("No. The claim is refuted", "accuracy")
    assert accuracy("no, it does not", [target]) == 1.0
    assert accuracy("Yes", [target]) == 0.0


# -- a question log as a dataset -----------------------------------------------------------------


def _corpus(folder: Path) -> None:
    docs = [
        {"_id": "d1", "title": "Super Bowl 50", "text": "The Denver Broncos won Super Bowl 50."},
        {"_id": "d2", "title": "Levi's Stadium", "text": "The game was played in Santa Clara."},
    ]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))


def test_a_question_log_of_lines_is_a_dataset(tmp_path: Path) -> None:
    _corpus(tmp_path)
    log = tmp_path / "log.txt"
    log.write_text("Who won Super Bowl 50?\n\n  Where was it played?  \nWho won Super Bowl 50?\n")
    ds = load_dataset(f"questions:{log}")
    assert ds.queries["question"].to_list() == ["Who won Super Bowl 50?", "Where was it played?"]
    assert ds.queries["query_id"][0] == question_id("Who won Super Bowl 50?")
    assert ds.queries["answers"].to_list() == [[], []]
    assert ds.qrels.height == 0 and ds.corpus["doc_id"].to_list() == ["d1", "d2"]
    assert ds.source_files == (log, tmp_path / "corpus.jsonl")


def test_a_json_lines_log_keeps_its_ids_and_refuses_answers(tmp_path: Path) -> None:
    _corpus(tmp_path)
    log = tmp_path / "log.jsonl"
    log.write_text('{"query_id": 7, "question": "Who won?", "user": "u1"}\n{"text": "Where?"}\n')
    ds = load_dataset(f"questions:{log}?max_questions=1")
    assert ds.queries.select("query_id", "question").rows() == [("7", "Who won?")]
    log.write_text('{"id": "a", "question": "Who won?"}\n{"id": "a", "query": "Where?"}\n')
    with pytest.raises(InputError, match=r"log.jsonl:2: duplicate query id 'a' \(first at .*:1\)"):
        load_dataset(f"questions:{log}")
    log.write_text('{"question": "Who won?", "answers": ["Denver"]}\n')
    with pytest.raises(InputError, match=r"log.jsonl:1: a question log holds questions only"):
        load_dataset(f"questions:{log}")
    log.write_text('{"question": "  "}\n')
    with pytest.raises(InputError, match=r"log.jsonl:1: question must be a non-empty string"):
        load_dataset(f"questions:{log}")
    (tmp_path / "corpus.jsonl").unlink()
    log.write_text('{"question": "Who won?"}\n')
    with pytest.raises(InputError, match=r"no corpus file corpus\.jsonl"):
        load_dataset(f"questions:{log}")


def test_check_dataset_says_what_a_question_log_can_and_cannot_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _corpus(tmp_path)
    log = tmp_path / "log.txt"
    log.write_text("Who won Super Bowl 50?\nWho won Super Bowl 50?\nWhere was it played?\n")
    assert main(["check-dataset", f"questions:{log}"]) == 0
    out = capsys.readouterr().out
    assert "queries with gold answers 0 of 2; judged 0 of 2" in out
    assert "note: questions only: eRAG labels against a reference answer" in out
    assert "note: 1 lines of the question log repeat an earlier question" in out
    assert "cannot compute without gold answers: labels against gold, end-to-end quality" in out
    assert "cannot compute without judgments: the human-judgment metrics" in out
    assert out.rstrip().endswith(
        "usable for: eRAG labels against a reference answer (evaluation.reference, e.g. self@union)"
    )


# -- labels against a reference, through the store and a real reader ------------------------------


@pytest.fixture(scope="module")
def reader():
    return reader_from_config("smollm2-135m", READER_CONFIG)


def test_labels_against_a_reference_carry_its_provenance(reader, tmp_path: Path) -> None:
    ds = load_dataset("sample?max_questions=2")
    queries = ds.queries.with_columns(answers=pl.lit([], dtype=pl.List(pl.String)))  # hidden
    run = pl.DataFrame(
        {
            "query_id": [ds.queries["query_id"][0]] * 2 + [ds.queries["query_id"][1]],
            "doc_id": ["Super_Bowl_50_0", "Super_Bowl_50_1", "Super_Bowl_50_0"],
            "rank": [1, 2, 1],
        }
    )
    store = LabelStore(tmp_path / "labels.sqlite")
    gold = label_run(run, ds.queries, ds.corpus, reader, "f1", store)
    assert gold.judged_now == 3 and "reference" not in gold.labels.columns
    spec = parse_reference("self@bm25?k=1")
    assert spec is not None
    refs = reference_answers(spec, queries, ds.corpus, {"bm25-x": run}, reader, 3, "f1", store)
    assert refs.frame.height == 2 and refs.generated == 0  # top-1 lists: the eRAG answers
    first = label_run(run, queries, ds.corpus, reader, "f1", store, references=refs.frame)
    assert first.judged_now == 0 and first.scored_now == 3  # stored answers, new scores
    labels = first.labels
    assert set(labels.columns) >= {"reference", "reference_answer", "label"}
    for row in labels.iter_rows(named=True):
        provenance = json.loads(row["reference"])
        assert provenance["reader"] == "smollm2-135m"
        assert provenance["reader_fingerprint"] == reader.fingerprint
        assert provenance["documents"] == ["Super_Bowl_50_0"]
        assert provenance["sources"] == ["bm25-x"] and provenance["reference"] == "self@bm25?k=1"
        top = labels.filter(
            (pl.col("query_id") == row["query_id"]) & (pl.col("doc_id") == "Super_Bowl_50_0")
        )
        assert top["label"][0] == pytest.approx(1.0)  # the reference is that document's answer
    # the gold answers play no part: the same labels with the gold answers in the queries
    again = label_run(run, ds.queries, ds.corpus, reader, "f1", store, references=refs.frame)
    assert again.labels.equals(labels) and again.judged_now == 0 and again.scored_now == 0
    # another reference: the stored answers re-scored, no reader call
    other = parse_reference("self@bm25?k=2")
    assert other is not None
    wider = reference_answers(other, queries, ds.corpus, {"bm25-x": run}, reader, 3, "f1", store)
    rescored = label_run(run, queries, ds.corpus, reader, "f1", store, references=wider.frame)
    # the second query's top 2 is its top 1 (one document): the same reference by content,
    # so its label's score is read, not computed; the first query's two are scored anew
    assert rescored.judged_now == 0 and rescored.scored_now == 2
    # the score keys name the reference, never a gold-answer hash
    key = json.loads(labels["reference"][0])["generation_key"]
    answer = labels["reference_answer"][0]
    assert reference_hash(key, answer) != gold_hash([answer])
    audit = store.audit(labels["query_id"][0], "Super_Bowl_50_1")
    shown = [json.loads(r) for r in audit["reference"].to_list() if r]
    assert {s["reference"] for s in shown} == {"self@bm25?k=1", "self@bm25?k=2"}
    assert key in {s["generation_key"] for s in shown}
    # the gold label of the same answer shows its gold answers and no reference
    assert audit.select(pl.col("gold_answers").is_null() == pl.col("reference").is_not_null())[
        "gold_answers"
    ].all()
    assert audit["gold_answers"].drop_nulls().to_list() == ['["Denver Broncos"]']


def test_a_query_without_a_reference_is_one_line(reader, tmp_path: Path) -> None:
    ds = load_dataset("sample?max_questions=2")
    run = pl.DataFrame(
        {"query_id": [ds.queries["query_id"][1]], "doc_id": ["Super_Bowl_50_0"], "rank": [1]}
    )
    refs = pl.DataFrame(
        {"query_id": ["other"], "reference_answer": ["x"], "scored_against": ["x"],
         "gold_hash": ["h"], "reference": ["{}"]}
    )  # fmt: skip
    with pytest.raises(InputError, match="has no reference answer") as caught:
        label_run(run, ds.queries, ds.corpus, reader, "f1", None, references=refs)
    assert "\n" not in str(caught.value)


def test_a_dataset_with_a_reference_gets_no_stage_scored_against_gold(tmp_path: Path) -> None:
    """Per dataset: the question log is labelled against references (``reference_answers``,
    no end-to-end, baselines or Table 1), the sample beside it keeps every stage."""
    from erag_dagster.orchestration.definitions import build_defs

    _corpus(tmp_path)
    (tmp_path / "log.txt").write_text("Who won Super Bowl 50?\n")
    raw = yaml.safe_load(Path(default_registry_path()).read_text())
    raw["datasets"] = {
        "squad": "sample?max_questions=2",
        "log": {"spec": f"questions:{tmp_path / 'log.txt'}",
                "evaluation": {"reference": "self@union"}},
    }  # fmt: skip
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(raw))
    keys = {k.to_user_string() for k in build_defs(str(path)).resolve_all_asset_keys()}
    assert {"log/reference_answers", "log/doc_labels", "log/verdict", "log/fit"} <= keys
    assert not {"log/end_to_end", "log/baseline_labels", "log/correlation_report"} & keys
    assert {"squad/end_to_end", "squad/correlation_report"} <= keys
    assert "squad/reference_answers" not in keys
    assert "erag_leaderboard" in keys and "table1_across" not in keys  # one dataset has Table 1


def test_the_label_door_makes_its_references_from_the_run_it_labels(tmp_path: Path) -> None:
    import erag_dagster

    ds = load_dataset("sample?max_questions=1")
    qid = ds.queries["query_id"][0]
    run = pl.DataFrame(
        {"query_id": [qid, qid], "doc_id": ["Super_Bowl_50_0", "Super_Bowl_50_1"], "rank": [1, 2]}
    )
    registry = tmp_path / "registry.yaml"
    raw = yaml.safe_load(Path(default_registry_path()).read_text())
    raw["readers"] = {"smollm2-135m": {**raw["readers"]["smollm2-135m"], **READER_CONFIG}}
    registry.write_text(yaml.safe_dump(raw))
    result = erag_dagster.label(
        "sample?max_questions=1", run, reference="self@union", registry=registry,
        store=tmp_path / "labels.sqlite",
    )  # fmt: skip
    provenance = [json.loads(r) for r in result.labels["reference"]]
    assert {p["reference"] for p in provenance} == {"self@union"}
    assert provenance[0]["sources"] == ["run"]
    assert provenance[0]["documents"] == ["Super_Bowl_50_0", "Super_Bowl_50_1"]
    with pytest.raises(InputError, match="reference"):
        erag_dagster.label("sample?max_questions=1", run, reference="self@nowhere",
                           registry=registry, store=tmp_path / "labels.sqlite")  # fmt: skip
