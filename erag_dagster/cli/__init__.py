"""``erag-dagster`` command line: thin over the same library functions the assets use.

The console script is :func:`main` (``erag_dagster.cli:main``; also ``python -m
erag_dagster.cli``). One module per job:

* :mod:`.boundary`: :func:`main`, the one error boundary (exit 2 input, 1 environment).
* :mod:`.parser`: :func:`build_parser`, every command's options and help, one table.
* :mod:`.cmd_eval`: ``retrieve``, ``evaluate-run``, ``label``, ``score``, ``rerank``,
  ``correlate``.
* :mod:`.cmd_run`: ``run``, the whole graph and its reports.
* :mod:`.cmd_store`: ``audit``, ``import-recovery``, ``store copy``.
* :mod:`.cmd_data`: ``check-dataset``.
* :mod:`.cmd_gate`: ``compare``, ``baseline`` (the regression gate).
* :mod:`.common`: what the commands share (dataset and registry loading, the files a command
  reads, ``--metrics``, printing a table).

Each command is a short adapter (parse, call one library function, print); the logic it calls
lives in the library modules.
"""

from __future__ import annotations

from erag_dagster.cli.boundary import main
from erag_dagster.cli.parser import build_parser
from erag_dagster.orchestration import notices  # noqa: F401  (Dagster's beta notices filtered, before dagster)

__all__ = ["build_parser", "main"]
