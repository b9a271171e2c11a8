"""The Dagster instance settings this project relies on, checked where a user meets them.

``$DAGSTER_HOME/dagster.yaml`` must set (``deploy/local/dagster.yaml`` does; scripts/setup.sh
copies it to ``.dagster_home``):

* ``concurrency.pools.default_limit`` — the limit of the ``gpu`` pool that every reader-bound
  step runs in (``assets/labels.py``'s ``GPU_POOL``). Without it Dagster does not limit pools at
  all: runs launched from the UI or the daemon load one reader per step at once.
* ``concurrency.runs.max_concurrent_runs`` — the run queue's limit: without it every queued run
  starts at once (each a process that may load a reader).

``run_queue.dequeue_interval_seconds`` (1 s in the local file) only makes queued runs start
sooner; it is documented (docs/dagster-ui.md) but not required.

:func:`instance_settings_line` is the one line that says what a home lacks; :func:`warn_once`
emits it at most once per process (``erag-dagster run``, ``make dev``'s dev server and a code
server's definitions load all call it) and silences Dagster's own "No dagster instance
configuration file" warning, which the line replaces. Reads the YAML file only: no instance is
opened, so the check costs a file read.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import yaml

#: The settings required, as key paths into dagster.yaml, with the value deploy/local uses.
REQUIRED: dict[tuple[str, ...], int] = {
    ("concurrency", "pools", "default_limit"): 1,
    ("concurrency", "runs", "max_concurrent_runs"): 4,
}

#: What to add, one line of YAML (flow style) with every required setting.
SNIPPET = "concurrency: {pools: {default_limit: 1}, runs: {max_concurrent_runs: 4}}"

#: Dagster's warning for a home without dagster.yaml (logged by every process that opens it).
_DAGSTER_MISSING_FILE = "No dagster instance configuration file"

_warned = False


def missing_settings(config_file: Path) -> list[str]:
    """The dotted names of :data:`REQUIRED` that ``config_file`` does not set (all of them when
    the file does not exist); empty when the file is not a YAML mapping Dagster could read
    (Dagster reports that itself, at length)."""
    if not config_file.is_file():
        return [".".join(path) for path in REQUIRED]
    try:
        config = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    if not isinstance(config, dict):
        return []
    missing = []
    for path in REQUIRED:
        node: object = config
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            missing.append(".".join(path))
    return missing


def instance_settings_line(home: str | None = None) -> str | None:
    """One line naming what ``home`` (default ``$DAGSTER_HOME``) lacks and what to add; ``None``
    when nothing is missing, when no home is set (Dagster then uses a temporary instance of its
    own) or when it is not an existing absolute folder (the commands say so themselves)."""
    home = os.environ.get("DAGSTER_HOME", "") if home is None else home
    if not (home and os.path.isabs(home) and os.path.isdir(home)):
        return None
    config_file = Path(home) / "dagster.yaml"
    missing = missing_settings(config_file)
    if not missing:
        return None
    what = "has no dagster.yaml" if not config_file.exists() else f"lacks {', '.join(missing)}"
    return (
        f"DAGSTER_HOME={home} {what}: reader steps then run without the gpu pool's limit and "
        f"queued runs without a limit; copy deploy/local/dagster.yaml to {config_file} "
        f"(scripts/setup.sh does) or add: {SNIPPET}"
    )


class _DropMissingFileWarning(logging.Filter):
    """Drops Dagster's "No dagster instance configuration file" warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_DAGSTER_MISSING_FILE)


def warn_once(emit: Callable[[str], None] | None = None, home: str | None = None) -> str | None:
    """Emit :func:`instance_settings_line` once per process through ``emit`` (default: a warning
    of the ``erag_dagster`` logger) and drop Dagster's own missing-file warnings from then on.
    Returns the line (``None`` when nothing is missing or it was emitted before)."""
    global _warned
    line = None if _warned else instance_settings_line(home)
    if line is None:
        return None
    _warned = True
    logging.getLogger("dagster").addFilter(_DropMissingFileWarning())
    (emit or logging.getLogger("erag_dagster").warning)(line)
    return line
