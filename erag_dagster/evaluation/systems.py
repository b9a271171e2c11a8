"""The steps before scoring, shared by every front door: retrieve → label (→ fit).

A *system* is one (reader, retriever) pair. These plain functions turn a registry retriever
into its run and a run into the reader's eRAG labels and their fit diagnostics, each with the
settings of one :class:`~erag_dagster.config.evaluation.EvaluationConfig` (no loose depth,
metric, resamples or seed arguments). They are the steps of the evaluation session
(:class:`~erag_dagster.evaluation.session.EvaluationSession`), which every front door — the
Python API, the regression gate, the command line and the Dagster assets — calls instead, so
each retrieves, cuts, labels and diagnoses the same way:

- :func:`retrieve`: the top ``config.k`` run of a registry retriever
  (:func:`erag_dagster.evaluation.retrievers.run_retriever`); a dataset that keeps a subset of its
  questions (``config.dataset``'s ``question_subset``) drops a run file's other queries;
- :func:`labelled_run`: the rows that are labelled — ranks ``1..config.label_k`` of each query;
- :func:`label`: eRAG labels of :func:`labelled_run` with ``config.metric`` through the label
  store (:func:`erag_dagster.labels.labeller.label_run`), each new row recording ``producer``
  (a Dagster run id, or an :func:`~erag_dagster.labels.audit.evaluation_id` outside Dagster);
  scored against the gold answers, or, when ``config.reference`` is not ``gold``, against the
  reference answers the door made first (:mod:`erag_dagster.evaluation.references`);
- :func:`fit`: whether those labels fit the data (:func:`erag_dagster.meta.fit.reader_fit`,
  with ``config.relevance_level`` and ``config.statistics``);
- :func:`label_system`: :func:`label` then :func:`fit`, as one :class:`SystemLabels` (the API
  and the gate; in Dagster the two are separate assets — ``doc_labels`` per partition, ``fit``
  once over all of them — which call :func:`label` and :func:`fit`).

Edge cases: an empty run, or one naming an unknown query or document, is the labeller's
:class:`~erag_dagster.core.errors.InputError`; a foreign store error inside :func:`label` is one
line naming ``store_name`` when it is given (:func:`erag_dagster.core.errors.concerning`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.core.callbacks import Log, Progress
from erag_dagster.core.errors import InputError, concerning
from erag_dagster.data.spec import parse_spec
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.labels.labeller import LabelResult, label_run
from erag_dagster.meta.fit import FitDiagnostics, reader_fit
from erag_dagster.retrieval.runs import top_k

if TYPE_CHECKING:
    from erag_dagster.config.registry import Registry
    from erag_dagster.data.schema import Dataset
    from erag_dagster.evaluation.retrievers import RetrievalTiming
    from erag_dagster.labels.executor import ExecutorSpec
    from erag_dagster.labels.labeller import Reader
    from erag_dagster.labels.reader_calls import ReaderCalls
    from erag_dagster.labels.reference import References
    from erag_dagster.labels.store import LabelStoreBase

__all__ = ["SystemLabels", "fit", "label", "label_system", "labelled_run", "retrieve"]


def retrieve(
    registry: Registry,
    retriever: str,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    config: EvaluationConfig,
    log: Log | None = None,
    *,
    timing: RetrievalTiming | None = None,
    asset_runs: Mapping[str, object] | None = None,
) -> pl.DataFrame:
    """The top-``config.k`` run ``(query_id, doc_id, rank, score)`` of the registry retriever
    ``retriever`` (name or partition key) over ``corpus`` for ``queries``.

    ``timing`` receives index and search seconds; ``asset_runs``: the runs ``kind: asset``
    retrievers read (only Dagster has them; elsewhere such a retriever is refused in one line).
    An unknown retriever is the registry's :class:`~erag_dagster.core.errors.InputError` listing
    the known ones.
    """
    return run_retriever(
        registry, retriever, corpus, queries, config.k, log=log, timing=timing,
        question_subset=parse_spec(config.dataset).question_subset, asset_runs=asset_runs,
    )  # fmt: skip


def labelled_run(run: pl.DataFrame, config: EvaluationConfig) -> pl.DataFrame:
    """The rows of ``run`` that get eRAG labels: ranks ``1..config.label_k`` of every query
    (a run already that shallow is returned row for row, in its order)."""
    return top_k(run, config.label_k)


def label(
    run: pl.DataFrame,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader: Reader,
    config: EvaluationConfig,
    store: LabelStoreBase,
    *,
    executor: ExecutorSpec | ReaderCalls | None,
    producer: str | None,
    log: Log | None = None,
    progress: Progress | None = None,
    store_name: str | None = None,
    references: References | None = None,
) -> LabelResult:
    """eRAG labels of :func:`labelled_run` of ``run``: each (query, document) answered by
    ``reader`` on that document alone, scored with ``config.metric`` against the gold answers
    (label in [0, 1]); pairs already in ``store`` are read, not generated.

    ``executor``: in process or Ray (the registry's ``generation`` section); ``producer``: the
    id every new store row records (``audit``); ``progress(done, total)``: pairs generated so
    far, at least every 10 s while the reader works. ``store_name`` (the store's location,
    credentials masked): a foreign error while labelling becomes one line naming it.
    ``references``: the reference answers of ``config.reference`` when it is not ``gold``
    (:func:`erag_dagster.evaluation.references.make_references`), scored against instead of the
    gold answers; required then (a door that forgot them is an :class:`InputError`, not labels
    against gold the config did not ask for).
    """
    _check_references(config, references)
    guard = concerning(store_name) if store_name else contextlib.nullcontext()
    with guard:
        return label_run(
            labelled_run(run, config), queries, corpus, reader, config.metric, store,
            run_id=producer, log=log, executor=executor, progress=progress,
            references=None if references is None else references.frame,
        )  # fmt: skip


def _check_references(config: EvaluationConfig, references: References | None) -> None:
    """References are given exactly when the config asks for them, and are the config's."""
    wanted = config.reference != "gold"
    if wanted and references is None:
        raise InputError(
            f"evaluation.reference is {config.reference!r}: label needs its reference answers "
            "(evaluation.references.make_references)"
        )
    if references is not None and references.spec != config.reference:
        raise InputError(
            f"reference answers of {references.spec!r} given to labels of evaluation.reference "
            f"{config.reference!r}"
        )


def verdict_labels(
    run: pl.DataFrame,
    dataset: Dataset,
    reader: Reader,
    config: EvaluationConfig,
    store: LabelStoreBase,
    *,
    executor: ExecutorSpec | ReaderCalls | None,
    producer: str | None,
    log: Log | None = None,
) -> pl.DataFrame | None:
    """The labels of :func:`labelled_run` of ``run`` that the verdict ranks by when
    ``config.verdict_labels`` names a label method (``query_id, doc_id, rank, label``,
    :func:`erag_dagster.meta.label_methods.extra_labels`, stored like eRAG's); ``None`` for
    ``eRAG`` (the verdict then ranks :func:`label`'s) or when the reader cannot give them (one
    line to ``log``)."""
    from erag_dagster.meta.label_methods import LABEL_METHODS, extra_labels

    if config.verdict_labels == "eRAG":
        return None
    found = extra_labels(
        labelled_run(run, config), dataset.queries, dataset.corpus, reader, config.metric,
        [config.verdict_labels], store, producer, log, executor,
    )  # fmt: skip
    return found.get(LABEL_METHODS[config.verdict_labels])


def fit(
    labels: pl.DataFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame | None,
    reader: Any,
    config: EvaluationConfig,
    *,
    reader_name: str,
    retriever: str,
) -> FitDiagnostics:
    """The fit diagnostics of one system's ``labels`` (docs/label-methods.md, "Fit
    diagnostics"): answers cut at the reader's ``max_new_tokens``, answer vs gold length, and
    the label-vs-judgment AUC with its bootstrap CI (``config.relevance_level``,
    ``config.statistics``; no AUC without ``qrels``). The metric named is the one
    the labels record (their ``metric`` column; ``""`` when there are no labels). The
    configured ``label_methods`` and ``verdict_labels`` shape the fixes a warning names (one
    already configured is not asked for again); ``expected_fit`` the findings printed as
    expected, with their reason, instead of as warnings."""
    return reader_fit(
        labels, queries, qrels, reader, reader_name=reader_name, retriever=retriever,
        metric=str(labels["metric"][0]) if labels.height else "",
        relevance_level=config.relevance_level, stats=config.statistics,
        label_methods=tuple(config.label_methods),
        verdict_labels=config.verdict_labels, expected=config.expected_fit,
    )  # fmt: skip


@dataclass(frozen=True)
class SystemLabels:
    """One system's labels (:func:`label_system`): ``labels`` (the labeller's rows, ``query_id,
    doc_id, rank, label, answer, reader_fingerprint, metric``), ``judged_now`` / ``from_store``
    (distinct pairs the reader answered in this call / found in the store) and ``fit``."""

    labels: pl.DataFrame
    judged_now: int
    from_store: int
    fit: FitDiagnostics


def label_system(
    run: pl.DataFrame,
    dataset: Dataset,
    reader: Reader,
    config: EvaluationConfig,
    store: LabelStoreBase,
    *,
    executor: ExecutorSpec | ReaderCalls | None,
    producer: str | None,
    reader_name: str,
    retriever: str,
    log: Log | None = None,
    progress: Progress | None = None,
    store_name: str | None = None,
    references: References | None = None,
) -> SystemLabels:
    """:func:`label` then :func:`fit` for one (reader, retriever) system on ``dataset``
    (arguments as there; ``reader_name``/``retriever`` name the system in the diagnostics).
    Only the labelling runs under ``store_name``'s error guard: a fault while diagnosing is
    not the store's."""
    result = label(
        run, dataset.queries, dataset.corpus, reader, config, store, executor=executor,
        producer=producer, log=log, progress=progress, store_name=store_name,
        references=references,
    )  # fmt: skip
    diagnosed = fit(
        result.labels, dataset.queries, dataset.qrels, reader, config,
        reader_name=reader_name, retriever=retriever,
    )  # fmt: skip
    return SystemLabels(result.labels, result.judged_now, result.from_store, diagnosed)
