"""Signed (distraction-aware) utility labels: what a document adds over the closed-book answer.

An eRAG label says how good the reader's answer is *with* the document; it cannot say that the
document made things worse. Following UDCG (Trappolini et al., "Redefining Retrieval Evaluation
in the Era of LLMs", EACL 2026, arXiv 2510.21440), a document can have negative utility: it
distracts the reader from an answer it would have given without it. With ``m`` the downstream
metric (values in [0, 1]), ``a(q, d)`` the reader's eRAG answer from document ``d`` and
``a_∅(q)`` its closed-book answer (no passage at all)::

    label(q, d) = m(a(q, d), golds) − m(a_∅(q), golds)    ∈ [−1, 1]

positive when the document helps, 0 when it changes nothing the metric sees, negative when it
distracts. The closed-book answer is one greedy generation per query (the reader's
``answer_with_contexts`` with no passages: its end-to-end prompt with an empty context), kept
in the label store under :func:`closed_book_fingerprint`, so it is generated once per query and
reader whatever the number of retrievers or re-runs. The with-document term is the eRAG label
itself (:func:`~erag_dagster.labels.labeller.label_run`, answers from the same store). Signed
lists are scored by ``evaluate_labels(..., signed=True)`` (UDCG@k, and the other families on the
positive part; :mod:`erag_dagster.metrics.list_metrics`).
"""

from __future__ import annotations

import polars as pl

from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.data.schema import require_answers
from erag_dagster.labels.cached import Subject, generate_stored, task_fingerprint
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.reader_calls import ReaderCalls, reader_calls
from erag_dagster.metrics.downstream import get_downstream_metric

#: The closed-book answer's task (the reader's end-to-end prompt with no passage); its
#: ``name/vN`` is part of the answers' store key (:func:`closed_book_fingerprint`).
CLOSED_BOOK = CodeVersion("closed_book", "1")
#: The signed label's formula (eRAG label − closed-book score). Its values are not stored (both
#: terms are), so its version enters the ``code_version`` of the assets that compute it only.
SIGNED_UTILITY = CodeVersion("signed_utility", "1")
LABEL_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64, "label": pl.Float64}


def closed_book_fingerprint(reader) -> str:
    """Fingerprint of closed-book answering: the reader's fingerprint + the task version (its
    prompt, decoding and post-processing all shape the answer)."""
    return task_fingerprint(reader.fingerprint, CLOSED_BOOK.task)


def closed_book_answers(
    queries: pl.DataFrame,
    reader,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
) -> pl.DataFrame:
    """``query_id, answer``: the reader's answer to each question with no passage, one
    generation per query (stored; the subject is the query itself, with an empty text).
    ``executor``: where the reader runs (:mod:`erag_dagster.labels.reader_calls`)."""
    rows = queries.select(pl.col("query_id").cast(pl.String), "question").rows()
    subjects = [Subject(qid, question, "", "") for qid, question in rows]
    step = 32
    with reader_calls(reader, executor) as calls:

        def generate(part: list[int]) -> list[str]:
            items = [(rows[i][1], []) for i in part]
            return calls("answer_with_contexts", items, chunk=step)

        answers = generate_stored(
            subjects,
            generate,
            store,
            closed_book_fingerprint(reader),
            f"{reader.name}:closed_book",
            {"task": CLOSED_BOOK.task, "reader": reader.identity()},
            run_id=run_id,
            step=calls.step(step, len(subjects)),
        ).outputs
    return pl.DataFrame(
        {"query_id": [r[0] for r in rows], "answer": answers},
        schema={"query_id": pl.String, "answer": pl.String},
    )


def closed_book_scores(
    queries: pl.DataFrame,
    reader,
    metric: str,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
) -> pl.DataFrame:
    """``query_id, closed_book``: the downstream ``metric`` of the reader's closed-book answer
    to each query of ``queries`` (:func:`closed_book_answers`, stored) against its golds, in
    [0, 1]; a query without gold answers is an :class:`~erag_dagster.core.errors.InputError`."""
    require_answers(queries, "closed-book scores")
    closed = closed_book_answers(queries, reader, store, run_id, executor=executor).join(
        queries.select(pl.col("query_id").cast(pl.String), "answers"), on="query_id"
    )
    score = get_downstream_metric(metric)
    return pl.DataFrame(
        {
            "query_id": closed["query_id"],
            "closed_book": [
                score(a, g) for a, g in zip(closed["answer"], closed["answers"], strict=True)
            ],
        },
        schema={"query_id": pl.String, "closed_book": pl.Float64},
    )


def signed_labels(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader,
    metric: str,
    store,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
) -> pl.DataFrame:
    """``query_id, doc_id, rank, label, closed_book`` for every row of ``run``: the eRAG label
    minus the closed-book score (formula: module docstring), in ``[-1, 1]``; ``closed_book`` is
    the closed-book score of the row's query. Input policy as :func:`label_run`'s; both terms
    generate where ``executor`` says (one Ray pool for both)."""
    with reader_calls(reader, executor) as calls:
        erag = label_run(run, queries, corpus, reader, metric, store, run_id, executor=calls)
        if erag.labels.height == 0:
            return pl.DataFrame(schema={**LABEL_SCHEMA, "closed_book": pl.Float64})
        erag_labels = erag.labels
        asked = queries.join(erag_labels.select("query_id").unique(), on="query_id", how="semi")
        require_answers(asked, "signed labels")
        closed_scores = closed_book_scores(asked, reader, metric, store, run_id, executor=calls)
    return (
        erag_labels.select("query_id", "doc_id", "rank", "label")
        .join(closed_scores, on="query_id", how="left")
        .with_columns(label=pl.col("label") - pl.col("closed_book"))
        .sort("query_id", "rank")
        .select(*LABEL_SCHEMA, "closed_book")
    )


def closed_book_labels(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    reader,
    metric: str,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
) -> pl.DataFrame:
    """``query_id, doc_id, rank, label`` for every row of ``run``: the closed-book score of the
    row's query (:func:`closed_book_scores`), the same for every document of the query.

    Table 1's ``closed_book`` row (:data:`erag_dagster.meta.label_methods.CLOSED_BOOK_METHOD`):
    a reference, not a labelling of documents. Every list metric of a list whose labels all
    equal ``c`` is a non-decreasing function of ``c``, so its Kendall tau with end-to-end
    quality is that of the reader's closed-book score: how much of the end-to-end quality the
    reader reaches with no document at all. Where it is as high as eRAG's, end-to-end quality
    barely depends on retrieval."""
    if run.height == 0:
        return pl.DataFrame(schema=LABEL_SCHEMA)
    asked = queries.join(
        run.select(pl.col("query_id").cast(pl.String)).unique(), on="query_id", how="semi"
    )
    scores = closed_book_scores(asked, reader, metric, store, run_id, executor)
    return (
        run.select(pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String), "rank")
        .join(scores, on="query_id", how="left")
        .select("query_id", "doc_id", "rank", pl.col("closed_book").alias("label"))
        .sort("query_id", "rank")
    )
