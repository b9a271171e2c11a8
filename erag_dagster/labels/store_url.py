"""Which label store a setting names: an SQLite file or a PostgreSQL URL, and how to print it.

Accepted forms (``--store``, the ``label_store`` resource, ``$ERAG_LABEL_STORE``):

* a plain path, ``labels.sqlite`` or ``/data/labels.sqlite`` — SQLite (as before URLs);
* ``sqlite:///relative/path`` or ``sqlite:////absolute/path`` — SQLite (SQLAlchemy's form:
  the path is everything after ``sqlite:///``);
* ``postgresql://[user@]host[:port]/database[?param=value…]`` (or ``postgres://``) —
  PostgreSQL, any libpq parameter (``sslmode``, ``options=-csearch_path=erag`` …) allowed.

Credentials come from the environment only: a URL that carries a password is refused (it would
end up in run config, logs and the UI); libpq reads ``PGPASSWORD``, ``PGPASSFILE``
(``~/.pgpass``), ``PGUSER``, ``PGHOST`` … itself. :func:`redact_url` masks a password anyway
wherever a URL is printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit, urlunsplit

from erag_dagster.errors import InputError

__all__ = ["STORE_ENV", "StoreTarget", "parse_store", "redact_url"]

STORE_ENV = "ERAG_LABEL_STORE"
"""Environment variable naming the label store when no ``--store``/resource value is given."""

POSTGRES_SCHEMES = ("postgresql", "postgres")


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
    scheme, sep, rest = text.partition("://")
    if not sep or "/" in scheme or "\\" in scheme:
        return StoreTarget("sqlite", text)
    scheme = scheme.lower()
    if scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise InputError(f"{text}: an SQLite store URL is sqlite:///PATH (three slashes)")
        return StoreTarget("sqlite", rest[1:])
    if scheme in POSTGRES_SCHEMES:
        parts = urlsplit(text)
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


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (also in a ``password=`` parameter)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable store URL>"
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}"
    query = "&".join(
        f"{k}=***" if k.lower() == "password" else f"{k}{eq}{v}"
        for k, eq, v in (p.partition("=") for p in parts.query.split("&") if p)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def default_store(storage_root: Path) -> str:
    """``$ERAG_LABEL_STORE``, else ``<storage root>/labels.sqlite``."""
    return os.environ.get(STORE_ENV) or str(storage_root / "labels.sqlite")
