"""End-to-end RAG evaluation: the ground truth eRAG is correlated against (paper §3.2).

For each query the reader answers from its top-``k`` retrieved documents *together* (one prompt,
documents in rank order; the reader's ``answer_with_context`` states the truncation policy:
lowest-ranked passages are dropped first when the prompt would exceed the model's input budget),
and the answer is scored against the gold answers with the same downstream metric as the eRAG
labels. Fusion-in-Decoder is the paper's reader; for the causal default reader, concatenation is
the standard equivalent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import polars as pl

from erag_dagster.core.callbacks import Log
from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.core.errors import InputError
from erag_dagster.data.schema import require_answers
from erag_dagster.labels.context_answers import (
    END_TO_END,
    STEP,
    ContextList,
    context_answers,
    end_to_end_fingerprint,
    list_text,
)
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.reader_calls import ReaderCalls
from erag_dagster.metrics.downstream import get_downstream_metric
from erag_dagster.readers import prompts
from erag_dagster.readers.passages import check_run_queries, run_with_passages
from erag_dagster.readers.presets import PRESETS

__all__ = [
    "END_TO_END",
    "STEP",
    "EndToEndResult",
    "context_lists",
    "end_to_end_code_versions",
    "end_to_end_fingerprint",
    "evaluate_end_to_end",
    "list_text",
]


@dataclass(frozen=True)
class EndToEndResult:
    """Per-query end-to-end answers and scores, and the time spent generating."""

    scores: pl.DataFrame  # query_id, k, answer, score
    seconds: float


def context_lists(
    run: pl.DataFrame, queries: pl.DataFrame, corpus: pl.DataFrame, k: int
) -> pl.DataFrame:
    """``query_id, question, answers, passages`` with the top-``k`` passage texts in rank order.

    Passage text is what the reader sees for one document (:func:`reader_passage`), so at
    k = 1 the end-to-end prompt is the eRAG prompt of the top document. Queries with no
    retrieved document get an empty list (the reader then answers from the question alone).
    Unknown doc ids are an error.
    """
    if k < 1:
        raise InputError(f"end-to-end k must be >= 1, got {k}")
    lists = (
        run_with_passages(run.filter(pl.col("rank") <= k), corpus)
        .sort("query_id", "rank")
        .group_by("query_id", maintain_order=True)
        .agg(pl.col("passage"))
    )
    return (
        queries.select("query_id", "question", "answers")
        .join(lists, on="query_id", how="left")
        .with_columns(pl.col("passage").fill_null(pl.lit([], dtype=pl.List(pl.String))))
        .rename({"passage": "passages"})
    )


def evaluate_end_to_end(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader,
    metric: str,
    k: int,
    log: Log | None = None,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
) -> EndToEndResult:
    """Answer every query of ``run`` from its top-``k`` documents; score with ``metric``.

    With a :class:`~erag_dagster.labels.store.LabelStore`, answers are stored like eRAG
    generations under :func:`end_to_end_fingerprint` (the "document" of a generation is the
    ranked list of the top-``k`` doc ids and its text hash covers every passage), so a re-run
    of the same lists with the same reader generates nothing. ``executor``: where the reader
    runs (:mod:`erag_dagster.labels.reader_calls`; default in this process). A run naming a
    query that ``queries`` lacks (one retrieved for another subset of the dataset) is an
    :class:`InputError` naming the query, never a score over the queries both happen to share.
    """
    score_fn = get_downstream_metric(metric)
    check_run_queries(run, queries)  # a run of other questions (a stale one) is an error, not 0/0
    run_queries = queries.join(run.select("query_id").unique(), on="query_id", how="semi")
    require_answers(run_queries, "end-to-end evaluation")
    contexts = context_lists(run, run_queries, corpus, k)
    doc_lists = (
        run.filter(pl.col("rank") <= k)
        .sort("query_id", "rank")
        .group_by("query_id", maintain_order=True)
        .agg(pl.col("doc_id"))
    )
    ids_of = dict(doc_lists.rows())
    rows = contexts.rows(named=True)
    lists = [
        ContextList(
            r["query_id"], r["question"], tuple(ids_of.get(r["query_id"]) or ()),
            tuple(r["passages"]),
        )
        for r in rows
    ]  # fmt: skip

    def progress(done: int, total: int) -> None:
        if log:
            log(f"end-to-end: answered {done}/{total} queries, top-{k} documents")

    started = time.perf_counter()
    # At k = 1 the prompt is the eRAG prompt of the top document: its stored answer is reused.
    found = context_answers(
        lists, reader, store, run_id, executor, log, progress, what=f"end_to_end (top {k})"
    )
    answers = found.answers
    seconds = time.perf_counter() - started
    if log and found.generated < len(rows):
        log(
            f"end-to-end: {len(rows) - found.generated} of {len(rows)} answers taken from the "
            "store"
            + (f" ({found.reused_erag} are eRAG answers of the top document)"
               if found.reused_erag else "")
        )  # fmt: skip
    scores = [score_fn(answer, row["answers"]) for answer, row in zip(answers, rows, strict=True)]
    frame = pl.DataFrame(
        {
            "query_id": contexts.get_column("query_id"),
            "k": [k] * len(rows),
            "answer": answers,
            "score": scores,
        },
        schema={"query_id": pl.String, "k": pl.Int64, "answer": pl.String, "score": pl.Float64},
    )
    return EndToEndResult(frame, seconds)


def end_to_end_code_versions(metric: str) -> tuple[CodeVersion, ...]:
    """The versioned code an end-to-end score of ``metric`` depends on: the metric, the prompt
    builder, the prompt presets, the answer extraction and this task
    (:mod:`erag_dagster.core.code_versions`)."""
    measure = get_downstream_metric(metric)
    return (measure, prompts.PROMPT_BUILDER, PRESETS, prompts.POSTPROCESS, END_TO_END)
