"""Content fingerprints of the external inputs: dataset files and reader model files.

The schedule compares these with the data versions last observed, so a re-evaluation is
requested only when an input really changed. Large files are hashed once per (path, size,
mtime) and the digest is remembered in ``<storage root>/input-hashes.json``.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

from erag_dagster.data.loaders import SAMPLE_FILE, parse_spec
from erag_dagster.paths import atomic_write_text, storage_root


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
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    cache[key] = digest.hexdigest()
    atomic_write_text(cache_path, json.dumps(cache))
    return cache[key]


def tree_digest(path: Path) -> str:
    """sha256 over (relative name, file sha256) of every file under ``path`` (or the file)."""
    if path.is_file():
        return file_digest(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path)}\0{file_digest(file)}\n".encode())
    return digest.hexdigest()


def dataset_digest(spec: str) -> str:
    """Fingerprint of the files a dataset spec reads (plus the spec's options)."""
    parsed = parse_spec(spec)
    if parsed.kind == "sample":
        base = resources.files("erag_dagster") / "data" / "sample" / SAMPLE_FILE
        content = file_digest(Path(str(base)))
    else:
        content = (
            tree_digest(Path(parsed.path))
            if parsed.path and Path(parsed.path).exists()
            else "missing"
        )
    extra = [v for k, v in sorted(parsed.options.items()) if k == "corpus"]
    extra_digest = "".join(tree_digest(Path(v)) for v in extra if Path(v).exists())
    blob = json.dumps([parsed.kind, sorted(parsed.options.items()), content, extra_digest])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
