"""The one rule for a file a command writes (``--output``): never over what the run reads, never
over a stranger's file without ``--force``, and a one-line error naming it when it fails.

:func:`guard_output`, called before any work runs:

1. the target must be writable (:func:`erag_dagster.core.paths.check_output`);
2. the target must not be any file the run reads — dataset files, the run file, the registry
   and the files it names, the label store (and its ``-wal``/``-shm``/``-journal``), a reader
   config — compared after resolving symlinks (of the target and of every input), by device and
   inode (hard links), and by the name the write would replace; a target inside an input
   *folder* (a cross-encoder) is refused too. ``--force`` does not lift this;
3. an existing target is replaced only when it is an **earlier output of the same command**,
   else ``--force`` is needed.

How an earlier output is recognised: every write through :func:`writing_output` records the
file in the ledger ``<storage root>/written-outputs.json`` — its absolute path (folder
resolved, name kept), the command, its size and sha256. An existing target counts as the
command's earlier output when the ledger holds it for the same command and the file is still a
regular file with that size and sha256 (a file edited, replaced or swapped for a symlink since
is a stranger's again). A ledger-free choice, because a TREC run has no header to carry a mark
and the label parquet and a run must stay byte-identical for the same inputs. Limits: the
ledger lives in the storage root, so another ``ERAG_STORAGE`` does not know the file (then
``--force``); two commands recording at the same instant may lose one record (the same
consequence); nothing else is ever lost by it.

:func:`writing_output` writes atomically (:func:`erag_dagster.core.paths.atomic_path`) and turns an
``OSError`` (a full disk, ``EFBIG`` past a file-size limit, a vanished folder) — also one a
polars writer wraps in its own error — into one :class:`~erag_dagster.core.errors.StorageError`
(exit 1) naming the option and the path.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from erag_dagster.core.errors import InputError, StorageError
from erag_dagster.core.hashing import sha256_file
from erag_dagster.core.paths import atomic_path, atomic_write_text, check_output, storage_root

__all__ = ["LEDGER_NAME", "Input", "guard_output", "writing_output"]

LEDGER_NAME = "written-outputs.json"
"""The ledger of files written by commands, in the storage root (see the module docstring)."""

Input = tuple[str, "Path | str | None"]
"""``(what, path)``: what the run reads, in words (``"the label store"``), and where."""


def _written_name(target: Path) -> Path:
    """The directory entry a write replaces: the folder resolved, the name kept."""
    return target.absolute().parent.resolve() / target.name


def _clashes(target: Path, source: Path) -> bool:
    """True when writing ``target`` would write over, or into, ``source``."""
    resolved, name = target.resolve(), _written_name(target)
    source_resolved = source.resolve()
    if source_resolved in (resolved, name) or _written_name(source) in (resolved, name):
        return True
    if source_resolved.is_dir() and resolved.is_relative_to(source_resolved):
        return True
    with contextlib.suppress(OSError):
        return target.exists() and source.exists() and os.path.samefile(target, source)
    return False


def guard_output(
    target: Path | str,
    command: str,
    reads: Iterable[Input] = (),
    force: bool = False,
    option: str = "--output",
) -> Path:
    """Apply the rule of the module docstring to ``target`` before ``command`` runs.

    ``reads`` lists every file (or folder) the run reads; ``None`` paths are skipped. Raises
    :class:`InputError` naming the option, the path and what it clashes with. Returns the target
    as a Path.
    """
    target = check_output(target, option)
    for what, source in reads:
        if source is not None and str(source) and _clashes(target, Path(source)):
            raise InputError(
                f"{option} {target}: is {what} ({source}), which this run reads; "
                "choose another output path"
            )
    if not force and os.path.lexists(target) and not _earlier_output(target, command):
        raise InputError(
            f"{option} {target}: the file exists and is not an earlier output of "
            f"'erag-dagster {command}'; pass --force to replace it, or choose another path"
        )
    return target


@contextlib.contextmanager
def writing_output(target: Path | str, command: str, option: str = "--output") -> Iterator[Path]:
    """Yield a temporary path to fill; on success rename it over ``target`` and record it as
    ``command``'s output. An ``OSError`` while writing is a :class:`StorageError` naming
    ``option`` and ``target`` (``target`` is left as it was)."""
    target = Path(target)
    try:
        with atomic_path(target) as tmp:
            yield tmp
    except Exception as exc:
        reason = _write_failure(exc)
        if reason is None:
            raise
        raise StorageError(
            f"{option} {target}: cannot write the file ({reason}); nothing was replaced: free "
            "some space or choose another path, then run the command again"
        ) from exc
    _record(target, command)


_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _write_failure(exc: BaseException) -> str | None:
    """Why a write failed, when the disk refused it: an ``OSError``'s words, or a polars
    writer's error that wraps one (``… underlying IO error: File too large (os error 27)``:
    ``write_parquet`` raises ``ComputeError``, not ``OSError``); ``None`` for anything else."""
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    if (type(exc).__module__ or "").startswith("polars"):
        found = _OS_ERROR.search(str(exc))
        if found:
            return os.strerror(int(found.group(1)))
    return None


def _ledger_path(writable: bool) -> Path:
    return storage_root(writable=writable) / LEDGER_NAME


def _read_ledger() -> dict[str, dict]:
    try:
        data = json.loads(_ledger_path(writable=False).read_text(encoding="utf-8"))
    except (OSError, ValueError, StorageError):
        return {}
    return data if isinstance(data, dict) else {}


def _fingerprint(path: Path) -> dict[str, object]:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def _earlier_output(target: Path, command: str) -> bool:
    record = _read_ledger().get(str(_written_name(target)))
    if not isinstance(record, dict) or record.get("command") != command:
        return False
    if target.is_symlink() or not target.is_file():
        return False
    try:
        if target.stat().st_size != record.get("size"):
            return False
        return _fingerprint(target) == {k: record.get(k) for k in ("size", "sha256")}
    except OSError:
        return False


def _record(target: Path, command: str) -> None:
    """Add ``target`` to the ledger; a ledger that cannot be written is skipped (the only
    consequence: replacing this output later needs ``--force``)."""
    with contextlib.suppress(OSError, StorageError):
        ledger = _read_ledger()
        ledger[str(_written_name(target))] = {"command": command, **_fingerprint(target)}
        atomic_write_text(_ledger_path(writable=True), json.dumps(ledger, indent=1))
