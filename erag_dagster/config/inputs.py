"""Content fingerprints of the external inputs: dataset files and reader model files.

The schedule compares these with the data versions last observed, so a re-evaluation is
requested only when an input really changed. Large files are hashed once per (path, size,
mtime) and the digest is remembered in ``<storage root>/input-hashes.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_text
from erag_dagster.core.input_files import regular_file_sha256
from erag_dagster.core.paths import atomic_write_text, storage_root
from erag_dagster.data.loaders import dataset_source_files, parse_spec


def _cache_file() -> Path:
    return storage_root() / "input-hashes.json"


def file_digest(path: Path) -> str:
    """sha256 of a file, cached by (resolved path, size, mtime_ns)."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    cache_path = _cache_file()
    try:
        cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        cache = {}
    if key in cache:
        return cache[key]
    cache[key] = regular_file_sha256(path)
    atomic_write_text(cache_path, json.dumps(cache))
    return cache[key]


def dataset_digest(spec: str) -> str:
    """Fingerprint of a dataset spec: its kind, its options and the content of exactly the files
    its loader reads (:func:`~erag_dagster.data.loaders.dataset_source_files`, e.g. a KILT
    ``corpus=`` file found beside the KILT file). A spec whose files are missing hashes as
    ``"missing"``, so their appearance is a change. 16 hex digits.
    """
    parsed = parse_spec(spec)
    try:
        content: list[str] | str = [file_digest(path) for path in dataset_source_files(spec)]
    except InputError:
        content = "missing"
    blob = json.dumps([parsed.kind, sorted(parsed.options.items()), content])
    return sha256_text(blob)[:16]
