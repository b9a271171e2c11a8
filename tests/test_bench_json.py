"""``--json`` output of the benches (bench/benchjson.py): the rows printed, strict JSON."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from benchjson import add_json_argument, text_stream, write_json


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--data", type=Path, default=Path("x"))
    add_json_argument(parser)
    return parser.parse_args(list(argv))


def test_rows_and_settings_go_to_the_file_nan_as_null(tmp_path: Path) -> None:
    table = pl.DataFrame({"stage": ["a", "b"], "ratio": [0.5, math.nan]})
    target = tmp_path / "out" / "bench.json"
    args = _args("--json", str(target), "--k", "5")
    assert text_stream(args) is sys.stdout
    write_json(args, "demo", {"rows": table, "cost": [{"cost": "load", "value": math.inf}]})
    document = json.loads(target.read_text(encoding="utf-8"))
    assert document == {
        "bench": "demo",
        "settings": {"k": 5, "data": "x"},
        "tables": {
            "rows": [{"stage": "a", "ratio": 0.5}, {"stage": "b", "ratio": None}],
            "cost": [{"cost": "load", "value": None}],
        },
    }


def test_dash_writes_pure_json_to_stdout_and_tables_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = _args("--json", "-")
    print("table", file=text_stream(args))
    write_json(args, "demo", {"rows": pl.DataFrame({"x": [1]})})
    out, err = capsys.readouterr()
    assert json.loads(out)["tables"] == {"rows": [{"x": 1}]}
    assert err == "table\n"


def test_without_json_nothing_is_written(capsys: pytest.CaptureFixture[str]) -> None:
    write_json(_args(), "demo", {"rows": pl.DataFrame({"x": [1]})})
    assert capsys.readouterr().out == ""
