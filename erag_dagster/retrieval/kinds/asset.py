"""``kind: asset``: the run an upstream asset of the user's Dagster project yields, validated as
a run file is (:func:`~erag_dagster.retrieval.run_file.load_run_value`). Only the eRAG Dagster
component's registry may hold one; ``asset_key`` is stored in one spelling (a list of parts).
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.core.callbacks import NOTES
from erag_dagster.core.errors import InputError
from erag_dagster.retrieval.kinds.base import RetrieverKind, Rule, RunRequest

ASSET_KEY_PART = re.compile(r"^[A-Za-z0-9_]+$")
"""One part of a Dagster asset key (what Dagster accepts in a key built from a prefix)."""


def asset_key_path(value: Any) -> list[str] | None:
    """A ``kind: asset`` retriever's ``asset_key`` as a list of parts (``"a/b"`` → ``["a",
    "b"]``); ``None`` when it is not a non-empty list (or ``/``-joined string) of names made
    of letters, digits and ``_``."""
    parts = value.split("/") if isinstance(value, str) else value
    if not isinstance(parts, list) or not parts:
        return None
    if not all(isinstance(p, str) and ASSET_KEY_PART.match(p) for p in parts):
        return None
    return list(parts)


def run_asset(request: RunRequest) -> pl.DataFrame:
    """The upstream asset's value as a run cut to ``k``; its coverage to the timing's details.
    Outside the Dagster project that has the asset there is no value: refused with one line."""
    from erag_dagster.retrieval.run_file import load_run_value

    source = "asset " + "/".join(request.config["asset_key"])
    if request.name not in request.asset_runs:
        raise InputError(
            f"retriever {request.name!r} reads the Dagster {source}: it runs in the Dagster "
            "project that has that asset (the eRAG component), not from the command line"
        )
    started = time.perf_counter()
    loaded = load_run_value(
        request.asset_runs[request.name], source, request.queries, request.corpus, request.k,
        request.question_subset,
    )  # fmt: skip
    request.timing.search_seconds += time.perf_counter() - started
    request.timing.details.update(loaded.metadata())
    if loaded.outside_ids:  # dropped, never without a word (the terminal's notes by default)
        (request.log or NOTES.info)(loaded.left_out_line(source))
    return loaded.run


def check_asset(
    name: str,
    config: Mapping[str, Any],
    retrievers: Mapping[str, Mapping[str, Any]],
    readers: Collection[str],
    path: str,
) -> None:
    """``asset_key`` is given."""
    if "asset_key" not in config:
        raise InputError(f"{path}: asset retriever {name!r} needs 'asset_key' (your asset)")


def resolve_asset(name: str, cfg: dict[str, Any], folder: Path, path: str) -> None:
    """One spelling, so ``"a/b"`` and ``[a, b]`` name one partition."""
    cfg["asset_key"] = asset_key_path(cfg["asset_key"])


KIND = RetrieverKind(
    name="asset",
    keys={
        "asset_key": Rule(
            lambda v: asset_key_path(v) is not None,
            "an asset key: a list of names such as [my, retrieval_run] or 'my/retrieval_run'",
        )
    },
    run=run_asset,
    check=check_asset,
    resolve=resolve_asset,
    component_only=True,
)
