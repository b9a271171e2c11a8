"""A stored baseline's labels checked against the dataset and the label store.

:mod:`.baseline_file` checks a baseline's form and its digest; the digest stops an edit that
forgets to recompute it, not a careful one. This module checks the content itself:

1. **answer keys**: each label row's ``answer_key`` must be the label store's generation key of
   the reader's answer to that query and document *as the dataset holds them now*
   (:func:`erag_dagster.labels.keys.generation_key` over the stored reader fingerprint, the
   query id, the question's and the passage's sha256). A key that is not is refused: the row was
   edited, or the dataset changed under the file. Needs the dataset only.
2. **labels**: for each row whose answer the store holds, the label must be what the stored
   downstream metric gives that answer against the query's gold answers (the labeller's own
   rule: :func:`~erag_dagster.metrics.label_value.checked_label` of the measure). A label that
   differs is refused naming the query, the document and both values. Rows whose answer the
   store lacks are counted, not checked (a baseline made with another store).

Skipped (and said in a note) only when the stored metric's version is no longer the current
one: its answers can then not be scored the way the file's labels were.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.gate.escape import shown
from erag_dagster.gate.identity import EvalIdentity

_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Verified:
    """How much of a stored baseline was checked: ``rows`` label rows, ``checked`` of them
    against an answer in the store; ``note`` a sentence for the report."""

    rows: int
    checked: int
    note: str


def answer_keys(rows: list[dict[str, Any]], reader_fingerprint: str, dataset) -> list[str]:
    """The label store's generation key of each row's (query, document) for the reader of
    ``reader_fingerprint``, over the dataset's question and passage text (rows need
    ``query_id``, ``doc_id``, ``rank``); an unknown query or document is an InputError."""
    from erag_dagster.core.hashing import sha256_text
    from erag_dagster.labels.keys import generation_key
    from erag_dagster.readers.passages import run_with_passages

    run = pl.DataFrame(
        [(r["query_id"], r["doc_id"], r["rank"]) for r in rows],
        schema={"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64},
        orient="row",
    )
    joined = run_with_passages(run, dataset.corpus)
    questions = dict(
        dataset.queries.select(pl.col("query_id").cast(pl.String), "question").iter_rows()
    )
    keys = []
    for qid, passage in joined.select("query_id", "passage").iter_rows():
        if qid not in questions:
            raise InputError(f"query {shown(qid)!r} is not in the dataset")
        keys.append(
            generation_key(
                reader_fingerprint, qid, sha256_text(questions[qid]), sha256_text(passage)
            )
        )
    return keys


def verify_stored_labels(
    ref: str, rows: list[dict[str, Any]], identity: EvalIdentity, dataset, store
) -> Verified:
    """Check a stored baseline's label ``rows`` (module docstring) against ``dataset`` and
    ``store`` (None: no store, only the answer keys are checked); raises :class:`InputError`
    naming ``ref`` and the first row that fails."""
    from erag_dagster.metrics.downstream import get_downstream_metric
    from erag_dagster.metrics.label_value import checked_label

    if not rows:
        return Verified(0, 0, "no label rows to check")
    try:
        expected = answer_keys(rows, identity.reader_fingerprint, dataset)
    except InputError as exc:
        raise InputError(f"{shown(ref)}: {exc}") from None
    for i, (row, key) in enumerate(zip(rows, expected, strict=True), start=1):
        if row["answer_key"] != key:
            raise InputError(
                f"{shown(ref)}: labels[{i}] (query {shown(row['query_id'])!r}, doc "
                f"{shown(row['doc_id'])!r}): answer_key is not the key of the reader's answer to "
                "that question and document in this dataset (the file was edited, or the "
                "dataset changed since); write the baseline again"
            )
    measure = get_downstream_metric(identity.downstream_metric.split("/")[0])
    if measure.tag != identity.downstream_metric:
        return Verified(len(rows), 0, "labels not checked: the metric's version changed since")
    if store is None:
        return Verified(len(rows), 0, "stored labels not checked: no label store to check against")
    answers = dict(
        store.lookup_generations(expected).select("generation_key", "answer").iter_rows()
    )
    golds = dict(dataset.queries.select(pl.col("query_id").cast(pl.String), "answers").iter_rows())
    checked = 0
    for i, row in enumerate(rows, start=1):
        answer = answers.get(row["answer_key"])
        if answer is None:
            continue
        qid, did = row["query_id"], row["doc_id"]
        what = f"downstream metric {measure.name!r} for query {qid!r}, doc {did!r}"
        value = checked_label(measure(answer, list(golds[qid])), what)
        if not math.isclose(value, float(row["label"]), rel_tol=0, abs_tol=_TOLERANCE):
            raise InputError(
                f"{shown(ref)}: labels[{i}] (query {shown(qid)!r}, doc {shown(did)!r}) is "
                f"{row['label']} but the label store's answer scores {value} with "
                f"{measure.tag}: the label was edited; write the baseline again"
            )
        checked += 1
    note = f"stored labels checked against the label store: {checked} of {len(rows)}"
    return Verified(len(rows), checked, note)
