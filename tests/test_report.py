"""Text and markdown renderers: exact outputs on small frames."""

from __future__ import annotations

import math

import polars as pl
import pytest

from erag_dagster.core.errors import InputError
from erag_dagster.reports.tables import format_cell, format_table, format_table1, to_markdown

NAN = math.nan


def _mixed() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "method": ["erag", "kilt|x", None],
            "n": [10, 2, None],
            "tau": [0.41234, NAN, None],
            "ok": [True, False, None],
        }
    )


def _correlations() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "dataset": ["nq"] * 4,
            "retriever": ["bm25"] * 4,
            "method": ["erag", "erag", "kilt", "const"],
            "metric": ["P@1", "nDCG@10", "P@1", "P@1"],
            "kendall_tau": [0.4123, 0.3, -0.05, NAN],
            "kendall_low": [0.3, 0.2049, -0.2, NAN],
            "kendall_high": [0.52, NAN, 0.1, NAN],
        }
    )


def test_format_cell_policy() -> None:
    assert format_cell(None) == "–"
    assert format_cell(NAN) == "nan"
    assert format_cell(-math.inf) == "-inf"
    assert format_cell(0.5, ".2f") == "0.50"
    assert format_cell(True) == "true"
    assert format_cell(7) == "7"
    assert format_cell("two\nlines") == "two lines"


def test_format_table_exact() -> None:
    assert format_table(_mixed()) == (
        "method   n     tau  ok\n"
        "------  --  ------  -----\n"
        "erag    10  0.4123  true\n"
        "kilt|x   2     nan  false\n"
        "–        –       –  –"
    )


def test_format_table_edge_frames() -> None:
    assert format_table(pl.DataFrame()) == ""
    assert format_table(_mixed().clear()) == "method  n  tau  ok\n------  -  ---  --"
    assert format_table(pl.DataFrame({"x": [1.0]}), floatfmt=".1e") == "      x\n-------\n1.0e+00"


def test_to_markdown_exact() -> None:
    assert to_markdown(_mixed(), floatfmt=".2f") == (
        "| method  |   n |  tau | ok    |\n"
        "| :------ | --: | ---: | :---- |\n"
        "| erag    |  10 | 0.41 | true  |\n"
        "| kilt\\|x |   2 |  nan | false |\n"
        "| –       |   – |    – | –     |"
    )


def test_format_table1_text_exact() -> None:
    assert format_table1(_correlations()) == (
        "dataset  retriever  method                   P@1             nDCG@10\n"
        "-------  ---------  ------  --------------------  ------------------\n"
        "nq       bm25       erag     *0.412 [0.30, 0.52]  *0.300 [0.20, nan]\n"
        "nq       bm25       kilt    -0.050 [-0.20, 0.10]                   –\n"
        "nq       bm25       const                    nan                   –\n"
        "\n"
        "* best in its column within the dataset and retriever.\n"
        "[low, high]: percentile bootstrap CI over queries.\n"
        "nan: correlation undefined (scores constant over the queries, or n < 2)."
    )


def test_format_table1_markdown_exact() -> None:
    frame = _correlations().filter(pl.col("method") != "const")
    assert format_table1(frame, markdown=True, digits=2, ci_digits=1) == (
        "| dataset | retriever | method |               P@1 |           nDCG@10 |\n"
        "| :------ | :-------- | :----- | ----------------: | ----------------: |\n"
        "| nq      | bm25      | erag   | \\*0.41 [0.3, 0.5] | \\*0.30 [0.2, nan] |\n"
        "| nq      | bm25      | kilt   | -0.05 [-0.2, 0.1] |                 – |\n"
        "\n"
        "\\* best in its column within the dataset and retriever.\n"
        "\n"
        "[low, high]: percentile bootstrap CI over queries."
    )


def test_format_table1_spearman_and_unknown_statistic() -> None:
    frame = pl.DataFrame(
        {
            "dataset": ["nq", "nq"],
            "retriever": ["bm25", "bm25"],
            "method": ["erag", "kilt"],
            "metric": ["P@1", "P@1"],
            "spearman_rho": [0.5, 0.6],
            "spearman_low": [0.4, 0.5],
            "spearman_high": [0.6, 0.7],
        }
    )
    lines = format_table1(frame, statistic="spearman_rho").splitlines()
    assert lines[2] == "nq       bm25       erag     0.500 [0.40, 0.60]"
    assert lines[3] == "nq       bm25       kilt    *0.600 [0.50, 0.70]"
    with pytest.raises(InputError, match="unknown statistic 'pearson'"):
        format_table1(frame, statistic="pearson")


def test_format_table1_shows_undefined_resamples_and_unreported_cis() -> None:
    frame = _correlations().with_columns(
        kendall_high=pl.Series([0.52, NAN, 0.1, NAN]),
        kendall_low=pl.Series([0.3, NAN, -0.2, NAN]),
        kendall_undefined=pl.Series([0.0, 0.366, 0.018, 1.0]),
        kendall_ci_note=pl.Series(
            [None, "no CI: 36.6% of resamples undefined", None, "correlation undefined"]
        ),
    )
    lines = format_table1(frame).splitlines()
    assert lines[2:5] == [
        "nq       bm25       erag                   *0.412 [0.30, 0.52]"
        "  *0.300 [no CI: 36.6% of resamples undefined]",
        "nq       bm25       kilt    -0.050 [-0.20, 0.10] (1.8% undef.)"
        "                                             –",
        "nq       bm25       const                                  nan"
        "                                             –",
    ]
    assert lines[-1] == (
        "undef.: share of bootstrap resamples with a constant side (correlation undefined); the"
        " CI counts them at -1 (low) and +1 (high), and is not reported when they reach"
        " (1 - confidence)/2 of the resamples or when it would exclude the estimate."
    )
