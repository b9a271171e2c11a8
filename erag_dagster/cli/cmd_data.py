"""The dataset command of ``erag-dagster``: ``check-dataset`` (docs/data.md)."""

from __future__ import annotations

import argparse


def cmd_check_dataset(args: argparse.Namespace) -> int:
    """Load a dataset spec through the loaders every command uses and print what it holds,
    and what it can and cannot compute; a bad file is one line (exit 2)."""
    from erag_dagster.data.check import check_dataset, format_check

    print(format_check(check_dataset(args.spec)))
    return 0
