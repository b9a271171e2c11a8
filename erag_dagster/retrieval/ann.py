"""Approximate nearest-neighbour indexes for dense retrieval: the registry's ``index:`` setting.

``index: flat`` (default) is exact search (:mod:`erag_dagster.retrieval.dense`). For corpora
where that is too slow, a dense retriever may name an approximate faiss index built from the
same vectors, with the same metric (inner product):

- ``{type: hnsw, m: 32, ef_construction: 200, ef_search: 128}`` — ``faiss.IndexHNSWFlat``
  (Malkov & Yashunin 2018): ``m`` neighbours per node, ``ef_construction`` / ``ef_search`` the
  candidate lists while building / searching (larger = better recall, slower).
- ``{type: ivfpq, nlist: 1024, m: 16, nbits: 8, nprobe: 32}`` — ``faiss.IndexIVFPQ``
  (Jégou et al. 2011): ``nlist`` k-means cells, of which ``nprobe`` are visited per query, and
  vectors compressed to ``m`` sub-quantisers of ``nbits`` bits (``m`` must divide the vector
  width; training needs at least ``max(nlist, 2**nbits)`` documents).

Parameters not given take the defaults above. Build parameters name the index file (one per
flat index and parameter set, beside the flat index, reused once written); ``ef_search`` and
``nprobe`` are set at search time. The recall of an approximate run against the exact one
(:func:`recall_against_exact`) is what the retrieval run reports in its metadata.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_json
from erag_dagster.core.paths import atomic_path

DEFAULTS: dict[str, dict[str, int]] = {
    "flat": {},
    "hnsw": {"m": 32, "ef_construction": 200, "ef_search": 128},
    "ivfpq": {"nlist": 1024, "m": 16, "nbits": 8, "nprobe": 32},
}
SEARCH_KEYS = frozenset({"ef_search", "nprobe"})
"""Parameters applied at search time (the others are fixed when the index is built)."""


@dataclass(frozen=True)
class IndexSpec:
    """An index type and its parameters (defaults filled in)."""

    type: str
    params: dict[str, int]

    @property
    def approximate(self) -> bool:
        return self.type != "flat"

    @property
    def build_params(self) -> dict[str, int]:
        return {k: v for k, v in self.params.items() if k not in SEARCH_KEYS}

    def file_name(self) -> str:
        """The index file's name: the type and a hash of its build parameters."""
        return f"{self.type}-{sha256_json(self.build_params)[:12]}.faiss"


def parse_index(value: Any) -> IndexSpec:
    """``None``/``"flat"`` or a mapping ``{type, ...parameters}`` → :class:`IndexSpec`;
    :class:`InputError` names an unknown type or parameter, or a value that is not an integer
    >= 1 (``nbits`` 1..16)."""
    if value is None or value == "flat":
        return IndexSpec("flat", {})
    if not isinstance(value, dict) or value.get("type") not in DEFAULTS:
        raise InputError(f"index {value!r}: use flat, or a mapping with type: hnsw or type: ivfpq")
    kind = value["type"]
    params = {k: v for k, v in value.items() if k != "type"}
    unknown = sorted(set(params) - set(DEFAULTS[kind]))
    if unknown:
        known = ", ".join(DEFAULTS[kind]) or "none"
        raise InputError(f"index type {kind} has unknown parameter(s) {unknown}; known: {known}")
    for key, number in params.items():
        top = 16 if key == "nbits" else 2**31 - 1
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= top:
            raise InputError(f"index {kind} {key}: {number!r} must be an integer from 1 to {top}")
    return IndexSpec(kind, {**DEFAULTS[kind], **params})


def build_index(vectors: np.ndarray, spec: IndexSpec):  # -> faiss.Index
    """An approximate inner-product index over ``vectors`` (float32, one row per document)."""
    import faiss

    n, dim = vectors.shape
    p = spec.params
    if spec.type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, p["m"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = p["ef_construction"]
    elif spec.type == "ivfpq":
        if dim % p["m"]:
            raise InputError(f"index ivfpq m={p['m']} does not divide the vector width {dim}")
        if n < max(p["nlist"], 2 ** p["nbits"]):
            raise InputError(
                f"index ivfpq needs at least max(nlist, 2**nbits) = "
                f"{max(p['nlist'], 2 ** p['nbits'])} documents to train; the corpus has {n}"
            )
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQ(
            quantizer, dim, p["nlist"], p["m"], p["nbits"], faiss.METRIC_INNER_PRODUCT
        )
        index.train(vectors)  # faiss's Python wrapper keeps the quantizer alive with the index
    else:
        raise InputError(f"index type {spec.type!r} is not approximate")
    index.add(vectors)
    return index


def set_search_params(index, spec: IndexSpec) -> None:
    """Apply ``ef_search`` / ``nprobe`` to a built or loaded index."""
    import faiss

    if spec.type == "hnsw":
        faiss.downcast_index(index).hnsw.efSearch = spec.params["ef_search"]
    elif spec.type == "ivfpq":
        faiss.extract_index_ivf(index).nprobe = spec.params["nprobe"]


def approximate_index(flat, folder: Path, spec: IndexSpec) -> tuple[Any, float]:
    """The approximate index for ``spec`` beside the flat index in ``folder`` (built from the
    flat index's stored vectors and written atomically once; read back later), with its build
    seconds (0 when read back)."""
    import faiss

    path = Path(folder) / spec.file_name()
    if path.is_file():
        index, seconds = faiss.read_index(str(path)), 0.0
    else:
        started = time.perf_counter()
        index = build_index(flat.reconstruct_n(0, flat.ntotal), spec)
        seconds = time.perf_counter() - started
        with atomic_path(path) as tmp:
            faiss.write_index(index, str(tmp))
    set_search_params(index, spec)
    return index, seconds


def recall_against_exact(approx: pl.DataFrame, exact: pl.DataFrame) -> float:
    """Mean over the exact run's queries of ``|approx top-k ∩ exact top-k| / |exact top-k|``
    (both runs cut at the same ``k``); 1.0 when the exact run is empty."""
    if exact.height == 0:
        return 1.0
    keys = ["query_id", "doc_id"]
    found = exact.select(keys).join(approx.select(keys), on=keys, how="semi")
    per_query = (
        exact.group_by("query_id")
        .len(name="wanted")
        .join(found.group_by("query_id").len(name="found"), on="query_id", how="left")
        .select((pl.col("found").fill_null(0) / pl.col("wanted")).alias("recall"))
    )
    return float(per_query["recall"].mean())
