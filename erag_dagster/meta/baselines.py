"""Baseline relevance labels for the same retrieved lists eRAG labels (paper §3.2, Table 1 rows).

Every labeller returns ``query_id, doc_id, rank, label`` (label in [0, 1]) for the rows of the
given run, so every list metric applies to them exactly as to eRAG labels.

* ``provenance`` — human/provenance judgments (the qrels): label 1 when the judged relevance
  is >= ``relevance_level``, else 0; unjudged documents are 0 (trec_eval's convention).
* ``containment`` — 1 when the document text contains a gold answer (SQuAD-normalised token
  sequence match, :func:`~erag_dagster.metrics.downstream.answer_containment`).
* ``semantic`` — cosine similarity between the document and the gold answers (max over
  answers) with the default encoder, thresholded (:data:`SEMANTIC_THRESHOLDS`), a
  BERTScore-style label as practitioners use it; ``semantic_question`` compares with the
  question instead.
* ``llm_annotation`` — the reader asked whether the document is relevant to the question;
  label 1 when P(yes) >= 0.5 (the paper's LLM-annotator baseline).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from erag_dagster.errors import InputError
from erag_dagster.metrics.downstream import answer_containment

LABEL_SCHEMA = {"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int64, "label": pl.Float64}
#: Cosine thresholds, calibrated on the embedded SQuAD sample with the default encoder: gold
#: paragraph vs 4 random ones for 40 questions. Against the answer: gold median 0.32, p10 0.12;
#: others median 0.01, p90 0.11. Against the question: gold median 0.63, p10 0.46; others
#: median 0.01, p90 0.25. Thresholds sit between the gold p10 and the others' p90.
SEMANTIC_THRESHOLDS = {"answer": 0.2, "question": 0.4}


def _with_text(run: pl.DataFrame, queries: pl.DataFrame, corpus: pl.DataFrame) -> pl.DataFrame:
    texts = corpus.select(
        "doc_id",
        passage=pl.concat_str(
            [pl.col("title").fill_null(""), pl.col("text").fill_null("")], separator=" "
        ).str.strip_chars(),
    )
    joined = run.select("query_id", "doc_id", "rank").join(texts, on="doc_id", how="left")
    missing = joined.filter(pl.col("passage").is_null())
    if missing.height:
        row = missing.row(0, named=True)
        raise InputError(
            f"run names unknown document {row['doc_id']!r} (query {row['query_id']!r})"
        )
    return joined.join(
        queries.select("query_id", "question", "answers"), on="query_id", how="left"
    ).sort("query_id", "rank")


def provenance_labels(
    run: pl.DataFrame, qrels: pl.DataFrame, relevance_level: int = 1
) -> pl.DataFrame:
    """Binary labels from human/provenance judgments (unjudged → 0)."""
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
    labels = [
        answer_containment(passage, answers or [""]) if answers else 0.0
        for passage, answers in zip(joined["passage"], joined["answers"], strict=True)
    ]
    return joined.with_columns(label=pl.Series(labels, dtype=pl.Float64)).select(list(LABEL_SCHEMA))


def semantic_labels(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    encoder,
    against: str = "answer",
    threshold: float | None = None,
) -> pl.DataFrame:
    """Thresholded cosine similarity of each document to the gold answers or the question.

    Output has an extra ``similarity`` column (the raw cosine, max over gold answers).
    """
    if against not in ("answer", "question"):
        raise InputError(f"semantic labels compare against 'answer' or 'question', not {against!r}")
    threshold = SEMANTIC_THRESHOLDS[against] if threshold is None else threshold
    joined = _with_text(run, queries, corpus)
    docs = joined.select("doc_id", "passage").unique("doc_id", maintain_order=True)
    doc_vec = encoder.encode(docs.get_column("passage").to_list())
    doc_row = {d: i for i, d in enumerate(docs.get_column("doc_id").to_list())}
    if against == "question":
        qs = joined.select("query_id", "question").unique("query_id", maintain_order=True)
        q_vec = encoder.encode(qs.get_column("question").to_list())
        q_row = {q: i for i, q in enumerate(qs.get_column("query_id").to_list())}
        sims = [
            float(doc_vec[doc_row[d]] @ q_vec[q_row[q]])
            for q, d in zip(joined["query_id"], joined["doc_id"], strict=True)
        ]
    else:
        answers = (
            joined.select("query_id", "answers").unique("query_id", maintain_order=True)
            .explode("answers").drop_nulls("answers")
        )  # fmt: skip
        a_vec = encoder.encode(answers.get_column("answers").to_list())
        by_query: dict[str, list[int]] = {}
        for i, q in enumerate(answers.get_column("query_id").to_list()):
            by_query.setdefault(q, []).append(i)
        sims = []
        for q, d in zip(joined["query_id"], joined["doc_id"], strict=True):
            rows = by_query.get(q)
            sims.append(float(np.max(a_vec[rows] @ doc_vec[doc_row[d]])) if rows else 0.0)
    return joined.with_columns(
        similarity=pl.Series(sims, dtype=pl.Float64),
        label=(pl.Series(sims) >= threshold).cast(pl.Float64),
    ).select([*LABEL_SCHEMA, "similarity"])


def llm_annotation_labels(
    run: pl.DataFrame, queries: pl.DataFrame, corpus: pl.DataFrame, reader
) -> pl.DataFrame:
    """1.0 when the reader says the document is relevant (P(yes) >= 0.5); ``p_yes`` kept."""
    joined = _with_text(run, queries, corpus)
    items = list(zip(joined["question"].to_list(), joined["passage"].to_list(), strict=True))
    p_yes = reader.yes_probability(items) if items else []
    return joined.with_columns(
        p_yes=pl.Series(p_yes, dtype=pl.Float64),
        label=(pl.Series(p_yes, dtype=pl.Float64) >= 0.5).cast(pl.Float64),
    ).select([*LABEL_SCHEMA, "p_yes"])
