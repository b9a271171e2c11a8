"""``kind: run_file``: a TREC or parquet run from another system (:mod:`..run_file`).

``path`` is resolved against the registry's folder; ``format`` (``trec`` or ``parquet``)
defaults to the path's suffix and ``sha256`` to the bytes read when the registry is read, both
written into the config as it is read (so they are hashed; the path is not: a moved file keeps
its partition, an edited one gets a new one).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from erag_dagster.core.callbacks import NOTES
from erag_dagster.core.errors import InputError
from erag_dagster.core.input_files import regular_file_sha256
from erag_dagster.retrieval.kinds.base import RetrieverKind, Rule, RunRequest, is_text


def run_run_file(request: RunRequest) -> pl.DataFrame:
    """The file's run, validated against the dataset and cut to ``k``; its coverage to the
    timing's details."""
    from erag_dagster.retrieval.run_file import load_run_file

    cfg = request.config
    started = time.perf_counter()
    loaded = load_run_file(
        cfg["path"], cfg["format"], cfg["sha256"], request.queries, request.corpus, request.k,
        request.question_subset,
    )  # fmt: skip
    request.timing.search_seconds += time.perf_counter() - started
    request.timing.details.update(loaded.metadata())
    if loaded.outside_ids:  # dropped, never without a word (the terminal's notes by default)
        (request.log or NOTES.info)(loaded.left_out_line(f"run_file {request.name!r}"))
    return loaded.run


def check_run_file(
    name: str,
    config: Mapping[str, Any],
    retrievers: Mapping[str, Mapping[str, Any]],
    readers: Collection[str],
    path: str,
) -> None:
    """``path`` is given."""
    if "path" not in config:
        raise InputError(f"{path}: run_file {name!r} needs 'path' (a TREC or parquet run)")


def resolve_run_file(name: str, cfg: dict[str, Any], folder: Path, path: str) -> None:
    """The path made absolute against ``folder``; ``format`` from its suffix when not given
    (``.parquet`` → parquet, else trec) and ``sha256`` of the bytes read now (a pinned one
    that differs is refused; the run is refused later if the file changed)."""
    cfg["path"] = str((folder / Path(cfg["path"]).expanduser()).resolve())
    cfg.setdefault("format", "parquet" if cfg["path"].endswith(".parquet") else "trec")
    digest = _file_digest(name, cfg["path"], path)
    if cfg.setdefault("sha256", digest) != digest:  # a pinned file that has changed
        raise InputError(
            f"{path}: run_file {name!r}: {cfg['path']} has sha256 {digest[:16]}..., not the "
            f"pinned {cfg['sha256'][:16]}..."
        )


def _file_digest(name: str, file: str, path: str) -> str:
    """sha256 of a run file, read under the input rule (a FIFO or device is refused, not read)."""
    try:
        return regular_file_sha256(file)
    except InputError as exc:
        raise InputError(f"{path}: run_file {name!r}: cannot read {exc}") from None
    except OSError as exc:
        raise InputError(
            f"{path}: run_file {name!r}: cannot read {file} ({exc.strerror or exc})"
        ) from None


def run_file_identity(
    config: Mapping[str, Any], digest_of: Callable[[str], str], reader_digest: Callable[[str], str]
) -> Mapping[str, Any]:
    """The config without ``path`` (its bytes are hashed through ``sha256``)."""
    return {k: v for k, v in config.items() if k != "path"}


KIND = RetrieverKind(
    name="run_file",
    keys={
        "path": Rule(is_text, "a file path"),
        "format": Rule(lambda v: v in ("trec", "parquet"), "trec or parquet"),
        "sha256": Rule(
            lambda v: isinstance(v, str) and re.fullmatch("[0-9a-f]{64}", v), "64 hex digits"
        ),
    },
    run=run_run_file,
    check=check_run_file,
    resolve=resolve_run_file,
    identity=run_file_identity,
)
