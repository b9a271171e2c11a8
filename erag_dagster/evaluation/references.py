"""The reference step: a reference answer per question when labels are not scored against gold.

When ``config.reference`` is not ``gold`` (:mod:`erag_dagster.labels.reference`), every door
makes the reference answers once per reader before labelling, with :func:`make_references`,
and hands them to :func:`erag_dagster.evaluation.systems.label` (or ``label_system``): the
Dagster asset ``reference_answers`` (one partition per reader, reading every retrieval run),
:func:`erag_dagster.evaluate` (the runs it compares) and the gate (``compare``: its two sides).

Which documents: ``@RETRIEVER`` reads that registry retriever's run — the one among ``runs``
when it is there (by name or partition key), else it is retrieved now with the config's ``k``;
``@union`` reads every run of ``runs`` (the compared retrievers: the registry's in Dagster,
the ones given to ``evaluate()``, both sides of the gate), so the reference depends on that
set; ``@none`` reads none. Which reader: ``self`` is ``reader``; ``reader:NAME`` is
``reader_for(NAME)`` (the door builds the registry reader as it builds its own).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import polars as pl

from erag_dagster.config.evaluation import EvaluationConfig
from erag_dagster.core.callbacks import Log
from erag_dagster.core.errors import concerning
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.labels.reference import References, parse_reference, reference_answers

if TYPE_CHECKING:
    from erag_dagster.config.registry import Registry
    from erag_dagster.labels.executor import ExecutorSpec
    from erag_dagster.labels.reader_calls import ReaderCalls
    from erag_dagster.labels.store import LabelStoreBase

__all__ = ["make_references", "reference_runs"]


def reference_runs(
    config: EvaluationConfig,
    registry: Registry,
    runs: Mapping[str, pl.DataFrame],
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    log: Log | None = None,
) -> dict[str, pl.DataFrame]:
    """The runs ``config.reference`` reads its documents from (module docstring), by name:
    ``{}`` for ``gold`` and ``@none``, every one of ``runs`` for ``@union``, the named
    retriever's alone otherwise."""
    from erag_dagster.data.spec import parse_spec

    spec = parse_reference(config.reference)
    if spec is None or spec.documents == "none":
        return {}
    if spec.retriever is None:
        return dict(runs)
    entry = registry.retriever(spec.retriever)
    for key in (entry.name, entry.partition_key):
        if key in runs:
            return {entry.partition_key: runs[key]}
    found = run_retriever(
        registry, entry.name, corpus, queries, config.k, log=log,
        question_subset=parse_spec(config.dataset).question_subset,
    )  # fmt: skip
    return {entry.partition_key: found}


def make_references(
    config: EvaluationConfig,
    registry: Registry,
    queries: pl.DataFrame,
    corpus: pl.DataFrame,
    reader: Any,
    runs: Mapping[str, pl.DataFrame],
    store: LabelStoreBase,
    *,
    reader_for: Callable[[str], Any],
    executor: ExecutorSpec | ReaderCalls | None,
    producer: str | None,
    log: Log | None = None,
    store_name: str | None = None,
) -> References | None:
    """The reference answers of ``config.reference`` for every query of ``queries`` (``None``
    for ``gold``): answered by ``reader`` (``self``) or ``reader_for(NAME)`` (a teacher), from
    the documents of :func:`reference_runs`, through ``store`` (an end-to-end or closed-book
    answer already stored is read, not generated); every new store row records ``producer``.
    An unknown reader or retriever is the registry's one-line :class:`InputError`."""
    spec = parse_reference(config.reference)
    if spec is None:
        return None
    registry.check_reference(config)
    answerer = reader if spec.teacher is None else reader_for(spec.teacher)
    docs = reference_runs(config, registry, runs, corpus, queries, log)
    guard = concerning(store_name) if store_name else contextlib.nullcontext()
    with guard:
        return reference_answers(
            spec, queries, corpus, docs, answerer, config.label_k, config.metric, store,
            run_id=producer, executor=executor, log=log,
        )  # fmt: skip
