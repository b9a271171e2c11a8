"""sha256 of canonical content: the one home of every content hash the project stores or compares.

* :func:`sha256_text` — a string's UTF-8 bytes.
* :func:`canonical_json` / :func:`sha256_json` — JSON with sorted keys, no whitespace and UTF-8
  kept (not ``\\u`` escaped): equal values give equal bytes whatever their key order.
* :func:`sha256_file` — a file's bytes, read in 4 MiB blocks.
* :func:`sha256_frame` — a polars frame's rows as JSON lines, in row order (streamed in slices,
  so the digest equals that of ``frame.write_ndjson()`` without building the whole text).

All return 64 lower-case hex digits; callers that show a short form take a prefix.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:  # only an annotation: the reader's import graph stays free of polars
    import polars as pl  # (bench/gpu_check.py runs the reader where polars is absent)

__all__ = [
    "canonical_json",
    "sha256_file",
    "sha256_frame",
    "sha256_json",
    "sha256_stream",
    "sha256_text",
]

_BLOCK = 1 << 22
_FRAME_SLICE = 50_000


def sha256_text(text: str) -> str:
    """sha256 hex of a string's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: the text every JSON hash is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_json(value: Any) -> str:
    """sha256 hex of :func:`canonical_json` of ``value``."""
    return sha256_text(canonical_json(value))


def sha256_file(path: str | Path) -> str:
    """sha256 hex of a file's bytes (read in 4 MiB blocks; ``OSError`` if unreadable). For a
    user's input file use :func:`erag_dagster.core.input_files.file_sha256` (regular files only)."""
    with open(path, "rb") as handle:
        return sha256_stream(handle)


def sha256_stream(handle: BinaryIO) -> str:
    """sha256 hex of the bytes left in a binary stream, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    for block in iter(lambda: handle.read(_BLOCK), b""):
        digest.update(block)
    return digest.hexdigest()


def sha256_frame(frame: pl.DataFrame) -> str:
    """sha256 hex of ``frame``'s rows as JSON lines (``write_ndjson``), in row order."""
    digest = hashlib.sha256()
    for part in frame.iter_slices(_FRAME_SLICE):
        digest.update(part.write_ndjson().encode("utf-8"))
    return digest.hexdigest()
