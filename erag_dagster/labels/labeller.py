"""Label a retrieval run with eRAG (Salemi & Zamani, SIGIR 2024, §2).

For every ranked ``(query, document)`` of a run the reader answers the question from that
document ALONE; the downstream metric scores the answer against the query's gold answers, and
the score in [0, 1] is the document's relevance label.

Work is done once per content: answers are keyed by (reader fingerprint, query id, question
text, doc id, document text) and scores by (answer, gold answers, metric) in the
:class:`~erag_dagster.labels.store.LabelStore`, so

* the same pair retrieved by two retrievers (or two runs) is generated once;
* a re-run after a crash resumes: generations are committed every ``flush_every`` pairs;
* changing only the metric re-scores stored answers and runs the reader zero times.

Input policy (one-line :class:`~erag_dagster.errors.InputError`): an empty run, a run missing
``query_id``/``doc_id``/``rank``, a run naming an unknown document or query (the first one in
run order is named), a query without gold answers, an unknown metric, or a metric value that is
NaN or outside [0, 1]. Duplicate (query, doc) rows in a run are labelled alike.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import polars as pl

from erag_dagster.data.schema import require_answers
from erag_dagster.errors import InputError
from erag_dagster.labels.store import (
    LabelStore,
    generation_key,
    gold_hash,
    score_key,
    sha256_text,
    utc_now,
)
from erag_dagster.metrics.downstream import get_downstream_metric
from erag_dagster.readers.prompts import reader_passage

LABEL_COLUMNS = ("query_id", "doc_id", "rank", "label", "answer", "reader_fingerprint", "metric")
Log = Callable[[str], None]


class Reader(Protocol):
    """What the labeller needs of a reader (``TransformersReader`` satisfies it)."""

    @property
    def fingerprint(self) -> str: ...

    @property
    def name(self) -> str: ...

    def identity(self) -> dict[str, Any]: ...

    def answer(self, items: Sequence[tuple[str, str]]) -> list[str]: ...


@dataclass(frozen=True)
class LabelResult:
    """Labels of a run and where they came from.

    ``labels``: one row per run row — ``query_id, doc_id, rank, label (f64 in [0, 1]), answer,
    reader_fingerprint, metric`` — sorted by query id then rank. ``judged_now``: distinct pairs
    the reader answered in this call; ``from_store``: distinct pairs whose answer was already
    stored; ``scored_now``: distinct (answer, golds, metric) scores computed in this call;
    ``generation_seconds``: reader wall time of this call, seconds.
    """

    labels: pl.DataFrame
    judged_now: int
    from_store: int
    scored_now: int
    generation_seconds: float = 0.0


def label_run(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader: Reader,
    metric: str,
    store: LabelStore,
    dagster_run_id: str | None = None,
    log: Log | None = None,
    flush_every: int = 64,
) -> LabelResult:
    """eRAG labels for every row of ``run`` (tables as in ``docs/ARCHITECTURE.md``).

    Only pairs missing from ``store`` call ``reader.answer``, ``flush_every`` pairs at a time
    (each chunk committed before the next starts, shortest prompts first). See the module
    docstring for the input policy.
    """
    say = log or (lambda _msg: None)
    score_fn = get_downstream_metric(metric)
    if flush_every < 1:
        raise InputError(f"flush_every must be >= 1, got {flush_every}")
    rows = _joined(run, queries, corpus)
    fingerprint = reader.fingerprint
    rows = _with_keys(rows, fingerprint)
    pairs = rows.unique("generation_key", keep="first", maintain_order=True)

    found = store.lookup_generations(pairs.get_column("generation_key"))
    missing = pairs.join(found.select("generation_key"), on="generation_key", how="anti")
    say(
        f"labelling {rows.height} run rows = {pairs.height} distinct pairs with reader "
        f"{getattr(reader, 'name', '?')} ({fingerprint[:16]}): {found.height} in the store, "
        f"{missing.height} to generate"
    )
    store.register_reader(fingerprint, reader.name, reader.identity(), _spec_dict(reader))
    seconds = _generate(missing, reader, store, dagster_run_id, flush_every, say)

    # Read the answers back: if another process stored a pair first, its answer is the one kept.
    answers = store.lookup_generations(pairs.get_column("generation_key")).select(
        "generation_key", "answer"
    )
    if answers.height != pairs.height:
        raise RuntimeError(
            f"{store.path}: {pairs.height - answers.height} generations missing after writing"
        )
    rows = rows.join(answers, on="generation_key", how="left", maintain_order="left")
    rows = rows.with_columns(
        pl.Series(
            "score_key",
            [
                score_key(g, h, metric)
                for g, h in rows.select("generation_key", "gold_hash").iter_rows()
            ],
            dtype=pl.String,
        )
    )
    scores, scored_now = _score(rows, metric, score_fn, store, dagster_run_id)
    if scored_now:
        say(f"scored {scored_now} new answers with {metric}")
    labels = (
        rows.join(scores, on="score_key", how="left", maintain_order="left")
        .with_columns(
            pl.col("score").alias("label"),
            pl.lit(fingerprint).alias("reader_fingerprint"),
            pl.lit(metric).alias("metric"),
        )
        .sort("query_id", "rank", maintain_order=True)
        .select(LABEL_COLUMNS)
    )
    return LabelResult(
        labels=labels,
        judged_now=missing.height,
        from_store=found.height,
        scored_now=scored_now,
        generation_seconds=seconds,
    )


# -- steps ---------------------------------------------------------------------------------------


def _joined(run: pl.DataFrame, queries: pl.DataFrame, corpus: pl.DataFrame) -> pl.DataFrame:
    """Run rows with ``question, answers, passage`` (the text the reader sees), validated."""
    needed = [c for c in ("query_id", "doc_id", "rank") if c not in run.columns]
    if needed:
        raise InputError(f"run lacks column(s) {', '.join(needed)}")
    if run.height == 0:
        raise InputError("the run is empty: nothing to label")
    run = run.select(
        pl.col("query_id").cast(pl.String), pl.col("doc_id").cast(pl.String), pl.col("rank")
    )
    known_docs = corpus.get_column("doc_id").cast(pl.String)
    unknown = run.filter(~pl.col("doc_id").is_in(known_docs.implode()))
    if unknown.height:
        first = unknown.row(0, named=True)
        raise InputError(
            f"the run names unknown doc_id {first['doc_id']!r} (query {first['query_id']!r}; "
            f"{unknown.height} such rows): not in the corpus"
        )
    known_queries = queries.get_column("query_id").cast(pl.String)
    unknown = run.filter(~pl.col("query_id").is_in(known_queries.implode()))
    if unknown.height:
        raise InputError(
            f"the run names unknown query_id {unknown.get_column('query_id')[0]!r} "
            f"({unknown.height} such rows): not in the queries"
        )
    run_queries = run.select("query_id").unique(maintain_order=True)
    used = run_queries.join(
        queries.select(pl.col("query_id").cast(pl.String), "question", "answers"),
        on="query_id",
        how="left",
        maintain_order="left",
    )
    require_answers(used, "labelling")
    empty_q = used.filter(
        pl.col("question").is_null() | (pl.col("question").str.strip_chars() == "")
    )
    if empty_q.height:
        raise InputError(f"labelling: query {empty_q.get_column('query_id')[0]!r} has no question")
    docs = (
        run.select("doc_id")
        .unique(maintain_order=True)
        .join(
            corpus.select(pl.col("doc_id").cast(pl.String), "title", "text"),
            on="doc_id",
            how="left",
            maintain_order="left",
        )
    )
    passages = [reader_passage(t, x) for t, x in docs.select("title", "text").rows()]
    docs = docs.select("doc_id").with_columns(pl.Series("passage", passages, dtype=pl.String))
    return run.join(used, on="query_id", how="left", maintain_order="left").join(
        docs, on="doc_id", how="left", maintain_order="left"
    )


def _with_keys(rows: pl.DataFrame, fingerprint: str) -> pl.DataFrame:
    """Add ``question_hash, text_hash, generation_key, gold_hash`` (hashing each text once)."""
    q_hash = {q: sha256_text(q) for q in rows.get_column("question").unique().to_list()}
    t_hash = {p: sha256_text(p) for p in rows.get_column("passage").unique().to_list()}
    questions = [q_hash[q] for q in rows.get_column("question").to_list()]
    texts = [t_hash[p] for p in rows.get_column("passage").to_list()]
    keys = [
        generation_key(fingerprint, qid, qh, did, th)
        for qid, did, qh, th in zip(
            rows.get_column("query_id").to_list(),
            rows.get_column("doc_id").to_list(),
            questions,
            texts,
            strict=True,
        )
    ]
    golds = [gold_hash(a) for a in rows.get_column("answers").to_list()]
    return rows.with_columns(
        pl.Series("question_hash", questions, dtype=pl.String),
        pl.Series("text_hash", texts, dtype=pl.String),
        pl.Series("generation_key", keys, dtype=pl.String),
        pl.Series("gold_hash", golds, dtype=pl.String),
    )


def _generate(
    missing: pl.DataFrame,
    reader: Reader,
    store: LabelStore,
    dagster_run_id: str | None,
    flush_every: int,
    say: Log,
) -> float:
    """Answer the missing pairs chunk by chunk, committing each chunk; returns seconds spent."""
    if missing.height == 0:
        return 0.0
    # Similar lengths in one chunk keep padding small inside the reader's batches.
    todo = missing.with_columns(
        (pl.col("question").str.len_chars() + pl.col("passage").str.len_chars()).alias("_chars")
    ).sort("_chars", maintain_order=True)
    total, done, spent = todo.height, 0, 0.0
    for start in range(0, total, flush_every):
        chunk = todo.slice(start, flush_every)
        items = list(zip(chunk.get_column("question"), chunk.get_column("passage"), strict=True))
        began = time.perf_counter()
        answers = reader.answer(items)
        seconds = time.perf_counter() - began
        if len(answers) != len(items):
            raise RuntimeError(f"reader returned {len(answers)} answers for {len(items)} pairs")
        spent += seconds
        frame = chunk.select(
            "generation_key", "query_id", "question_hash", "doc_id", "text_hash"
        ).with_columns(
            pl.lit(reader.fingerprint).alias("reader_fingerprint"),
            pl.Series("answer", [str(a) for a in answers], dtype=pl.String),
            pl.lit(seconds / len(items)).alias("gen_seconds"),
            pl.lit(dagster_run_id, dtype=pl.String).alias("dagster_run_id"),
            pl.lit(utc_now()).alias("created_at"),
        )
        store.put_generations(frame)
        done += len(items)
        say(f"generated {done}/{total} pairs ({done / spent:.2f} pairs/s)")
    return spent


def _score(
    rows: pl.DataFrame,
    metric: str,
    score_fn: Callable[[str, Sequence[str]], float],
    store: LabelStore,
    dagster_run_id: str | None,
) -> tuple[pl.DataFrame, int]:
    """``(score_key, score)`` for every distinct score key of ``rows``, and how many of them
    were computed now (the others come from the store)."""
    distinct = rows.unique("score_key", keep="first", maintain_order=True)
    stored = store.lookup_scores(distinct.get_column("score_key"))
    missing = distinct.join(stored.select("score_key"), on="score_key", how="anti")
    values = [
        _checked(score_fn(answer, golds), metric, qid, did)
        for qid, did, answer, golds in missing.select(
            "query_id", "doc_id", "answer", "answers"
        ).rows()
    ]
    fresh = missing.select("score_key").with_columns(pl.Series("score", values, dtype=pl.Float64))
    if missing.height:
        store.put_scores(
            missing.select("score_key", "generation_key", "gold_hash").with_columns(
                pl.lit(metric).alias("metric"),
                fresh.get_column("score"),
                pl.lit(dagster_run_id, dtype=pl.String).alias("dagster_run_id"),
                missing.get_column("answers").alias("gold_answers"),
            )
        )
    return pl.concat([stored.select("score_key", "score"), fresh]), missing.height


def _checked(value: Any, metric: str, query_id: str, doc_id: str) -> float:
    """A metric value as float, refusing NaN, infinities and values outside [0, 1]."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InputError(
            f"downstream metric {metric!r} gave {value!r} for query {query_id!r}, doc {doc_id!r}; "
            "labels must be numbers in [0, 1]"
        )
    return number


def _spec_dict(reader: Reader) -> dict[str, Any] | None:
    spec = getattr(reader, "spec", None)
    to_dict = getattr(spec, "to_dict", None)
    return to_dict() if callable(to_dict) else None
