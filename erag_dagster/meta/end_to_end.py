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
from erag_dagster.core.hashing import sha256_text
from erag_dagster.data.schema import require_answers
from erag_dagster.labels.cached import OnBatch, Subject, generate_stored, task_fingerprint
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.reader_calls import ReaderCalls, reader_calls
from erag_dagster.labels.step_notes import StepNotes, chained
from erag_dagster.labels.store import generation_key
from erag_dagster.metrics.downstream import get_downstream_metric
from erag_dagster.readers import prompts
from erag_dagster.readers.passages import check_run_queries, run_with_passages
from erag_dagster.readers.presets import PRESETS


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
        .agg(pl.col("doc_id").str.join(" "))
    )
    ids_of = dict(doc_lists.rows())
    rows = contexts.rows(named=True)
    subjects = [
        Subject(
            r["query_id"], r["question"], ids_of.get(r["query_id"], ""), list_text(r["passages"])
        )
        for r in rows
    ]

    def progress(done: int, total: int) -> None:
        if log:
            log(f"end-to-end: answered {done}/{total} queries, top-{k} documents")

    started = time.perf_counter()
    # At k = 1 the prompt is the eRAG prompt of the top document: reuse its stored answer.
    reused = _erag_answers(store, reader, subjects, rows) if k == 1 and store is not None else {}
    rest = [i for i in range(len(rows)) if i not in reused]
    asked = [subjects[i] for i in rest]
    notes = StepNotes(
        f"end_to_end (top {k})",
        reader,
        lambda part: [(asked[j].question, asked[j].text) for j in part],
    )
    with reader_calls(reader, executor, log) as calls:

        def generate(part: list[int], on_batch: OnBatch | None = None) -> list[str]:
            items = [(rows[rest[j]]["question"], rows[rest[j]]["passages"]) for j in part]
            shown = progress if calls.on_ray else None  # in-process: the engine reports it
            return calls("answer_with_contexts", items, on_batch, chunk=STEP, progress=shown)

        done = generate_stored(
            asked,
            generate,
            store,
            end_to_end_fingerprint(reader),
            f"{reader.name}:end_to_end",
            {"task": END_TO_END.task, "reader": reader.identity()},
            run_id=run_id,
            step=calls.step(STEP, len(rest)),
            streams=calls.streams("answer_with_contexts"),
            progress=chained(progress, notes.progress),
            estimate=notes.estimate,
        )
    generated = done.generated
    answers = [reused.get(i, "") for i in range(len(rows))]
    for i, answer in zip(rest, done.outputs, strict=True):
        answers[i] = answer
    seconds = time.perf_counter() - started
    if log and generated < len(rows):
        log(
            f"end-to-end: {len(rows) - generated} of {len(rows)} answers taken from the store"
            + (f" ({len(reused)} are eRAG answers of the top document)" if reused else "")
        )
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


#: The end-to-end answer task's version (passages concatenated in rank order): its ``name/vN``
#: is part of the answers' store key (:func:`end_to_end_fingerprint`).
END_TO_END = CodeVersion("end_to_end_concatenated", "1")
#: Queries per reader call in this process (and per chunk on a Ray actor).
STEP = 32


def list_text(passages: list[str]) -> str:
    """The text a top-k list is stored under in the label store: its passages in rank order,
    separated by a blank line."""
    return "\n\n".join(passages)


def end_to_end_code_versions(metric: str) -> tuple[CodeVersion, ...]:
    """The versioned code an end-to-end score of ``metric`` depends on: the metric, the prompt
    builder, the prompt presets, the answer extraction and this task
    (:mod:`erag_dagster.core.code_versions`)."""
    measure = get_downstream_metric(metric)
    return (measure, prompts.PROMPT_BUILDER, PRESETS, prompts.POSTPROCESS, END_TO_END)


def end_to_end_fingerprint(reader) -> str:
    """Fingerprint of end-to-end answering: the reader's fingerprint + the task version."""
    return task_fingerprint(reader.fingerprint, END_TO_END.task)


def _erag_answers(store, reader, subjects: list[Subject], rows: list[dict]) -> dict[int, str]:
    """Stored eRAG answers (same reader fingerprint) of the rows with exactly one passage,
    keyed by row index: ``answer_with_context`` on one passage builds the same prompt as
    ``answer``, so the answer is the same generation."""
    keys = {
        i: generation_key(
            reader.fingerprint, s.query_id, sha256_text(s.question), sha256_text(s.text)
        )
        for i, (s, row) in enumerate(zip(subjects, rows, strict=True))
        if len(row["passages"]) == 1
    }  # fmt: skip
    if not keys:
        return {}
    found = dict(
        store.lookup_generations(list(keys.values())).select("generation_key", "answer").rows()
    )
    return {i: found[key] for i, key in keys.items() if key in found}
