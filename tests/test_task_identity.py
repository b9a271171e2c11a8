"""A reader task's fingerprint holds only what shapes that task's output, and ``audit`` shows
the stored identity of every kind of row (eRAG answers, LLM annotation, end-to-end).

Issue #15 §6: a ``max_new_tokens`` edit recomputed identical P("yes") values under a new
fingerprint, and ``audit`` printed ``model: null`` for task rows (their identity is nested as
``{"task", "reader"}``).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.labels.store import LabelStore
from erag_dagster.meta.baselines import annotation_fingerprint, llm_annotation_labels
from erag_dagster.meta.end_to_end import end_to_end_fingerprint
from erag_dagster.readers.factory import reader_from_config


def _reader(**changes):
    entry = next(iter(load_registry().readers.values()))
    return reader_from_config(entry.name, {**entry.config, **changes, "dtype": "float32"})


def test_max_new_tokens_changes_generation_not_annotation_fingerprint() -> None:
    base, edited = _reader(max_new_tokens=16), _reader(max_new_tokens=12)
    assert edited.fingerprint != base.fingerprint
    assert end_to_end_fingerprint(edited) != end_to_end_fingerprint(base)
    assert annotation_fingerprint(edited) == annotation_fingerprint(base)
    # what does shape P(yes) still changes it: the input budget, the model's dtype
    assert annotation_fingerprint(_reader(max_input_tokens=64)) != annotation_fingerprint(base)
    other_dtype = reader_from_config(base.name, {**base.spec.to_dict(), "dtype": "bfloat16"})
    assert annotation_fingerprint(other_dtype) != annotation_fingerprint(base)


def test_audit_shows_the_identity_of_annotation_rows(tmp_path: Path) -> None:
    ds = load_dataset("sample?max_questions=1")
    qid = ds.queries["query_id"][0]
    doc = ds.qrels.filter(pl.col("query_id") == qid)["doc_id"][0]
    run = pl.DataFrame({"query_id": [qid], "doc_id": [doc], "rank": [1], "score": [1.0]})
    store = LabelStore(str(tmp_path / "labels.sqlite"))
    reader = _reader()
    labels = llm_annotation_labels(run, ds.queries, ds.corpus, reader, store=store)
    assert 0.0 <= labels["p_yes"][0] <= 1.0
    rows = LabelStore(str(tmp_path / "labels.sqlite"), read_only=True).audit(qid, doc)
    row = rows.filter(pl.col("reader_name") == f"{reader.name}:annotation").to_dicts()[0]
    identity = reader.identity()
    assert json.loads(row["model"]) == identity["model"]
    assert row["dtype"] == identity["dtype"] == "float32"
    assert row["prompt_template_hash"] not in (None, "None")
    assert json.loads(row["decoding"])["max_new_tokens"] == 0
    assert row["answer"] == repr(labels["p_yes"][0])
