"""Which label store a setting names: an SQLite file or a PostgreSQL URL, and how to print it.

Accepted forms (``--store``, the ``label_store`` resource, ``$ERAG_LABEL_STORE``):

* a plain path, ``labels.sqlite`` or ``/data/labels.sqlite`` — SQLite (as before URLs);
* ``sqlite:///relative/path`` or ``sqlite:////absolute/path`` — SQLite (SQLAlchemy's form:
  the path is everything after ``sqlite:///``);
* ``postgresql://[user@]host[:port]/database[?param=value…]`` (or ``postgres://``) —
  PostgreSQL, any libpq parameter (``sslmode``, ``options=-csearch_path=erag`` …) allowed;
* a libpq keyword DSN, ``host=db dbname=erag user=me`` (text that starts with a libpq keyword
  and ``=``, :data:`LIBPQ_KEYWORDS`) — PostgreSQL too (never a file of that name).

Credentials come from the environment only: a URL that carries a password is refused (it would
end up in run config, logs and the UI); libpq reads ``PGPASSWORD``, ``PGPASSFILE``
(``~/.pgpass``), ``PGUSER``, ``PGHOST`` … itself; so is a DSN with a ``password`` keyword.
:func:`redact_url` masks a password anyway wherever a URL or DSN is printed (the one masking
rule: :func:`erag_dagster.core.credentials.mask_credentials`).
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, quote, urlsplit

from erag_dagster.core.credentials import mask_credentials
from erag_dagster.core.errors import InputError

__all__ = [
    "STORE_ENV",
    "StoreTarget",
    "check_store_location",
    "parse_store",
    "redact_url",
    "sqlite_read_only_uri",
    "store_files",
]

STORE_ENV = "ERAG_LABEL_STORE"
"""Environment variable naming the label store when no ``--store``/resource value is given."""

POSTGRES_SCHEMES = ("postgresql", "postgres")
LIBPQ_KEYWORDS = frozenset(
    {"host", "hostaddr", "port", "dbname", "user", "password", "passfile", "service",
     "sslmode", "options", "application_name", "connect_timeout", "target_session_attrs"}
)  # fmt: skip
"""libpq connection keywords; text starting with one of them and ``=`` is a keyword DSN."""
_DSN_START = re.compile(r"^\s*(?P<key>[a-z_]+)\s*=")
_DSN_PASSWORD = re.compile(r"(?:^|\s)password\s*=", re.IGNORECASE)


class StoreTarget(NamedTuple):
    """``("sqlite", path)`` or ``("postgresql", url)``."""

    kind: str
    where: str


def parse_store(text: str | Path) -> StoreTarget:
    """The backend and location named by ``text`` (forms: module docstring). An unknown scheme
    or a PostgreSQL URL with a password is an :class:`InputError`."""
    if isinstance(text, Path):
        return StoreTarget("sqlite", str(text))
    text = text.strip()
    start = _DSN_START.match(text)
    if start and start.group("key") in LIBPQ_KEYWORDS:
        if _DSN_PASSWORD.search(text):
            raise InputError(
                f"{redact_url(text)}: the label store DSN carries a password; give it in "
                "PGPASSWORD (or ~/.pgpass) instead, so it stays out of config, logs and the UI"
            )
        return StoreTarget("postgresql", text)
    scheme, sep, rest = text.partition("://")
    if not sep or "/" in scheme or "\\" in scheme:
        return StoreTarget("sqlite", text)
    scheme = scheme.lower()
    if scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise InputError(f"{text}: an SQLite store URL is sqlite:///PATH (three slashes)")
        return StoreTarget("sqlite", rest[1:])
    if scheme in POSTGRES_SCHEMES:
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018  (parses the port: ValueError if it is not a number)
        except ValueError as exc:
            raise InputError(f"{redact_url(text)}: not a valid PostgreSQL URL ({exc})") from None
        if parts.password is not None or "password" in {k.lower() for k in parse_qs(parts.query)}:
            raise InputError(
                f"{redact_url(text)}: the label store URL carries a password; give it in "
                "PGPASSWORD (or ~/.pgpass) instead, so it stays out of config, logs and the UI"
            )
        return StoreTarget("postgresql", text)
    raise InputError(
        f"{redact_url(text)}: unknown label store scheme {scheme!r} "
        "(a path, sqlite:///PATH or postgresql://…)"
    )


def check_store_location(text: str | Path) -> StoreTarget:
    """The store ``text`` names (:func:`parse_store`), its location checked without opening or
    creating anything — what every door (``label``, ``evaluate()``, the gate, ``audit``) checks
    before any work: an SQLite path that exists must be a regular file (a folder, a FIFO, a
    device is named as such: :func:`erag_dagster.core.input_files.regular_file`; a file that is not
    an SQLite database is one :class:`~erag_dagster.core.errors.StorageError`), and the nearest
    folder above it that exists must be a folder (the store's folder is created, never a
    file's). A PostgreSQL store is checked when it is connected to."""
    from erag_dagster.core.input_files import UNBOUNDED, regular_file

    target = parse_store(text)
    if target.kind != "sqlite":
        return target
    path = Path(target.where)
    if os.path.lexists(path):
        regular_file(path, UNBOUNDED)
        _refuse_foreign(path)
        return target
    parent = path.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if os.path.lexists(parent) and not parent.is_dir():
        raise InputError(
            f"{path}: cannot be a label store: {parent} is a file, not a folder; give a path in "
            "a folder"
        )
    return target


def sqlite_read_only_uri(path: Path) -> str:
    """The URI of a read-only SQLite open that writes nothing: ``mode=ro``, plus ``immutable=1``
    when no ``-wal`` file exists (no process has the store open), so SQLite creates no
    ``-wal``/``-shm`` beside it (read-only media; a check that must leave no trace)."""
    quiet = not path.with_name(path.name + "-wal").exists()
    return f"file:{quote(str(path))}?mode=ro" + ("&immutable=1" if quiet else "")


def _refuse_foreign(path: Path) -> None:
    """A non-empty file that is not an SQLite database is not a label store: one
    :class:`StorageError` line, before any work (SQLite would say so only when first queried).

    The header is read **through SQLite** (a read-only connection, ``PRAGMA schema_version``),
    never by opening the file: closing any descriptor of a database file releases every POSIX
    lock this process holds on it, so a plain ``open``/``close`` while another store object of
    this process has the file open lets other processes checkpoint or reset the WAL under that
    connection — the store corrupted (SQLite's "How to corrupt", §2.2; reproduced by
    ``scripts/stress_label_store.py``). SQLite's own VFS keeps such descriptors open until its
    locks are gone."""
    from erag_dagster.core.errors import StorageError

    try:
        conn = sqlite3.connect(sqlite_read_only_uri(path), uri=True, timeout=0)
    except sqlite3.Error:
        return  # unreadable here: the store's own open says why
    try:
        conn.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc).lower():
            raise StorageError(
                f"{path}: not a readable erag-dagster label store (not an SQLite file); move "
                "the file away or pass --store with another file"
            ) from None
    finally:
        conn.close()


def redact_url(url: str) -> str:
    """``url`` (a store URL, DSN or path) with any credential replaced by ``***``
    (:func:`~erag_dagster.core.credentials.mask_credentials`)."""
    return mask_credentials(str(url))


def default_store(storage_root: Path) -> str:
    """``$ERAG_LABEL_STORE``, else ``<storage root>/labels.sqlite``."""
    return os.environ.get(STORE_ENV) or str(storage_root / "labels.sqlite")


def store_files(store: str | Path) -> list[tuple[str, Path]]:
    """An SQLite label store's file and the files SQLite keeps beside it (WAL, shared memory,
    rollback journal), as ``(what, path)`` inputs of
    :func:`erag_dagster.core.output_guard.guard_output`; a PostgreSQL store has none."""
    kind, where = parse_store(store if isinstance(store, Path) else str(store))
    if kind != "sqlite":
        return []
    path = Path(where)
    siblings = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal")]
    return [("the label store", path), *(("the label store's journal", p) for p in siblings)]
