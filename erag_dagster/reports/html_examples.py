"""Where the retrievers disagree: the worked examples and the per-query drill-down of the
HTML report (:mod:`erag_dagster.reports.html`).

Plain polars over the run's frames (``erag_per_query``: ``reader, retriever, query_id`` + one
column per eRAG list metric; ``doc_labels`` by ``(reader, retriever)``: ``query_id, doc_id,
rank, label, answer``); the question and document texts are looked up by the caller.

- **disagreement** of a question, for one reader: the largest minus the smallest score of the
  headline metric over the retrievers (0 with one retriever). Ties: reader, then question id.
- **worked examples**: at the (reader, question) of the largest disagreement, for each
  retriever the document of its labelled top that the reader answered best from (highest
  label; ties: the better rank) — what the reader read, what it answered, how that scored.
- **drill-down**: every question, one column per (retriever, reader), sorted by its largest
  disagreement over the readers (largest first), so the table needs no script to sort.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from erag_dagster.meta.per_query import System

#: The drill-down shows at most this many questions (the most disputed; a note says so).
DRILLDOWN_ROWS = 200
#: A worked example's document excerpt: about this many words.
EXCERPT_WORDS = 70
#: A question in the drill-down is cut to this many characters.
QUESTION_CHARS = 90


@dataclass(frozen=True)
class WorkedExample:
    """One retriever's document at the most disputed question, as the reader saw it.

    ``score``: the retriever's headline metric at this question; ``label``: the reader's
    downstream score of ``answer`` against ``gold`` (in ``[0, 1]``); ``excerpt``: about
    :data:`EXCERPT_WORDS` words of the document, around the first gold answer it contains;
    ``rank``: the document's rank in the retriever's list (1 = first).
    """

    reader: str
    retriever: str
    query_id: str
    question: str
    gold: tuple[str, ...]
    doc_id: str
    rank: int
    excerpt: str
    answer: str
    label: float
    score: float
    reference: bool = False
    """``gold`` holds the reference answer the labels score against, not gold answers."""


def disagreement(per_query: pl.DataFrame, metric: str) -> pl.DataFrame:
    """``reader, query_id, spread`` (max − min of ``metric`` over the reader's retrievers at
    that question), largest spread first (ties: reader, question id). Empty input: empty
    frame with those columns."""
    return (
        per_query.group_by("reader", "query_id")
        .agg(spread=(pl.col(metric).max() - pl.col(metric).min()).cast(pl.Float64))
        .sort(["spread", "reader", "query_id"], descending=[True, False, False])
    )


def example_picks(
    per_query: pl.DataFrame, doc_labels: Mapping[System, pl.DataFrame], metric: str
) -> pl.DataFrame:
    """The documents of the worked examples (module docstring): one row per retriever of the
    most disputed (reader, question) — ``reader, retriever, query_id, doc_id, rank, label,
    answer, score`` — in the order of ``score`` (best first, ties by name). No labels for that
    question, or an empty ``per_query``: no row."""
    columns = ["reader", "retriever", "query_id", "doc_id", "rank", "label", "answer", "score"]
    spread = disagreement(per_query, metric)
    if spread.height == 0:
        return pl.DataFrame(schema=dict.fromkeys(columns, pl.String)).cast(
            {"rank": pl.Int64, "label": pl.Float64, "score": pl.Float64}
        )
    reader, query = spread.row(0)[:2]
    scores = per_query.filter((pl.col("reader") == reader) & (pl.col("query_id") == query))
    rows = []
    for retriever, score in scores.select("retriever", metric).iter_rows():
        labels = doc_labels.get((reader, retriever))
        if labels is None:
            continue
        top = (
            labels.filter(pl.col("query_id") == query)
            .sort(["label", "rank"], descending=[True, False])
            .head(1)
        )
        for doc in top.iter_rows(named=True):
            rows.append(
                (reader, retriever, query, str(doc["doc_id"]), int(doc["rank"]),
                 float(doc["label"]), str(doc.get("answer") or ""), float(score))
            )  # fmt: skip
    rows.sort(key=lambda r: (-r[-1], r[1]))
    schema = dict(zip(columns, [pl.String] * 4 + [pl.Int64, pl.Float64, pl.String, pl.Float64],
                      strict=True))  # fmt: skip
    return pl.DataFrame(rows, schema=schema, orient="row")


def excerpt(text: str, gold: Sequence[str], words: int = EXCERPT_WORDS) -> str:
    """About ``words`` words of ``text``: around the first gold answer the text contains
    (case-insensitive), else its beginning; ``…`` marks a cut at either end. Empty text: ``""``."""
    tokens = text.split()
    if len(tokens) <= words:
        return " ".join(tokens)
    lowered = text.lower()
    at = min((lowered.find(g.lower()) for g in gold if g and g.lower() in lowered), default=-1)
    centre = len(text[:at].split()) if at >= 0 else 0
    start = max(0, min(centre - words // 3, len(tokens) - words))
    cut = " ".join(tokens[start : start + words])
    return ("… " if start else "") + cut + (" …" if start + words < len(tokens) else "")


def marked_spans(text: str, gold: Sequence[str]) -> list[tuple[str, bool]]:
    """``text`` split into ``(part, is_gold)`` pieces: every case-insensitive occurrence of a
    gold answer (the longest first where two overlap) is its own piece, for ``<mark>``."""
    answers = sorted({g for g in gold if g.strip()}, key=len, reverse=True)
    if not answers:
        return [(text, False)] if text else []
    pattern = re.compile("|".join(re.escape(a) for a in answers), re.IGNORECASE)
    pieces, last = [], 0
    for match in pattern.finditer(text):
        if match.start() > last:
            pieces.append((text[last : match.start()], False))
        pieces.append((match.group(0), True))
        last = match.end()
    if last < len(text):
        pieces.append((text[last:], False))
    return pieces


def drilldown(
    per_query: pl.DataFrame,
    metric: str,
    questions: Mapping[str, str],
    names: Mapping[str, str],
    limit: int = DRILLDOWN_ROWS,
) -> pl.DataFrame:
    """The drill-down (module docstring): ``question`` (its text cut to
    :data:`QUESTION_CHARS`; the id where ``questions`` lacks it), one ``metric`` column per
    ``retriever / reader`` (display ``names`` of the partition keys; the reader left out with
    one reader), ``disagreement`` (the largest spread over the readers) and ``question id``;
    at most ``limit`` rows, the most disputed first (ties: question id)."""
    readers = per_query.get_column("reader").unique().sort().to_list()
    spread = disagreement(per_query, metric).group_by("query_id").agg(pl.col("spread").max())

    def column(reader: str, retriever: str) -> str:
        name = names.get(retriever, retriever)
        return name if len(readers) == 1 else f"{name} / {names.get(reader, reader)}"

    wide_frame = (
        per_query.with_columns(
            system=pl.struct("reader", "retriever").map_elements(
                lambda s: column(s["reader"], s["retriever"]), return_dtype=pl.String
            )
        )
        .pivot(on="system", index="query_id", values=metric, sort_columns=True)
        .join(spread, on="query_id", how="left")
        .sort(["spread", "query_id"], descending=[True, False])
        .head(limit)
    )

    def question(qid: str) -> str:
        text = questions.get(qid, "")
        text = text if len(text) <= QUESTION_CHARS else text[: QUESTION_CHARS - 1] + "…"
        return text or qid

    systems = [c for c in wide_frame.columns if c not in ("query_id", "spread")]
    return wide_frame.select(
        pl.col("query_id").map_elements(question, return_dtype=pl.String).alias("question"),
        *systems,
        pl.col("spread").alias("disagreement"),
        pl.col("query_id").alias("question id"),
    )
