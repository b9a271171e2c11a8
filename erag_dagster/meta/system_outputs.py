"""What one system (a reader over one retriever's runs) yields for the meta-evaluation:
end-to-end scores at every depth, and the set of baseline labels of its top-k lists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from erag_dagster.core.callbacks import Log
from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.reader_calls import reader_calls
from erag_dagster.labels.signed import closed_book_labels
from erag_dagster.meta.baselines import (
    ANNOTATION,
    containment_labels,
    llm_annotation_labels,
    provenance_labels,
    semantic_labels,
)
from erag_dagster.meta.end_to_end import evaluate_end_to_end
from erag_dagster.meta.label_methods import (
    CLOSED_BOOK_METHOD,
    extra_labels,
    label_method_code_versions,
)
from erag_dagster.metrics.downstream import get_downstream_metric
from erag_dagster.readers import prompts


@dataclass(frozen=True)
class EndToEndScores:
    """``scores``: the :func:`evaluate_end_to_end` rows of every depth, concatenated;
    ``seconds``: reader wall time summed over the depths (s)."""

    scores: pl.DataFrame
    seconds: float


def end_to_end_at_depths(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader,
    metric: str,
    ks: Sequence[int],
    log: Log | None = None,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | None = None,
) -> EndToEndScores:
    """The reader answers from the top-``k`` documents together, for every ``k`` in ``ks``;
    ``executor``: where (:mod:`erag_dagster.labels.reader_calls`; one Ray pool for all ``ks``)."""
    frames, seconds = [], 0.0
    with reader_calls(reader, executor, log) as calls:
        for k in ks:
            result = evaluate_end_to_end(
                run, queries, corpus, reader, metric, k, log, store=store,
                run_id=run_id, executor=calls,
            )  # fmt: skip
            frames.append(result.scores)
            seconds += result.seconds
    return EndToEndScores(pl.concat(frames), seconds)


def baseline_code_versions(metric: str, methods: Sequence[str]) -> tuple[CodeVersion, ...]:
    """The versioned code :func:`baseline_label_set` depends on
    (:mod:`erag_dagster.core.code_versions`): the ``contains`` metric (the containment labels),
    the LLM annotation's task and the prompt builder (it builds the relevance prompt), the
    closed-book answer's task with the code of an answer scored with ``metric`` (the
    closed-book row), and the code of the extra label ``methods`` under ``metric``. Provenance
    and semantic labels are computed from the judgments and the encoder, and stored nowhere."""
    from erag_dagster.labels.labeller import erag_code_versions
    from erag_dagster.labels.signed import CLOSED_BOOK

    return (
        get_downstream_metric("contains"),
        ANNOTATION,
        prompts.PROMPT_BUILDER,
        *erag_code_versions(metric),
        CLOSED_BOOK,
        *label_method_code_versions(metric, methods),
    )


def baseline_label_set(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    qrels: pl.DataFrame,
    encoder,
    reader,
    store=None,
    run_id: str | None = None,
    log: Log | None = None,
    *,
    metric: str,
    relevance_level: int,
    methods: Sequence[str] = (),
    executor: ExecutorSpec | None = None,
) -> pl.DataFrame:
    """``query_id, doc_id, rank, label, method`` for every baseline labelling of ``run``:
    provenance (the judgments, relevant at ``relevance_level``), containment, semantic
    similarity to the answer and to the question (``encoder``), and LLM annotation (``reader``,
    answers kept in ``store``; left out, with one logged line, when the reader cannot give
    P("yes"): a server without ``logprobs``); the closed-book reference row (``closed_book``:
    the reader's score with no document, given to every document of the question,
    :func:`~erag_dagster.labels.signed.closed_book_labels`); plus the extra labellings ``methods``
    (:mod:`erag_dagster.meta.label_methods`, scored with the downstream ``metric``; signed ones
    have labels in [-1, 1]). ``executor``: where the reader runs
    (:mod:`erag_dagster.labels.reader_calls`; its tasks share one Ray pool)."""
    parts = {
        "provenance": provenance_labels(run, qrels, relevance_level),
        "containment": containment_labels(run, queries, corpus),
        "semantic_answer": semantic_labels(run, queries, corpus, encoder, against="answer"),
        "semantic_question": semantic_labels(run, queries, corpus, encoder, against="question"),
    }
    with reader_calls(reader, executor, log) as calls:
        unavailable = getattr(reader, "p_yes_unavailable", lambda: None)()
        if unavailable:  # no logprobs from the server: skip the baseline rather than fake it
            if log is not None:
                log(f"LLM annotation baseline skipped: {unavailable}")
        else:
            if log is not None:
                log(f"LLM annotation of {run.height} (question, document) pairs")
            parts["llm_annotation"] = llm_annotation_labels(
                run, queries, corpus, reader, store=store, run_id=run_id, executor=calls
            )
        parts[CLOSED_BOOK_METHOD] = closed_book_labels(
            run, queries, reader, metric, store, run_id, executor=calls
        )
        if methods:
            if log is not None:
                log(f"extra label methods {', '.join(methods)} of {run.height} pairs")
            parts |= extra_labels(
                run, queries, corpus, reader, metric, methods, store, run_id, log, calls
            )
    return pl.concat(
        [
            frame.select("query_id", "doc_id", "rank", "label").with_columns(method=pl.lit(name))
            for name, frame in parts.items()
        ]
    )
