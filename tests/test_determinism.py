"""Labels are a function of (reader, query, document): the same whatever the batch layout, the
order of the pairs, the shared prefix, the thread count and the machine.

* The default reader's answers on 20 fixed pairs equal the answers stored in
  ``reproductions/answers/reader_answers.yaml``, in three layouts: the default batch with the
  shared prefix; the pairs in shuffled order (other neighbours in every batch) in batches of 7
  without it, with one thread, labelled into a label store; and batch 1 without it (each pair
  alone), labelled likewise. The same stored answers for every layout, so the same answers and
  labels across layouts; and another CPU (or another torch, transformers or gguf build) that
  answers differently fails here instead of silently moving the reports' numbers.
* The answers ``make test``'s default run is seeded with
  (``reproductions/answers/default_run.jsonl``: both registry readers' eRAG answers, end-to-end
  answers and P(yes)) are what this machine's readers answer: a sample of each kind is answered
  anew and compared.
* The margin guard (:mod:`erag_dagster.readers.exact_greedy`): a row near a tie is decoded again
  in float64, alone, and gets float64's answer; bf16 readers record their hardware.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import torch
import yaml

from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import LabelStore
from erag_dagster.readers import exact_greedy
from erag_dagster.readers import hardware as hw
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.fingerprint import fingerprint_of
from erag_dagster.readers.prompts import reader_passage

ANSWERS = Path(__file__).resolve().parents[1] / "reproductions" / "answers" / "reader_answers.yaml"
SEEDED = ANSWERS.with_name("default_run.jsonl")
DEFAULT_READER = "smollm2-135m"


def sample_run(n_queries: int, per_query: int = 3) -> tuple[pl.DataFrame, ...]:
    """``run, queries, corpus``: ``n_queries`` questions of the embedded sample spread over the
    file, each with its own paragraph and the next ``per_query - 1`` paragraphs (answerable and
    not: short and long answers, EOS and line stops)."""
    ds = load_dataset("sample")
    order = ds.corpus.get_column("doc_id").to_list()
    qrels = ds.qrels.select("query_id", "doc_id").rows()
    step = len(qrels) / n_queries
    rows = []
    for k in range(n_queries):
        qid, own = qrels[int(k * step)]
        i = order.index(own)
        for rank, doc in enumerate(order[i : i + per_query], start=1):
            rows.append((qid, doc, rank, float(-rank)))
    run = pl.DataFrame(rows, schema=["query_id", "doc_id", "rank", "score"], orient="row")
    return run, ds.queries, ds.corpus


def default_reader(**overrides: object):
    entry = load_registry().reader(DEFAULT_READER)
    return reader_from_config(DEFAULT_READER, {**entry.config, **overrides})


def stored_answers() -> tuple[dict, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``stored, run, queries, corpus``: the stored answers and the run of their 20 pairs."""
    stored = yaml.safe_load(ANSWERS.read_text(encoding="utf-8"))
    assert stored["reader"] == DEFAULT_READER
    run, queries, corpus = sample_run(stored["questions"], stored["per_query"])
    expected = [(row["query_id"], row["doc_id"]) for row in stored["answers"]]
    assert len(expected) == 20 and expected == run.select("query_id", "doc_id").rows()
    return stored, run, queries, corpus


def _differences(stored: dict, got: dict[tuple[str, str], str]) -> list[str]:
    return [
        f"{row['query_id']} / {row['doc_id']}: stored {row['answer']!r}, "
        f"here {got[(row['query_id'], row['doc_id'])]!r}"
        for row in stored["answers"]
        if got[(row["query_id"], row["doc_id"])] != row["answer"]
    ]


def test_default_reader_answers_equal_the_stored_answers() -> None:
    """The default layout (batches of 16, shared prefix) on this machine: the stored answers."""
    stored, run, queries, corpus = stored_answers()
    reader = default_reader()
    question = dict(queries.select("query_id", "question").rows())
    passage = dict(corpus.select("doc_id", "text").rows())
    title = dict(corpus.select("doc_id", "title").rows())
    pairs = run.select("query_id", "doc_id").rows()
    items = [(question[q], reader_passage(title[d], passage[d])) for q, d in pairs]
    mismatches = _differences(stored, dict(zip(pairs, reader.answer(items), strict=True)))
    assert not mismatches, (
        "the default reader answers differently on this machine "
        f"({reader.identity().get('libraries')}): " + "; ".join(mismatches)
    )


def _labelled_in_layout(tmp_path: Path, overrides: dict, shuffle: bool) -> None:
    """Label the stored pairs with the default reader in another layout, into a fresh store:
    every answer generated here equals the stored one, so every label is the same too."""
    stored, run, queries, corpus = stored_answers()
    rows = run.sample(fraction=1.0, shuffle=True, seed=3) if shuffle else run
    reader = default_reader(**overrides)
    assert reader.fingerprint == default_reader().fingerprint  # a layout is not an identity
    result = label_run(rows, queries, corpus, reader, "em", LabelStore(tmp_path / "l.sqlite"))
    assert result.judged_now == 20  # every answer generated in this layout
    got = {(q, d): a for q, d, a in result.labels.select("query_id", "doc_id", "answer").rows()}
    mismatches = _differences(stored, got)
    assert not mismatches, f"layout {overrides}: " + "; ".join(mismatches)
    assert result.labels.get_column("label").sum() >= 1  # real answers, some of them exact


def test_shuffled_neighbours_do_not_change_answers(tmp_path: Path) -> None:
    """Shuffled order (other neighbours in every batch), batches of 7, one thread, no shared
    prefix: the default layout's answers."""
    _labelled_in_layout(
        tmp_path, {"num_threads": 1, "batch_size": 7, "share_prefix": False}, shuffle=True
    )


@pytest.mark.slow
def test_each_pair_alone_answers_as_in_a_batch(tmp_path: Path) -> None:
    """Batch 1, no shared prefix (no neighbour, no padding): the batched layouts' answers."""
    _labelled_in_layout(tmp_path, {"batch_size": 1, "share_prefix": False}, shuffle=False)


def test_guard_sends_near_ties_to_float64_and_keeps_the_answer(monkeypatch) -> None:
    """With the floor raised above every gap, every row is decoded again in float64 alone; the
    answers stay the exact-arithmetic ones (the same as through float32 away from ties)."""
    run, queries, corpus = sample_run(2, 2)  # 4 rows, each decoded again alone in float64
    question = dict(queries.select("query_id", "question").rows())
    text = {d: reader_passage(t, x) for d, t, x in corpus.select("doc_id", "title", "text").rows()}
    items = [(question[q], text[d]) for q, d in run.select("query_id", "doc_id").rows()]
    reader = default_reader()
    assert reader.guarded and reader.identity()["decoding"]["exact_greedy"]["version"] >= 1
    normal = reader.answer(items)
    assert reader.guard_counts["rows"] == len(items)
    monkeypatch.setattr(
        "erag_dagster.readers.transformers_generate.MARGIN_FLOOR", float("inf"), raising=True
    )
    again = default_reader()
    assert again.answer(items) == normal
    assert again.guard_counts["reference"] == len(items)
    assert again._ensure().reference.dtype == exact_greedy.REFERENCE_DTYPE


def test_gap_recorder_counts_only_the_steps_that_made_the_answer() -> None:
    recorder = exact_greedy.GapRecorder()
    for gaps in ([[5.0, 1.0, 0.0], [3.0, 2.5, 0.0]], [[9.0, 0.0, 0.0], [1.0, 0.99, 0.0]]):
        recorder(torch.zeros(2, 1, dtype=torch.long), torch.tensor(gaps))
    # row 0: gaps 4.0 then 9.0; row 1: 0.5 then 0.01 (but only its first step counts)
    assert recorder.smallest([2, 1]) == pytest.approx([4.0, 0.5])
    assert recorder.smallest([0, 2]) == pytest.approx([float("inf"), 0.01])
    eos = [0]
    assert exact_greedy.decided_steps([5, 6, 0, 0], None, eos) == 3
    assert exact_greedy.decided_steps([5, 6, 7, 8], 2, eos) == 2
    assert exact_greedy.decided_steps([5, 6, 7, 8], None, eos) == 4


def test_auto_dtype_is_float32_and_bf16_records_the_hardware() -> None:
    auto = default_reader(dtype="auto", device="cpu")
    assert auto.dtype == torch.float32
    assert "hardware" not in auto.identity()  # guarded float32: answers are machine-free
    bf16 = default_reader(dtype="bfloat16", device="cpu")
    hardware = bf16.identity()["hardware"]
    assert hardware["device"] == "cpu" and hardware["cpu"]
    assert set(hardware["flags"]) <= set(hw.CPU_FLAGS)
    assert "exact_greedy" not in bf16.identity()["decoding"]
    assert bf16.fingerprint != auto.fingerprint
    # another machine kind gives another fingerprint: a store keeps their answers apart

    flags = ["avx2"] if hardware["flags"] != ["avx2"] else ["avx2", "avx512f"]
    other = {**bf16.identity(), "hardware": {**hardware, "flags": flags}}
    assert fingerprint_of(other) != bf16.fingerprint
    assert hw.hardware_dependent(torch.bfloat16, torch.device("cpu"))
    assert not hw.hardware_dependent(torch.float32, torch.device("cpu"))


@pytest.mark.slow
def test_the_default_runs_seeded_answers_are_this_machines() -> None:
    """Every fingerprint of the seed file is one of the registry readers' four tasks, and a
    sample of each (four eRAG answers, two end-to-end answers, four P(yes), two closed-book
    answers per reader) is answered anew here: the same text, and P(yes) within 1e-4 (float32
    values, not bit for bit)."""
    from erag_dagster.core.hashing import sha256_text
    from erag_dagster.labels.signed import closed_book_fingerprint
    from erag_dagster.labels.store_base import read_recovery
    from erag_dagster.meta.baselines import annotation_fingerprint
    from erag_dagster.meta.end_to_end import end_to_end_fingerprint, list_text

    rows = read_recovery(SEEDED)  # every line checked, its key recomputed
    ds = load_dataset("sample")
    question = dict(ds.queries.select("query_id", "question").rows())
    text = {
        d: reader_passage(t, x) for d, t, x in ds.corpus.select("doc_id", "title", "text").rows()
    }
    tasks = {}
    for name, entry in load_registry().readers.items():
        reader = reader_from_config(name, entry.config)
        tasks[reader.fingerprint] = (reader, "answer", 4)
        tasks[end_to_end_fingerprint(reader)] = (reader, "end_to_end", 2)
        tasks[annotation_fingerprint(reader)] = (reader, "p_yes", 4)
        tasks[closed_book_fingerprint(reader)] = (reader, "closed_book", 2)  # Table 1's row
    unknown = set(rows.get_column("reader_fingerprint")) - set(tasks)
    assert not unknown, (
        f"{SEEDED.name}: {len(unknown)} fingerprint(s) no registry reader has here (another "
        "reader config, torch or transformers): re-measure the default run "
        "(scripts/refresh_default_run_figures.py)"
    )
    for fingerprint, (reader, kind, n) in tasks.items():
        part = rows.filter(pl.col("reader_fingerprint") == fingerprint).sort("generation_key")
        assert part.height >= n, (reader.name, kind)
        sample = part.gather_every(part.height // n).head(n).rows(named=True)
        asked = []
        for row in sample:
            if kind == "closed_book":  # the question alone: no document, an empty text
                assert row["text_hash"] == sha256_text("") and not row["doc_id"]
                asked.append((question[row["query_id"]], []))
                continue
            passages = [text[d] for d in row["doc_id"].split(" ")]
            shown = list_text(passages)
            assert sha256_text(question[row["query_id"]]) == row["question_hash"]
            assert sha256_text(shown) == row["text_hash"], (reader.name, kind, row["doc_id"])
            asked.append((question[row["query_id"]], passages if kind == "end_to_end" else shown))
        stored = [row["answer"] for row in sample]
        if kind == "answer":
            assert reader.answer(asked) == stored, reader.name
        elif kind in ("end_to_end", "closed_book"):
            assert reader.answer_with_contexts(asked) == stored, (reader.name, kind)
        else:
            fresh = reader.yes_probability(asked)
            assert fresh == pytest.approx([float(a) for a in stored], abs=1e-4), reader.name
