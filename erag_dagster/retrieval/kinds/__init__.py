"""Every retriever kind, registered once: one line per kind in :data:`REGISTERED`.

A kind is its module beside this one, defining ``KIND``, a :class:`~.base.RetrieverKind` (its
keys and their value rules, its defaults, its checks, what its hash covers, its run), and its
line below. The registry (:mod:`erag_dagster.config.registry`) validates and hashes each entry
through its kind and derives ``RETRIEVER_KINDS`` and ``RETRIEVER_KEYS`` from :data:`KINDS`;
:func:`erag_dagster.evaluation.retrievers.run_retriever` runs an entry through its kind. Importing
this package loads no faiss, torch or pyserini (the kinds import their engines when they run)."""

from __future__ import annotations

from erag_dagster.retrieval.kinds import asset, bm25, dense, hybrid, rerank, run_file
from erag_dagster.retrieval.kinds.base import RetrieverKind

REGISTERED: tuple[RetrieverKind, ...] = (
    bm25.KIND,
    dense.KIND,
    hybrid.KIND,
    run_file.KIND,
    rerank.KIND,
    asset.KIND,
)
"""The registrations, one line per kind, in the order the registry's refusal lines list them."""
KINDS: dict[str, RetrieverKind] = {kind.name: kind for kind in REGISTERED}
"""The retriever kinds by name (registration order)."""
