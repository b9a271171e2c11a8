"""Where erag-dagster keeps what it computes, and how it writes files safely.

Storage root, in order of precedence:
1. ``$ERAG_STORAGE`` if set;
2. ``$DAGSTER_HOME/storage/erag`` if ``DAGSTER_HOME`` is set;
3. ``./.erag_storage`` (relative to the working directory).

Indexes, the label store and converted model folders live under this root, never in the repo.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def storage_root() -> Path:
    """Return (and create) the storage root described in the module docstring."""
    if env := os.environ.get("ERAG_STORAGE"):
        root = Path(env)
    elif home := os.environ.get("DAGSTER_HOME"):
        root = Path(home) / "storage" / "erag"
    else:
        root = Path.cwd() / ".erag_storage"
    root.mkdir(parents=True, exist_ok=True)
    return root


def storage_dir(*parts: str) -> Path:
    """Return (and create) a sub-folder of the storage root."""
    path = storage_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def atomic_path(target: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success rename it over ``target``.

    The rename is atomic on POSIX, so readers see the old file or the new one, never a
    half-written one; on error the temporary file is removed and ``target`` is untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def atomic_write_text(target: Path | str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``target`` atomically."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def model_cache_dir() -> Path:
    """Folder for converted model weights (e.g. the packaged GGUF reader as safetensors).

    ``$ERAG_MODEL_CACHE``, else ``$XDG_CACHE_HOME/erag-dagster/models``, else
    ``~/.cache/erag-dagster/models``. Shared across storage roots: conversion is a pure
    function of the source file's sha256, which names each entry.
    """
    if env := os.environ.get("ERAG_MODEL_CACHE"):
        root = Path(env)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(base) / "erag-dagster" / "models"
    root.mkdir(parents=True, exist_ok=True)
    return root
