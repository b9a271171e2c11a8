"""A throwaway PostgreSQL server on loopback, from Debian's PostgreSQL binaries (tests, bench).

PostgreSQL refuses to run as root, so when this process is root the server runs as the
``postgres`` user (``su``); otherwise as the current user. The data folder is a fresh temporary
folder (``initdb -A trust``: loopback only, no password), the port a free one on 127.0.0.1, the
Unix socket inside the data folder. :func:`postgres_server` starts it and stops it (``pg_ctl
stop -m fast``) and removes the folder after, even when the block fails.

Binaries: ``$ERAG_PG_BIN`` or the newest ``/usr/lib/postgresql/*/bin``; when there are none,
``scripts/ensure-postgres.sh`` installs Debian's ``postgresql`` (root + apt), and
:class:`PostgresUnavailable` says so otherwise.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 60


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries here, and they could not be installed."""


@dataclass(frozen=True)
class PostgresServer:
    """A running server: connect as ``user`` (no password) to ``host:port``."""

    host: str
    port: int
    user: str
    data: Path
    bin_dir: Path
    options: str

    def stop(self) -> None:
        """Stop the server (``pg_ctl stop -m fast``); :meth:`start` brings it back."""
        subprocess.run(
            _as_server_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast",
                             "-w", "stop"]),
            check=False, capture_output=True, timeout=START_TIMEOUT_S,
        )  # fmt: skip

    def start(self) -> None:
        """Start the server on its data folder and port (``pg_ctl start -w``)."""
        subprocess.run(
            _as_server_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-o",
                             self.options, "-l", str(self.data.parent / "log"), "-w", "start"]),
            check=True, capture_output=True, text=True, timeout=START_TIMEOUT_S,
        )  # fmt: skip

    def url(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL with no password (the server trusts loopback)."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (dropped first if it exists) and return its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


def pg_bin() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl`` (installed on first need when possible)."""
    if env := os.environ.get("ERAG_PG_BIN"):
        return Path(env)
    for attempt in range(2):
        found = sorted(
            Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
            key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
        )
        if found:
            return found[-1].parent
        if attempt == 0:
            subprocess.run([str(REPO / "scripts/ensure-postgres.sh")], check=False)
    raise PostgresUnavailable(
        "PostgreSQL server binaries not found under /usr/lib/postgresql (install Debian's "
        "'postgresql' package, or set ERAG_PG_BIN)"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["su", "postgres", "-s", "/bin/bash", "-c", shlex.join(command)]


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a fresh server (about 3 s), yield it, stop it and remove its data after."""
    bin_dir = pg_bin()
    root = Path(tempfile.mkdtemp(prefix="erag-pg-"))
    user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    data, port = root / "data", _free_port()
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=on"
    server = PostgresServer("127.0.0.1", port, user, data, bin_dir, options)
    started = False
    try:
        subprocess.run(
            _as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", user]),
            check=True, capture_output=True, text=True, timeout=START_TIMEOUT_S,
        )  # fmt: skip
        server.start()
        started = True
        yield server
    except subprocess.CalledProcessError as exc:
        log = root / "log"
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise PostgresUnavailable(f"cannot start PostgreSQL: {exc.stderr}{tail}") from None
    finally:
        if started:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


# -- pytest fixtures (registered by tests/conftest.py) ---------------------------------------------

_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One throwaway server for the whole session (a missing server is a failure, not a skip)."""
    try:
        with postgres_server() as server:
            yield server
    except PostgresUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(params=["sqlite", "postgres"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty label store of each backend: an SQLite path, or a new database's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "labels.sqlite")
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_database(f"store_{next(_databases)}")
