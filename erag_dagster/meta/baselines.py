"""Baseline relevance labels for the same retrieved lists eRAG labels (paper §3.2, Table 1 rows).

Every labeller returns ``query_id, doc_id, rank, label`` (label in [0, 1]) for the rows of the
given run, so every list metric applies to them exactly as to eRAG labels.

* ``provenance`` — human/provenance judgments (the qrels): label 1 when the judged relevance
  is >= ``relevance_level``, else 0; unjudged documents are 0 (trec_eval's convention).
* ``containment`` — 1 when the document text contains a gold answer (SQuAD-normalised token
  sequence match, :func:`~erag_dagster.metrics.downstream.answer_containment`).
* ``semantic_answer`` — BERTScore-style greedy token matching between the document and the gold
  answers with the default encoder, thresholded; ``semantic_question`` — embedding cosine with
  the question, thresholded (thresholds and their calibration: ``meta/semantic.py``).
* ``llm_annotation`` — the reader asked whether the document is relevant to the question;
  label 1 when P(yes) >= 0.5 (the paper's LLM-annotator baseline).
"""

from __future__ import annotations

import polars as pl

from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.core.hashing import sha256_json
from erag_dagster.labels.cached import Subject, generate_stored
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.reader_calls import ReaderCalls, reader_calls
from erag_dagster.labels.step_notes import StepNotes
from erag_dagster.metrics.downstream import get_downstream_metric
from erag_dagster.readers.passages import run_with_passages

LABEL_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64, "label": pl.Float64}


def _with_text(run: pl.DataFrame, queries: pl.DataFrame, corpus: pl.DataFrame) -> pl.DataFrame:
    joined = run_with_passages(run.select("query_id", "doc_id", "rank"), corpus)
    return joined.join(
        queries.select("query_id", "question", "answers"), on="query_id", how="left"
    ).sort("query_id", "rank")


def provenance_labels(run: pl.DataFrame, qrels: pl.DataFrame, relevance_level: int) -> pl.DataFrame:
    """Binary labels from human/provenance judgments: 1 when judged ``>= relevance_level``
    (the configuration's, trec_eval ``-l``), else 0 (unjudged → 0)."""
    return (
        run.select("query_id", "doc_id", "rank")
        .join(
            qrels.select("query_id", "doc_id", "relevance"), on=["query_id", "doc_id"], how="left"
        )
        .with_columns(label=(pl.col("relevance").fill_null(0) >= relevance_level).cast(pl.Float64))
        .select(list(LABEL_SCHEMA))
        .sort("query_id", "rank")
    )


def containment_labels(
    run: pl.DataFrame, queries: pl.DataFrame, corpus: pl.DataFrame
) -> pl.DataFrame:
    """1.0 when the document contains a (normalised) gold answer, else 0.0."""
    joined = _with_text(run, queries, corpus)
    contains = get_downstream_metric("contains")
    labels = [
        contains(passage, answers or [""]) if answers else 0.0
        for passage, answers in zip(
            joined["passage"].to_list(), joined["answers"].to_list(), strict=True
        )
    ]
    return joined.with_columns(label=pl.Series(labels, dtype=pl.Float64)).select(list(LABEL_SCHEMA))


def semantic_labels(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    encoder,
    against: str = "answer",
) -> pl.DataFrame:
    """BERTScore-style labels from :mod:`erag_dagster.meta.semantic` with its calibrated
    thresholds: greedy token matching (BERTScore recall) against the gold answers, embedding
    cosine against the question. Extra column ``similarity``."""
    from erag_dagster.meta.semantic import semantic_labels as similarity_labels

    method = "bertscore" if against == "answer" else "cosine"
    return similarity_labels(run, corpus, queries, encoder, method=method, against=against)


#: The LLM annotation's task version: its ``name/vN`` is part of every stored P(yes)'s key
#: (:func:`annotation_fingerprint`). The other baselines are computed, not stored: the
#: containment labels are the ``contains`` downstream metric (its version is theirs).
ANNOTATION = CodeVersion("relevance_yes_probability", "1")
#: Pairs per Ray actor call of the annotation (in this process: one call for all pairs).
ANNOTATION_CHUNK = 64


def annotation_identity(reader) -> dict:
    """What shapes P(yes), and only that: the reader's model, libraries and dtype, the fixed
    relevance prompt (:data:`~erag_dagster.readers.prompts.RELEVANCE_TEMPLATE`) with the
    reader's ``max_input_tokens`` budget, and the task version. Not the reader's own prompt,
    ``max_new_tokens`` or post-processing: P(yes) reads one forward pass's logits, generates
    nothing and ignores the reader's template."""
    from erag_dagster.readers.prompts import (
        RELEVANCE_SYSTEM_PROMPT,
        RELEVANCE_TEMPLATE,
        prompt_builder_part,
    )

    identity = reader.identity()
    shaping = {k: v for k, v in identity.items() if k not in ("prompt", "decoding")}
    shaping.pop("postprocess_version", None)
    shaping["prompt"] = {
        **prompt_builder_part(),  # the relevance prompt is built by the same builder
        "system_prompt": RELEVANCE_SYSTEM_PROMPT,
        "prompt_template": RELEVANCE_TEMPLATE,
        "max_input_tokens": identity["prompt"]["max_input_tokens"],
    }
    shaping["decoding"] = {"scored": "P(yes) of the first answer token", "max_new_tokens": 0}
    return {"task": ANNOTATION.task, "reader": shaping}


def annotation_fingerprint(reader) -> str:
    """Fingerprint of the LLM-annotation task: sha256 of :func:`annotation_identity`."""
    return sha256_json(annotation_identity(reader))


def llm_annotation_labels(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader,
    store=None,
    run_id: str | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
) -> pl.DataFrame:
    """1.0 when the reader says the document is relevant (P(yes) >= 0.5); ``p_yes`` kept.

    With a :class:`~erag_dagster.labels.store.LabelStore`, P(yes) values are stored like reader
    answers under :func:`annotation_fingerprint` (the text ``repr(p)``), so a pair shared by
    two retrievers, or a re-run, is asked once. ``executor``: where the reader runs
    (:mod:`erag_dagster.labels.reader_calls`; on Ray the pairs are cut into chunks of
    :data:`ANNOTATION_CHUNK` over the actors).
    """
    joined = _with_text(run, queries, corpus)
    items = list(zip(joined["question"].to_list(), joined["passage"].to_list(), strict=True))
    subjects = [
        Subject(qid, question, did, passage)
        for qid, did, (question, passage) in zip(
            joined["query_id"].to_list(), joined["doc_id"].to_list(), items, strict=True
        )
    ]
    notes = StepNotes("LLM annotation", reader, lambda part: [items[i] for i in part])
    with reader_calls(reader, executor) as calls:

        def generate(part: list[int]) -> list[str]:
            asked = [items[i] for i in part]
            p_yes = calls("yes_probability", asked, chunk=ANNOTATION_CHUNK)
            return [repr(float(v)) for v in p_yes]

        outputs = generate_stored(
            subjects,
            generate,
            store,
            annotation_fingerprint(reader),
            f"{reader.name}:annotation",
            annotation_identity(reader),
            run_id=run_id,
            step=max(1, len(subjects)),
            progress=notes.progress,
            estimate=notes.estimate,
        ).outputs
    p_yes = [float(v) for v in outputs]
    return joined.with_columns(
        p_yes=pl.Series(p_yes, dtype=pl.Float64),
        label=(pl.Series(p_yes, dtype=pl.Float64) >= 0.5).cast(pl.Float64),
    ).select([*LABEL_SCHEMA, "p_yes"])
