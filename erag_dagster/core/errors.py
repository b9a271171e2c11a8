"""The errors erag-dagster expects, and the one place foreign exceptions become them.

Every expected failure is one line that names *what* is wrong and *where* (file and line, the
offending id, the store's file and what to do), so a command line prints it as-is:

* :class:`InputError` (exit status 2): bad user input — a file, id, label, metric name, spec,
  option or config the user can fix;
* :class:`EnvironmentFault` (exit status 1): the machine, not the input — Java, a model, the
  network, a missing package;
* :class:`StorageError` (exit status 1): a storage fault — an unreadable, locked, read-only or
  foreign file or folder that erag-dagster keeps its results in.

Code that reads a user's file wraps the read in :func:`concerning`, which turns the foreign
exceptions a bad file raises (``UnicodeDecodeError``, a polars ``ComputeError`` on a garbage
parquet file, ``OverflowError`` on an absurd number, ``sqlite3`` errors, ``OSError``) into one of
the errors above naming that file. :func:`as_fault` is the same mapping for a boundary that knows
no file; anything it does not recognise stays a bug (a traceback).
"""

from __future__ import annotations

import contextlib
import errno
import sqlite3
from collections.abc import Iterator
from pathlib import Path

EXIT_INPUT = 2
EXIT_ENVIRONMENT = 1


class InputError(ValueError):
    """Bad user input (file, id, label, metric name, config): one-line message, exit 2."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class EnvironmentFault(RuntimeError):
    """The environment failed (Java, a model, the network, a package): one line, exit 1."""

    exit_code = EXIT_ENVIRONMENT

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class StorageError(EnvironmentFault):
    """A storage file or folder is unusable; the message names it and says what to do."""


Fault = InputError | EnvironmentFault


def where(path: object, line: int | None = None) -> str:
    """Format a location as ``path:line`` (line is 1-based) or ``path``."""
    return f"{path}:{line}" if line is not None else f"{path}"


def undecodable_at(path: Path) -> str | None:
    """``path:line`` (column) of the first byte sequence in ``path`` that is not UTF-8, or None.

    Reads the file line by line in binary, so the line number counts ``\\n`` as the text reader
    does. A folder is searched file by file (sorted, recursively). None when every byte decodes.
    """
    path = Path(path)
    if path.is_dir():
        for child in sorted(p for p in path.rglob("*") if p.is_file()):
            if found := undecodable_at(child):
                return found
        return None
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    byte = raw[exc.start : exc.start + 1].hex()
                    return f"{where(path, number)}: byte 0x{byte} at column {exc.start + 1}"
    except OSError:
        return None
    return None


def _sqlite_fault(exc: sqlite3.Error, path: Path | None) -> StorageError:
    store = path if path is not None else "the label store"
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return StorageError(
            f"{store}: locked by another process for longer than the busy timeout; "
            "wait for the other erag-dagster run to finish, then retry"
        )
    if "readonly" in text or "read-only" in text:
        return StorageError(
            f"{store}: read-only (SQLite: {exc}); make the file and its folder writable "
            "or point --store / ERAG_STORAGE at a writable place"
        )
    if "unable to open" in text:
        return StorageError(
            f"{store}: cannot be opened (SQLite: {exc}); check that its folder exists and is "
            "writable, or point --store / ERAG_STORAGE elsewhere"
        )
    if "not a database" in text or "malformed" in text or "no such table" in text:
        return StorageError(
            f"{store}: not a readable erag-dagster label store (SQLite: {exc}); move the file "
            "away (its labels are lost if it was one) or pass --store with another file"
        )
    return StorageError(f"{store}: SQLite error: {exc}")


def _os_fault(exc: OSError, path: Path | None) -> Fault:
    name = exc.filename if exc.filename is not None else path
    reason = exc.strerror or _first_line(exc)
    at = f"{name}: " if name is not None else ""  # never "None: …" (an OSError without a file)
    if isinstance(exc, ConnectionError | TimeoutError) or exc.errno is None:
        # the network, or a library's OSError without an errno (e.g. a model that cannot load)
        return EnvironmentFault(f"{at}{reason}")
    if exc.errno in (errno.ENOENT, errno.EISDIR, errno.ENOTDIR):
        return InputError(f"{at}{reason}")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return StorageError(f"{at}{reason}; make it writable or choose another place")
    if exc.errno in (errno.ENOSPC, errno.EFBIG):
        return StorageError(f"{at}{reason}; free some space and retry")
    return StorageError(f"{at}{reason}")


def as_fault(exc: BaseException, *paths: Path | str | None) -> Fault | None:
    """The one-line error for a foreign exception raised while reading ``paths``; None if unknown.

    ``paths`` are the files (or folders) the failing code was reading, most specific first; a
    ``UnicodeDecodeError`` is located (file:line) by scanning them. Unknown exceptions return
    None: they are bugs and keep their traceback.
    """
    if isinstance(exc, InputError | EnvironmentFault):
        return exc
    files = [Path(p) for p in paths if p is not None]
    first = files[0] if files else None
    named = where(first) if first is not None else "input"
    if isinstance(exc, UnicodeDecodeError):
        for candidate in files:
            if found := undecodable_at(candidate):
                return InputError(f"{found} is not UTF-8 text; save the file as UTF-8")
        return InputError(f"{named}: not UTF-8 text ({exc.reason}); save the file as UTF-8")
    if isinstance(exc, OverflowError):
        return InputError(f"{named}: a number is too large ({exc})")
    if isinstance(exc, sqlite3.Error):
        return _sqlite_fault(exc, first)
    if isinstance(exc, OSError):
        return _os_fault(exc, first)
    module = type(exc).__module__ or ""
    if module.startswith("polars"):
        return InputError(f"{named}: unreadable ({type(exc).__name__}: {_first_line(exc)})")
    if module.startswith("jnius") or type(exc).__name__ == "JavaException":
        return EnvironmentFault(f"Java failed: {_first_line(exc)}")
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextlib.contextmanager
def concerning(*paths: Path | str | None) -> Iterator[None]:
    """Turn a foreign exception raised inside the block into a one-line error naming ``paths``.

    The original exception stays attached as ``__cause__`` (a ``--debug`` traceback shows it);
    exceptions :func:`as_fault` does not recognise propagate unchanged.
    """
    try:
        yield
    except (InputError, EnvironmentFault):
        raise
    except Exception as exc:
        fault = as_fault(exc, *paths)
        if fault is None:
            raise
        raise fault from exc
