"""``kind: hybrid``: reciprocal rank fusion of two or more other retrievers (:mod:`..hybrid`).

``fuse`` names the fused retrievers (none of them a hybrid); each is run to ``max(depth, k)``
documents (``depth`` default :data:`DEFAULT_DEPTH`) and the runs are fused with ``rrf_k``
(default the engine's :data:`~erag_dagster.retrieval.hybrid.DEFAULT_RRF_K`). The partition
hash covers the fused retrievers' hashes, not their names.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.retrieval.hybrid import DEFAULT_RRF_K, reciprocal_rank_fusion
from erag_dagster.retrieval.kinds.base import COUNT, NUMBER, RetrieverKind, RunRequest

DEFAULT_DEPTH = 100
"""Documents taken from each fused run when a config gives no ``depth`` (at least ``k``)."""


def run_hybrid(request: RunRequest) -> pl.DataFrame:
    """Each fused retriever's run to ``max(depth, k)``, fused and cut to ``k``; the parts'
    times add to the timing, then the fusion's."""
    depth = max(int(request.setting("depth")), request.k)
    parts = [request.run_other(p, depth, request.timing) for p in request.config["fuse"]]
    started = time.perf_counter()
    fused = reciprocal_rank_fusion(parts, k=request.k, k_rrf=float(request.setting("rrf_k")))
    request.timing.search_seconds += time.perf_counter() - started
    return fused


def check_hybrid(
    name: str,
    config: Mapping[str, Any],
    retrievers: Mapping[str, Mapping[str, Any]],
    readers: Collection[str],
    path: str,
) -> None:
    """``fuse`` is a list of >= 2 names of non-hybrid retrievers of the registry."""
    fuse = config.get("fuse")
    if not isinstance(fuse, list) or len(fuse) < 2:
        raise InputError(f"{path}: hybrid {name!r} needs 'fuse' with >= 2 retrievers")
    for part in fuse:
        if part not in retrievers or retrievers[part].get("kind") == "hybrid":
            raise InputError(
                f"{path}: hybrid {name!r} fuses {part!r}, which is not a non-hybrid "
                "retriever in this registry"
            )


def hybrid_identity(
    config: Mapping[str, Any], digest_of: Callable[[str], str], reader_digest: Callable[[str], str]
) -> Mapping[str, Any]:
    """The config with ``fuse`` replaced by ``{name: that retriever's hash}``."""
    return {**config, "fuse": {p: digest_of(p) for p in config["fuse"]}}


KIND = RetrieverKind(
    name="hybrid",
    keys={"fuse": None, "rrf_k": NUMBER, "depth": COUNT},
    defaults={"rrf_k": DEFAULT_RRF_K, "depth": DEFAULT_DEPTH},
    run=run_hybrid,
    check=check_hybrid,
    identity=hybrid_identity,
    references=lambda config: list(config["fuse"]),
)
