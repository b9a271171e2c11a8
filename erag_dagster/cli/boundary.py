"""The one error boundary of ``erag-dagster``: :func:`main` runs one command.

Every expected failure prints ONE line on stderr naming what and where, and exits 2 for bad
input (:class:`~erag_dagster.core.errors.InputError`, including bad arguments) or 1 for an
environment or storage fault (:class:`~erag_dagster.core.errors.EnvironmentFault`). Foreign
exceptions from reading a user's file are mapped with the file they concern
(:func:`~erag_dagster.core.errors.concerning`); an unexpected exception is a bug and keeps its
traceback. ``--debug`` (or ``ERAG_DEBUG=1``) prints the traceback of an expected failure too.
Output files are checked for writability before the work that fills them runs (in the
commands).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

from erag_dagster.cli.parser import build_parser
from erag_dagster.core.credentials import mask_credentials
from erag_dagster.core.errors import as_fault


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the error boundary of the module docstring. Returns the exit status."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    debug = os.environ.get("ERAG_DEBUG", "").strip() not in ("", "0")
    try:
        args = build_parser().parse_args(argv)
        debug = debug or bool(getattr(args, "debug", False))
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("erag-dagster: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        fault = as_fault(exc)
        if fault is None:
            raise  # not an expected failure: a bug, with its traceback
        if debug:
            traceback.print_exc()
        print(f"erag-dagster: error: {mask_credentials(str(fault))}", file=sys.stderr)
        return fault.exit_code
