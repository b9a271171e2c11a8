"""``dagster dev`` that stops on Ctrl-C / SIGINT / SIGTERM however it was started.

A process started in the background of a non-interactive shell (``dagster dev &`` in a script,
a CI step, ``nohup``) inherits SIGINT as *ignored* (POSIX job control is off there), and Dagster
maps SIGTERM onto SIGINT's handler (``dagster._utils.interrupts.setup_interrupt_handlers``), so
``dagster dev`` then ignores both. Its daemon and webserver children still take the group's
SIGINT, shut their threads down ("Daemon threads shut down.") and wait for the parent's shutdown
message, which never comes: the whole tree hangs until SIGKILL. This entry point restores the
default handlers first, then runs Dagster's own ``dagster dev`` with the arguments given::

    python -m erag_dagster.dev_server -w workspace.yaml -h 127.0.0.1 -p 3000   # = make dev

It also creates the instance's storage (``$DAGSTER_HOME``: runs, event log, schedules) before
``dagster dev`` starts its webserver, daemon and code server side by side: on a fresh home those
three would otherwise each create the SQLite tables and stamp their schema version at once, and
one of them can fail with alembic's "Version table 'alembic_version' has more than one head
present" (seen in tests/test_daemon.py on a loaded machine).
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


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``dagster dev`` with ``argv`` (default: this process's arguments)."""
    restore_interrupt_signals()
    create_instance_storage()
    from dagster._cli import main as dagster_main

    sys.argv = ["dagster", "dev", *(sys.argv[1:] if argv is None else argv)]
    dagster_main()


if __name__ == "__main__":
    main()
