"""Hybrid retrieval by reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

``RRF(d) = Σ_r 1 / (k_rrf + rank_r(d))`` over the input runs ``r`` that retrieved ``d``
(a run that did not retrieve ``d`` contributes nothing); ``k_rrf`` defaults to 60 as in the
paper (:data:`DEFAULT_RRF_K`).
The fused list is cut to ``k`` documents per query.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.retrieval.runs import rank_by_score, top_k

DEFAULT_RRF_K = 60.0
"""``k_rrf`` when a config gives none: the value of Cormack et al. (2009)."""


def reciprocal_rank_fusion(
    runs: Sequence[pl.DataFrame], k: int, k_rrf: float = DEFAULT_RRF_K
) -> pl.DataFrame:
    """Fuse ``runs`` (each ``query_id, doc_id, rank, score``) into one top-``k`` run."""
    if not runs:
        raise InputError("reciprocal rank fusion needs at least one run")
    if k_rrf <= 0:
        raise InputError(f"rrf k must be > 0, got {k_rrf}")
    fused = (
        pl.concat([r.select("query_id", "doc_id", "rank") for r in runs])
        .group_by("query_id", "doc_id")
        .agg(score=(1.0 / (k_rrf + pl.col("rank"))).sum())
    )
    return top_k(rank_by_score(fused), k)
