"""``dagster dev`` that stops on Ctrl-C / SIGINT / SIGTERM however it was started.

A process started in the background of a non-interactive shell (``dagster dev &`` in a script,
a CI step, ``nohup``) inherits SIGINT as *ignored* (POSIX job control is off there), and Dagster
maps SIGTERM onto SIGINT's handler (its interrupt set-up at start), so ``dagster dev`` then
ignores both. Its daemon and webserver children still take the group's
SIGINT, shut their threads down ("Daemon threads shut down.") and wait for the parent's shutdown
message, which never comes: the whole tree hangs until SIGKILL. This entry point restores the
default handlers first, then replaces itself (``exec``, same pid: ``make dev``'s Ctrl-C and a
test's SIGTERM reach it) by Dagster's own ``dagster dev`` command with the arguments given —
Dagster's public command line, not its internals. ``exec`` resets a handled signal to its
default and keeps an ignored one ignored, hence the restore first::

    # = make dev
    python -m erag_dagster.orchestration.dev_server -w workspace.yaml -h 127.0.0.1 -p 3000

It also creates the instance's storage (``$DAGSTER_HOME``: runs, event log, schedules) before
``dagster dev`` starts its webserver, daemon and code server side by side: on a fresh home those
three would otherwise each create the SQLite tables and stamp their schema version at once, and
one of them can fail with alembic's "Version table 'alembic_version' has more than one head
present" (seen in tests/test_daemon.py on a loaded machine).

A ``$DAGSTER_HOME`` without the instance settings the project relies on (the ``gpu`` pool's
limit, the run queue's: :mod:`erag_dagster.orchestration.instance_settings`) is refused before
anything starts, with one line saying what to add (exit status 2), instead of Dagster's warning
from each of its processes and an unenforced pool.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence


def restore_interrupt_signals() -> None:
    """SIGINT raises KeyboardInterrupt again and SIGTERM terminates, even if inherited ignored."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def create_instance_storage() -> None:
    """Open the ``$DAGSTER_HOME`` instance once (creating its storage) and close it; nothing
    when ``DAGSTER_HOME`` is unset (``dagster dev`` then uses a temporary instance of its own)
    or not an existing absolute folder (``dagster dev`` reports that itself)."""
    home = os.environ.get("DAGSTER_HOME", "")
    if not (os.path.isabs(home) and os.path.isdir(home)):
        return  # unset or unusable: dagster dev says so (or uses a temporary instance) itself
    import dagster as dg

    with dg.DagsterInstance.get():
        pass


def dagster_dev_command(argv: Sequence[str]) -> list[str]:
    """``dagster dev`` with ``argv``, run by this interpreter (``python -m dagster``: the
    ``dagster`` console script's entry point, whichever folder the venv's scripts are in)."""
    return [sys.executable, "-m", "dagster", "dev", *argv]


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``dagster dev`` with ``argv`` (default: this process's arguments) in this process's
    place; a ``$DAGSTER_HOME`` lacking the project's instance settings is one line on stderr
    and exit status 2 instead."""
    from erag_dagster.orchestration.instance_settings import instance_settings_line

    line = instance_settings_line()
    if line is not None:
        print(f"dev server not started: {line}", file=sys.stderr)
        raise SystemExit(2)
    restore_interrupt_signals()
    create_instance_storage()
    command = dagster_dev_command(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
