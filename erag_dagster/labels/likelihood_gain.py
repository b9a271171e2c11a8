"""Likelihood-gain labels: how much a document raises the reader's probability of the gold
answer over its closed-book prior.

A likelihood label (:mod:`erag_dagster.labels.likelihood`) reads ``P(gold | q, d)``, the
reader's teacher-forced probability of the gold answer given the question and one document.
On classification-style answers (yes/no/maybe, SUPPORTS/REFUTES) much of that probability is
the reader's prior for the label, the same whatever the passage. The gain subtracts it::

    label(q, d) = P(gold | q, d) − P(gold | q)     ∈ [−1, 1]

with both terms computed by the likelihood task's formula (label outputs: normalised over the
label set; free text: the geometric mean of the gold tokens' probabilities) and ``P(gold | q)``
the same prompt with an empty passage (the closed-book prior: the eRAG prompt, nothing in the
passage slot). Positive when the document moves the reader towards the gold answer, negative
when it moves it away. Within one query the gain ranks documents as the likelihood label does;
across queries it removes the part of the label that the prior explains.

Costs: the with-document term is the likelihood label itself (the same stored values); the prior
is one more prefill per (query, label) — or per (query, distinct gold) for free text — kept in
the label store under :func:`prior_fingerprint` (the likelihood task's fingerprint data plus
:data:`CLOSED_BOOK_LIKELIHOOD`), so a query is scored once whatever the number of retrievers.
Gain lists are signed: Table 1 scores them with ``evaluate_labels(..., signed=True)``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import polars as pl

from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.core.hashing import sha256_json
from erag_dagster.data.schema import require_answers
from erag_dagster.labels.cached import Subject, generate_stored
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.likelihood import (
    LIKELIHOOD_STEP,
    gold_likelihoods,
    label_set,
    likelihood_identity,
    likelihood_labels,
)
from erag_dagster.labels.reader_calls import ReaderCalls, reader_calls

#: The closed-book prior's task (the likelihood task with an empty passage); its ``name/vN`` is
#: part of the stored priors' key (:func:`prior_fingerprint`).
CLOSED_BOOK_LIKELIHOOD = CodeVersion("closed_book_likelihood", "1")
#: The gain formula (with-document likelihood − prior). Its values are not stored (both terms
#: are), so its version enters the ``code_version`` of the assets that compute it only.
LIKELIHOOD_GAIN = CodeVersion("likelihood_gain", "1")
LABEL_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64, "label": pl.Float64}


def prior_identity(reader, labels: tuple[str, ...] | None) -> dict:
    """What shapes a closed-book prior: the likelihood task's identity (reader, prompt, formula,
    label set) with the task named :data:`CLOSED_BOOK_LIKELIHOOD`."""
    return {**likelihood_identity(reader, labels), "task": CLOSED_BOOK_LIKELIHOOD.task}


def prior_fingerprint(reader, labels: tuple[str, ...] | None) -> str:
    """Fingerprint of the closed-book prior: sha256 of :func:`prior_identity`."""
    return sha256_json(prior_identity(reader, labels))


def _golds(answers: Sequence[str] | None) -> list[str]:
    return list(dict.fromkeys(a.strip() for a in answers or [] if a and a.strip()))


def closed_book_likelihoods(
    queries: pl.DataFrame,
    reader,
    metric: str,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
    labels: tuple[str, ...] | None = None,
) -> pl.DataFrame:
    """``query_id, prior``: ``P(gold | q)`` of each query (likelihood formula, empty passage),
    one prefill per (query, continuation), stored. ``labels``: the label set (default: the one
    :func:`~erag_dagster.labels.likelihood.label_set` reads from ``queries``); pass the
    with-document term's so both are normalised over the same set. Queries without answers
    are an :class:`InputError`."""
    require_answers(queries, "likelihood-gain labels")
    if labels is None:
        labels = label_set(queries, metric)
    rows = queries.select(pl.col("query_id").cast(pl.String), "question", "answers").rows()
    golds = [_golds(answers) for _, _, answers in rows]
    scored = [list(labels) if labels else g for g in golds]
    subjects = [
        Subject(qid, question, "", json.dumps(s))
        for (qid, question, _), s in zip(rows, scored, strict=True)
    ]

    def score(part: list[int], calls: ReaderCalls) -> list[str]:  # no passage: the prior
        return gold_likelihoods(
            part, [(rows[i][1], "") for i in part], scored, golds, labels, calls
        )

    with reader_calls(reader, executor) as calls:
        outputs = generate_stored(
            subjects,
            lambda part: score(part, calls),
            store,
            prior_fingerprint(reader, labels),
            f"{reader.name}:closed_book_likelihood",
            prior_identity(reader, labels),
            run_id=run_id,
            step=LIKELIHOOD_STEP,
        ).outputs
    return pl.DataFrame(
        {"query_id": [r[0] for r in rows], "prior": [float(v) for v in outputs]},
        schema={"query_id": pl.String, "prior": pl.Float64},
    )


def likelihood_gain_labels(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader,
    metric: str,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
) -> pl.DataFrame:
    """``query_id, doc_id, rank, label, prior`` (run order: query, rank): the likelihood label
    minus its query's closed-book prior (formula: module docstring), in ``[-1, 1]``; ``prior``
    is ``P(gold | q)``. Input policy as :func:`~erag_dagster.labels.likelihood.likelihood_labels`
    (an unknown query or document, or a query without answers, is an :class:`InputError`); both
    terms run where ``executor`` says and are kept in ``store``."""
    with reader_calls(reader, executor) as calls:
        with_doc = likelihood_labels(
            run, queries, corpus, reader, metric, store, run_id, executor=calls
        )
        if with_doc.height == 0:
            return pl.DataFrame(schema={**LABEL_SCHEMA, "prior": pl.Float64})
        asked = queries.with_columns(pl.col("query_id").cast(pl.String)).join(
            with_doc.select("query_id").unique(), on="query_id", how="semi"
        )
        priors = closed_book_likelihoods(
            asked, reader, metric, store, run_id, calls, labels=label_set(queries, metric)
        )
    return (
        with_doc.join(priors, on="query_id", how="left")
        .with_columns(label=pl.col("label") - pl.col("prior"))
        .sort("query_id", "rank")
        .select(*LABEL_SCHEMA, "prior")
    )
