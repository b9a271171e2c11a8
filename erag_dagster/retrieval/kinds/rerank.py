"""``kind: rerank``: a first stage's top ``top_n`` rescored by a scorer, ``k`` kept
(:mod:`..rerank`).

``scorer`` is ``reader:<name>`` (a registry reader's ``P("yes")``; the rerank's ``dtype``,
``device``, ``batch_size`` and ``threads`` override the reader's) or a local cross-encoder
folder, resolved against the registry's folder (its defaults are
:class:`~erag_dagster.retrieval.rerank.CrossEncoderScorer`'s signature). The partition hash
covers the first stage's hash and the scorer's identity (the reader config's hash, or the
sha256 of every file of the folder), not their names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.retrieval.kinds.base import (
    COUNT,
    DTYPE,
    MAX_LENGTH,
    RetrievalTiming,
    RetrieverKind,
    Rule,
    RunRequest,
    is_text,
)

if TYPE_CHECKING:
    from erag_dagster.retrieval.rerank import Scorer

READER_SCORER = "reader:"
"""A rerank ``scorer`` starting with this names a registry reader (its ``P("yes")``); any other
value is a local Hugging Face cross-encoder folder."""
_READER_OVERRIDES = (
    ("dtype", "dtype"), ("device", "device"), ("batch_size", "batch_size"),
    ("num_threads", "threads"), ("num_threads", "num_threads"),
)  # fmt: skip
"""(reader key, rerank key): the rerank's keys that override a reader scorer's config."""
_CROSS_ENCODER_KEYS = ("device", "dtype", "batch_size", "max_length")
"""The rerank keys a cross-encoder scorer takes (by the same names), when given."""


def scorer_for(
    config: Mapping[str, Any], reader_scorer: Callable[[str, Mapping[str, Any]], Scorer]
) -> Scorer:
    """The scorer of a rerank config: ``reader:<name>`` → ``reader_scorer(name, overrides)``,
    else a :class:`~erag_dagster.retrieval.rerank.CrossEncoderScorer` over that folder with
    the keys the config gives (``max_length: null``: its default)."""
    scorer = str(config["scorer"])
    if scorer.startswith(READER_SCORER):
        overrides = {key: config[source] for key, source in _READER_OVERRIDES if source in config}
        return reader_scorer(scorer.removeprefix(READER_SCORER), overrides)
    from erag_dagster.retrieval.rerank import CrossEncoderScorer

    given = {key: config[key] for key in _CROSS_ENCODER_KEYS if config.get(key) is not None}
    return CrossEncoderScorer(scorer, **given)


def run_rerank(request: RunRequest) -> pl.DataFrame:
    """The first stage's top ``top_n``, reranked by the scorer, cut to ``min(k of the config,
    k)``; its cost goes to the timing's details (model load excluded)."""
    from erag_dagster.retrieval.rerank import rerank

    cfg = request.config
    top_n = int(cfg["top_n"])
    first_timing = RetrievalTiming()
    first = request.run_other(cfg["first_stage"], top_n, first_timing)
    request.timing.index_seconds += first_timing.index_seconds
    result = rerank(
        first, request.queries, request.corpus, scorer_for(cfg, request.reader_scorer),
        top_n=top_n, k=min(int(cfg["k"]), request.k, top_n), log=request.log,
    )  # fmt: skip
    request.timing.search_seconds += first_timing.search_seconds + result.seconds
    request.timing.details.update(
        {
            "first_stage": request.partition_key(cfg["first_stage"]),
            "first_stage_search_seconds": round(first_timing.search_seconds, 3),
            "rerank_pairs": result.pairs,
            "rerank_seconds_per_query": result.seconds_per_query,
            "rerank_docs_per_second": result.docs_per_second,
        }
    )
    return result.run


def check_rerank(
    name: str,
    config: Mapping[str, Any],
    retrievers: Mapping[str, Mapping[str, Any]],
    readers: Collection[str],
    path: str,
) -> None:
    """``first_stage``, ``top_n``, ``k`` and ``scorer`` are given; the first stage is another
    retriever of the registry; ``k <= top_n``; a ``reader:`` scorer names a registry reader."""
    for key in ("first_stage", "top_n", "k", "scorer"):
        if key not in config:
            raise InputError(f"{path}: rerank {name!r} needs {key!r}")
    if config["first_stage"] not in retrievers or config["first_stage"] == name:
        raise InputError(
            f"{path}: rerank {name!r} has first_stage {config['first_stage']!r}, which is "
            "not another retriever in this registry"
        )
    if config["k"] > config["top_n"]:
        raise InputError(
            f"{path}: rerank {name!r} has k {config['k']} > top_n {config['top_n']}; it keeps "
            "at most top_n documents"
        )
    scorer = config["scorer"]
    if scorer.startswith(READER_SCORER) and scorer[len(READER_SCORER) :] not in readers:
        raise InputError(
            f"{path}: rerank {name!r} has scorer {scorer!r}; known readers: {', '.join(readers)}"
        )


def resolve_rerank(name: str, cfg: dict[str, Any], folder: Path, path: str) -> None:
    """A cross-encoder scorer folder made absolute against ``folder`` (refused if missing)."""
    if cfg["scorer"].startswith(READER_SCORER):
        return
    scorer = folder / Path(cfg["scorer"]).expanduser()
    if not scorer.is_dir():
        raise InputError(
            f"{path}: rerank {name!r} scorer {cfg['scorer']!r} is neither reader:<name> nor "
            f"a cross-encoder folder ({scorer} not found)"
        )
    cfg["scorer"] = str(scorer.resolve())


def rerank_identity(
    config: Mapping[str, Any], digest_of: Callable[[str], str], reader_digest: Callable[[str], str]
) -> Mapping[str, Any]:
    """The config with ``first_stage`` replaced by its hash and ``scorer`` by what its scores
    depend on: ``{"reader": <reader config hash>}`` or ``{"cross_encoder": <file hashes>}``."""
    scorer = config["scorer"]
    if scorer.startswith(READER_SCORER):
        identity: dict[str, Any] = {"reader": reader_digest(scorer[len(READER_SCORER) :])}
    else:
        from erag_dagster.readers.models import folder_file_hashes

        identity = {"cross_encoder": folder_file_hashes(Path(scorer))}
    return {**config, "first_stage": digest_of(config["first_stage"]), "scorer": identity}


KIND = RetrieverKind(
    name="rerank",
    keys={
        "first_stage": Rule(is_text, "a retriever name"),
        "top_n": COUNT,
        "k": COUNT,
        "scorer": Rule(is_text, "reader:<name> or a cross-encoder folder"),
        "dtype": DTYPE,
        "max_length": MAX_LENGTH,
    },
    run=run_rerank,
    check=check_rerank,
    resolve=resolve_rerank,
    identity=rerank_identity,
    references=lambda config: [config["first_stage"]],
)
