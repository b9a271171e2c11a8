"""Where erag-dagster keeps what it computes, and how it writes files safely.

Storage root, in order of precedence:
1. ``$ERAG_STORAGE`` if set;
2. ``$DAGSTER_HOME/storage/erag`` if ``DAGSTER_HOME`` is set;
3. ``./.erag_storage`` (relative to the working directory).

Indexes, the label store and converted model folders live under this root, never in the repo.
A root that is a file, or a folder that cannot be created or written, is a :class:`StorageError`
naming it and the variable that chose it.

Files written through :func:`atomic_path` get the permissions a plain ``open()`` would give them
(``0o666`` less the process umask), not ``mkstemp``'s private ``0o600``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from erag_dagster.core.errors import InputError, StorageError


def storage_root(writable: bool = True) -> Path:
    """Return (and create) the storage root described in the module docstring.

    Raises :class:`StorageError` when the root is a file or cannot be created or written.
    ``writable=False`` (readers such as ``audit``, which may run on read-only media) neither
    creates the root nor checks that it is writable; a root that is a file is still refused.
    """
    if env := os.environ.get("ERAG_STORAGE"):
        root, chosen_by = Path(env), "ERAG_STORAGE"
    elif home := os.environ.get("DAGSTER_HOME"):
        root, chosen_by = Path(home) / "storage" / "erag", "DAGSTER_HOME"
    else:
        root, chosen_by = Path.cwd() / ".erag_storage", "the working directory"
    if not writable:
        if root.exists() and not root.is_dir():
            raise StorageError(
                f"{root}: the storage root (from {chosen_by}) is a file, not a folder; "
                "set ERAG_STORAGE to a folder"
            )
        return root
    _writable_folder(
        root, f"storage root (from {chosen_by})", "set ERAG_STORAGE to a writable folder"
    )
    return root


def storage_dir(*parts: str) -> Path:
    """Return (and create) a sub-folder of the storage root (:class:`StorageError` if unusable)."""
    path = storage_root().joinpath(*parts)
    _writable_folder(path, "storage folder", "make it writable or set ERAG_STORAGE elsewhere")
    return path


def _writable_folder(path: Path, what: str, remedy: str) -> None:
    """Create ``path`` (with parents) and check it is a writable folder, else StorageError."""
    if path.exists() and not path.is_dir():
        raise StorageError(f"{path}: the {what} is a file, not a folder; {remedy}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(
            f"{path}: cannot create the {what} ({exc.strerror or exc}); {remedy}"
        ) from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise StorageError(f"{path}: the {what} is not writable; {remedy}")


def check_output(target: Path | str, option: str = "--output") -> Path:
    """Check, before any work runs, that ``target`` can be written; return it as a Path.

    Creates the missing parent folders and a temporary file beside ``target`` (removed at
    once): the only test that also holds for root, read-only mounts and ``/proc``. Raises
    :class:`InputError` naming ``option`` and the path (the user chose it): a folder given as
    the target, a parent that cannot be created, or a folder that refuses a new file.
    """
    target = Path(target)
    if target.is_dir():
        raise InputError(f"{option} {target}: is a folder; give a file path")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"{option} {target}: cannot create folder {target.parent} ({exc.strerror or exc})"
        ) from exc
    try:
        with tempfile.TemporaryFile(dir=target.parent):
            pass
    except OSError as exc:
        raise InputError(
            f"{option} {target}: cannot write in {target.parent} ({exc.strerror or exc})"
        ) from exc
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(f"{option} {target}: the file is not writable")
    return target


@contextlib.contextmanager
def atomic_path(target: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success rename it over ``target``.

    The rename is atomic on POSIX, so readers see the old file or the new one, never a
    half-written one; on error the temporary file is removed and ``target`` is untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0o600; a plain open() respects umask
    finally:
        os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process umask: from ``/proc/self/status`` (Linux, thread-safe), else by setting and
    restoring it at once."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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
