"""``--json`` output shared by the benches: every printed table as rows of a JSON document.

Each bench accepts ``--json PATH``: it then also writes ``{"bench": name, "settings": {...},
"tables": {table name: [row dict, ...]}}`` to PATH (``-`` = stdout, and the human-readable
tables go to stderr instead, so stdout is pure JSON). Values are plain JSON numbers/strings;
NaN and infinities are written as ``null`` (strict JSON has neither).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, TextIO

import polars as pl


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    """``--json PATH`` (``-`` for stdout)."""
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="also write every printed table as JSON rows to PATH ('-' = stdout; the tables "
        "then go to stderr)",
    )


def text_stream(args: argparse.Namespace) -> TextIO:
    """Where the human-readable tables go: stderr when the JSON goes to stdout."""
    return sys.stderr if getattr(args, "json", None) == "-" else sys.stdout


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def write_json(
    args: argparse.Namespace, bench: str, tables: dict[str, pl.DataFrame | list[dict]]
) -> None:
    """Write the JSON document if ``--json`` was given (see the module docstring)."""
    target = getattr(args, "json", None)
    if not target:
        return
    settings = {k: v for k, v in vars(args).items() if k != "json"}
    document = _plain(
        {
            "bench": bench,
            "settings": settings,
            "tables": {
                name: rows.to_dicts() if isinstance(rows, pl.DataFrame) else rows
                for name, rows in tables.items()
            },
        }
    )
    text = json.dumps(document, indent=1, allow_nan=False) + "\n"
    if target == "-":
        sys.stdout.write(text)
    else:
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
