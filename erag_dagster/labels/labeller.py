"""Label a retrieval run with eRAG (Salemi & Zamani, SIGIR 2024, §2).

For every ranked ``(query, document)`` of a run the reader answers the question from that
document ALONE; the downstream metric scores the answer against the query's gold answers, and
the score in [0, 1] is the document's relevance label.

Work is done once per content: answers are keyed by (reader fingerprint, query id, question
text, document text) and scores by (answer, gold answers, metric and its version) in the
:class:`~erag_dagster.labels.store.LabelStore`, so

* the same pair retrieved by two retrievers (or two runs) is generated once;
* a re-run after a crash resumes: generations are committed by count or time
  (:class:`~erag_dagster.labels.cached.CommitPolicy`, default every 64 pairs or 10 s), so a
  ``kill -9`` loses at most that window plus one model batch of reader work;
* changing only the metric, or raising its version (:mod:`erag_dagster.core.code_versions`),
  re-scores stored answers and runs the reader zero times.

eRAG labels have no version of their own: a label is the metric's score of the reader's answer,
so its identity is the reader fingerprint (the prompt builder's and post-processing's versions
included: :mod:`erag_dagster.readers.fingerprint`) and the metric's version.

Input policy (one-line :class:`~erag_dagster.core.errors.InputError`): an empty run, a run missing
``query_id``/``doc_id``/``rank``, a run naming an unknown document or query (the first one in
run order is named), a query without gold answers, an unknown metric, or a metric value that is
NaN or outside [0, 1]. Duplicate (query, doc) rows in a run are labelled alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import polars as pl

from erag_dagster.core.callbacks import NOTES, Log, Progress
from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.core.errors import InputError
from erag_dagster.data.schema import require_answers, require_questions
from erag_dagster.labels.cached import (
    CommitPolicy,
    Generated,
    OnBatch,
    Subject,
    generate_stored,
)
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.labels.reader_calls import ReaderCalls, reader_calls, spec_dict
from erag_dagster.labels.step_notes import StepNotes
from erag_dagster.labels.store import LabelStoreBase, gold_hash, score_key
from erag_dagster.metrics.downstream import DownstreamMeasure, get_downstream_metric
from erag_dagster.metrics.label_value import checked_label
from erag_dagster.readers import prompts
from erag_dagster.readers.accounting import (
    estimate_line,
    estimate_summary,
    run_estimate,
    usage_delta,
    usage_of,
)
from erag_dagster.readers.passages import check_run_queries, run_with_passages
from erag_dagster.readers.presets import PRESETS

LABEL_COLUMNS = ("query_id", "doc_id", "rank", "label", "answer", "reader_fingerprint", "metric")
REFERENCE_LABEL_COLUMNS = ("reference_answer", "reference")
"""The columns a label scored against a reference answer adds: that answer, and its provenance
(canonical JSON: which reader, its fingerprint, the documents it read, its generation key)."""


class Reader(Protocol):
    """What the labeller needs of a reader (every backend's reader satisfies it:
    ``readers/factory.py``)."""

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
    ``generation_seconds``: reader wall time of this call, seconds. ``estimate``: the token
    estimate made before generating (:func:`~erag_dagster.readers.accounting.run_estimate`;
    ``{}`` when nothing was generated); ``usage``: tokens in/out, requests and retries the
    reader reported for this call (:func:`~erag_dagster.readers.accounting.usage_delta`).
    """

    labels: pl.DataFrame
    judged_now: int
    from_store: int
    scored_now: int
    generation_seconds: float = 0.0
    estimate: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)


def label_run(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader: Reader,
    metric: str,
    store: LabelStoreBase,
    run_id: str | None = None,
    log: Log | None = None,
    commit: CommitPolicy | None = None,
    executor: ExecutorSpec | ReaderCalls | None = None,
    progress: Progress | None = None,
    references: pl.DataFrame | None = None,
) -> LabelResult:
    """eRAG labels for every row of ``run`` (tables as in ``docs/ARCHITECTURE.md``).

    Only pairs missing from ``store`` call ``reader.answer``, ``commit.every_pairs`` pairs per
    call, shortest prompts first, through :func:`~erag_dagster.labels.cached.generate_stored`
    (commits by count or time; ``commit`` defaults to :meth:`CommitPolicy.from_env`).
    ``run_id`` is recorded with every row written. With ``executor`` on Ray the unseen pairs
    are answered by reader replicas on Ray actors (:mod:`erag_dagster.labels.ray_pool`), in the
    same chunks, committed by the same engine; a :class:`ReaderCalls` shares its pool with the
    caller's other tasks (:mod:`erag_dagster.labels.reader_calls`). ``progress(done, total)``
    receives the pairs generated so far after each step and at least every 10 s while the
    reader works (so does ``log``, as a line). See the module docstring for the input policy.

    ``references`` (:data:`~erag_dagster.labels.reference.REFERENCE_COLUMNS`: a reference answer
    per query, its gold hash and provenance): score against the reference instead of the gold
    answers (:mod:`erag_dagster.labels.reference`); the queries need no gold answers then, and
    every label row carries the reference answer and its provenance
    (:data:`REFERENCE_LABEL_COLUMNS`).
    """
    say = log or (lambda _msg: None)
    measure = get_downstream_metric(metric)
    policy = commit or CommitPolicy.from_env()
    rows = labelling_rows(run, queries, corpus, references)
    # One subject per distinct (query, doc); similar lengths together keep padding small.
    pairs = (
        rows.unique(["query_id", "doc_id"], keep="first", maintain_order=True)
        .with_columns(
            (pl.col("question").str.len_chars() + pl.col("passage").str.len_chars()).alias("_chars")
        )
        .sort("_chars", maintain_order=True)
    )
    subjects = [
        Subject(qid, question, did, passage)
        for qid, did, question, passage in pairs.select(
            "query_id", "doc_id", "question", "passage"
        ).rows()
    ]
    fingerprint = reader.fingerprint
    say(
        f"labelling {rows.height} run rows = {pairs.height} distinct pairs with reader "
        f"{getattr(reader, 'name', '?')} ({fingerprint[:16]})"
    )
    began = time.perf_counter()

    def estimate(part: list[int]) -> dict[str, Any]:
        found = run_estimate(reader, [(subjects[i].question, subjects[i].text) for i in part])
        if found:
            say(estimate_line(getattr(reader, "name", "?"), found))
            NOTES.info(estimate_summary(found))  # the main job's terminal (erag-dagster run)
        return found

    eta = StepNotes("eRAG labels", reader, lambda part: [])  # the ETA lines (the estimate: above)

    def report(done: int, total: int) -> None:
        elapsed = time.perf_counter() - began
        rate = done / max(elapsed, 1e-9)
        say(f"generated {done}/{total} pairs in {elapsed:.0f} s ({rate:.2f} pairs/s)")
        eta.progress(done, total)
        if progress is not None:
            progress(done, total)

    def stored(generate: Callable[..., Sequence[str]], step: int, streams: bool) -> Generated:
        return generate_stored(
            subjects,
            generate,
            store,
            fingerprint,
            reader.name,
            reader.identity(),
            spec=spec_dict(reader),
            run_id=run_id,
            step=step,
            streams=streams,
            commit=policy,
            progress=report,
            log=say,
            estimate=estimate,
        )

    used_before = usage_of(reader)
    with reader_calls(reader, executor, say) as calls:

        def generate(part: list[int], on_batch: OnBatch | None = None) -> list[str]:
            items = [(subjects[i].question, subjects[i].text) for i in part]
            shown = report if calls.on_ray else None  # in-process: the engine reports it
            return calls("answer", items, on_batch, chunk=policy.every_pairs, progress=shown)

        # A reader may ask for larger calls (many requests in flight, one engine batch); its
        # answers still stream through on_batch, so commits keep the policy's count/time. On
        # Ray one call covers every unseen pair: the pool cuts it into the policy's chunks.
        step = max(policy.every_pairs, int(getattr(reader, "generation_step", 0) or 0))
        generated = stored(generate, calls.step(step, len(subjects)), calls.streams("answer"))
    used = usage_delta(used_before, usage_of(reader))
    if used.get("requests"):
        say(
            f"{getattr(reader, 'name', '?')}: {used['prompt_tokens']} prompt tokens in, "
            f"{used['completion_tokens']} out, {used['requests']} requests, "
            f"{used['retries']} retries"
        )
    answers = pairs.select("query_id", "doc_id").with_columns(
        pl.Series("generation_key", generated.keys, dtype=pl.String),
        pl.Series("answer", generated.outputs, dtype=pl.String),
    )
    rows = rows.join(answers, on=["query_id", "doc_id"], how="left", maintain_order="left")
    if references is None:
        golds = {tuple(a): gold_hash(a) for a in rows.get_column("answers").unique().to_list()}
        rows = rows.with_columns(
            pl.Series(
                "gold_hash",
                [golds[tuple(a)] for a in rows.get_column("answers").to_list()],
                dtype=pl.String,
            )
        )
    rows = rows.with_columns(
        pl.Series(
            "score_key",
            [
                score_key(g, h, measure)
                for g, h in rows.select("generation_key", "gold_hash").rows()
            ],
            dtype=pl.String,
        )
    )
    scores, scored_now = _score(rows, measure, store, run_id)
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
        .select(*LABEL_COLUMNS, *(REFERENCE_LABEL_COLUMNS if references is not None else ()))
    )
    return LabelResult(
        labels=labels,
        judged_now=generated.generated,
        from_store=generated.from_store,
        scored_now=scored_now,
        generation_seconds=generated.seconds,
        estimate=generated.estimate,
        usage=used,
    )


def erag_code_versions(metric: str) -> tuple[CodeVersion, ...]:
    """The versioned code an eRAG label of ``metric`` depends on: the metric, the prompt
    builder, the prompt presets (:mod:`erag_dagster.readers.presets`) and the answer
    extraction (:mod:`erag_dagster.core.code_versions`); an unknown metric is an
    :class:`InputError`."""
    return (
        get_downstream_metric(metric),
        prompts.PROMPT_BUILDER,
        PRESETS,
        prompts.POSTPROCESS,
    )


# -- steps ---------------------------------------------------------------------------------------


def labelling_rows(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    references: pl.DataFrame | None = None,
    *,
    needs_gold: bool | None = None,
) -> pl.DataFrame:
    """Run rows with ``question, answers, passage`` (the text the reader sees), validated by
    the module's input policy — cheap, no reader and no store: a caller that must refuse a bad
    run before it opens a store (:func:`erag_dagster.api.label`) calls it first. With
    ``references``, ``answers`` is each query's reference answer and ``gold_hash``,
    ``gold_json`` and ``reference`` come with it (a query without one: :class:`InputError`);
    the gold answers are then not required. ``needs_gold`` (default: no ``references``):
    whether a query without gold answers is refused — ``False`` for that early check before
    references are made."""
    needed = [c for c in ("query_id", "doc_id", "rank") if c not in run.columns]
    if needed:
        raise InputError(f"run lacks column(s) {', '.join(needed)}")
    if run.height == 0:
        raise InputError("the run is empty: nothing to label")
    run = run_with_passages(run.select("query_id", "doc_id", "rank"), corpus)
    check_run_queries(run, queries)
    used = (
        run.select("query_id")
        .unique(maintain_order=True)
        .join(
            queries.select(pl.col("query_id").cast(pl.String), "question", "answers"),
            on="query_id",
            how="left",
            maintain_order="left",
        )
    )
    if needs_gold is None:
        needs_gold = references is None
    if needs_gold:
        require_answers(used, "labelling")
    require_questions(used, "labelling")
    if references is None:
        return run.join(used, on="query_id", how="left", maintain_order="left")
    refs = references.select(
        pl.col("query_id").cast(pl.String),
        pl.concat_list(pl.col("scored_against").fill_null("")).alias("answers"),
        pl.col("reference_answer").fill_null(""),
        "gold_hash",
        "reference",
    )
    used = used.drop("answers").join(refs, on="query_id", how="left", maintain_order="left")
    missing = used.filter(pl.col("gold_hash").is_null())
    if missing.height:
        raise InputError(
            f"labelling: query {missing.get_column('query_id')[0]!r} has no reference answer "
            f"({missing.height} such queries); make the references for every query of the run"
        )
    gold_json = [
        json.dumps(
            {"answers": list(answers), "reference": json.loads(provenance)},
            sort_keys=True,
            ensure_ascii=False,
        )
        for answers, provenance in used.select("answers", "reference").rows()
    ]
    used = used.with_columns(pl.Series("gold_json", gold_json, dtype=pl.String))
    return run.join(used, on="query_id", how="left", maintain_order="left")


def _score(
    rows: pl.DataFrame, measure: DownstreamMeasure, store: LabelStoreBase, run_id: str | None
) -> tuple[pl.DataFrame, int]:
    """``(score_key, score)`` for every distinct score key of ``rows``, and how many of them
    were computed now (the others come from the store). The store's ``metric`` column records
    the metric's tag (its name, ``name/vN`` from version 2 on)."""
    distinct = rows.unique("score_key", keep="first", maintain_order=True)
    stored = store.lookup_scores(distinct.get_column("score_key"))
    missing = distinct.join(stored.select("score_key"), on="score_key", how="anti")
    values = [
        checked_label(
            measure(answer, golds),
            f"downstream metric {measure.name!r} for query {qid!r}, doc {did!r}",
        )
        for qid, did, answer, golds in missing.select(
            "query_id", "doc_id", "answer", "answers"
        ).rows()
    ]
    fresh = missing.select("score_key").with_columns(pl.Series("score", values, dtype=pl.Float64))
    if missing.height:
        extra = ["gold_json"] if "gold_json" in missing.columns else []
        store.put_scores(
            missing.select("score_key", "generation_key", "gold_hash", *extra).with_columns(
                pl.lit(measure.tag).alias("metric"),
                fresh.get_column("score"),
                pl.lit(run_id, dtype=pl.String).alias("producer_run_id"),
                missing.get_column("answers").alias("gold_answers"),
            )
        )
    return pl.concat([stored.select("score_key", "score"), fresh]), missing.height
