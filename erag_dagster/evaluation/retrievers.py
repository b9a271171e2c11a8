"""Run a registry retriever over a dataset: build (or reuse) its index, search, return a run.

This is the one code path the CLI and the Dagster assets share. It sits above the registry
(:mod:`erag_dagster.config.registry`) because a registry entry drives it: a fused or reranked
retriever names other entries, a ``reader:<name>`` rerank scorer names a registry reader
(:func:`default_scorer`). What each kind does is its registration's
(:mod:`erag_dagster.retrieval.kinds`): :func:`run_retriever` looks the entry's kind up and
hands its run a :class:`~erag_dagster.retrieval.kinds.base.RunRequest` that lends it these
registry look-ups. Indexes live under ``<storage root>/indexes`` and are named by the corpus
content (and encoder), so they are built once per corpus and reused by every later call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from erag_dagster.config.registry import Entry, Registry, load_registry
from erag_dagster.core.callbacks import Log
from erag_dagster.core.errors import InputError
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.retrieval.encoder import encoder_from_config as encoder_from_config
from erag_dagster.retrieval.kinds import KINDS
from erag_dagster.retrieval.kinds.base import RetrievalTiming, RunRequest
from erag_dagster.retrieval.kinds.base import index_root as index_root
from erag_dagster.retrieval.kinds.bm25 import bm25_index_for as bm25_index_for
from erag_dagster.retrieval.kinds.dense import dense_index_for as dense_index_for
from erag_dagster.retrieval.rerank import ReaderScorer


def run_retriever(
    registry: Registry,
    retriever: str,
    corpus: pl.DataFrame,
    queries: pl.DataFrame,
    k: int,
    log: Log | None = None,
    timing: RetrievalTiming | None = None,
    threads: int = 2,
    question_subset: bool = False,
    asset_runs: Mapping[str, object] | None = None,
) -> pl.DataFrame:
    """Top-``k`` run of the registry retriever ``retriever`` (name or partition key), run by
    its kind's registration; index and search seconds add to ``timing`` (and what the kind
    reports to its ``details``).

    ``question_subset``: ``queries`` are a subset of the dataset's questions (a run file's
    queries outside them are then dropped, not refused: :mod:`~erag_dagster.retrieval.run_file`).
    ``asset_runs``: the values of the upstream assets ``kind: asset`` retrievers read, by
    retriever name (the Dagster asset hands them over; outside Dagster there are none, and such
    a retriever is refused with one line).
    """
    if k < 1:
        raise InputError(f"cut-off k must be >= 1, got {k}")
    entry: Entry = registry.retriever(retriever)
    kind = KINDS[entry.config["kind"]]

    def run_other(name: str, depth: int, part_timing: RetrievalTiming) -> pl.DataFrame:
        return run_retriever(
            registry, name, corpus, queries, depth, log, part_timing, threads, question_subset,
            asset_runs,
        )  # fmt: skip

    return kind.run(
        RunRequest(
            kind=kind,
            name=entry.name,
            config=entry.config,
            corpus=corpus,
            queries=queries,
            k=k,
            timing=timing if timing is not None else RetrievalTiming(),
            log=log,
            threads=threads,
            question_subset=question_subset,
            asset_runs=asset_runs or {},
            run_other=run_other,
            partition_key=lambda name: registry.retriever(name).partition_key,
            reader_scorer=lambda name, overrides: default_scorer(registry, name, overrides),
        )
    )


def default_scorer(
    registry: Registry | None = None,
    reader: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ReaderScorer:
    """:class:`ReaderScorer` over a registry reader.

    ``reader`` is a name or partition key (the registry's first reader when None); ``registry``
    defaults to the packaged one; ``overrides`` replace keys of the reader's config (e.g.
    ``{"dtype": "float32", "device": "cpu"}``).
    """
    registry = registry or load_registry()
    entry = registry.reader(reader) if reader else next(iter(registry.readers.values()))
    return ReaderScorer(reader_from_config(entry.name, {**entry.config, **(overrides or {})}))
