"""The verdict (reports/verdict.py) on small per-query tables, and the default run's output.

The numbers are checked against the significance functions the verdict is built on, computed
here on the same vectors: paired randomisation test (exact for n <= 13), Holm over a reader's
pairs, percentile bootstrap CIs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from erag_dagster.core.errors import InputError
from erag_dagster.reports.run_report import headline_metric
from erag_dagster.reports.verdict import short_name, verdict
from erag_dagster.stats.significance import bootstrap_mean_ci, holm, randomisation_test
from tests.stats_fixture import STATS, stats

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUN_OUT = REPO_ROOT / ".dagster_home" / "test-default-run" / "run.out"


def _table(scores: dict[tuple[str, str], list[float]]) -> pl.DataFrame:
    """``erag_per_query``-shaped frame: (reader, retriever) -> per-query nDCG@3 values."""
    rows = [
        (reader, retriever, f"q{i:02d}", value, value / 2)
        for (reader, retriever), values in scores.items()
        for i, value in enumerate(values)
    ]
    return pl.DataFrame(
        rows, schema=["reader", "retriever", "query_id", "nDCG@3", "P@3"], orient="row"
    )


GOOD = [1.0, 1.0, 0.5, 1.0, 0.75, 1.0, 1.0, 0.5, 1.0, 1.0, 0.75, 1.0]
BAD = [0.0, 0.25, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.25, 0.0, 0.0, 0.0]
NEAR = [1.0, 0.75, 0.5, 1.0, 1.0, 1.0, 0.75, 0.5, 1.0, 1.0, 0.75, 1.0]


def test_a_clear_loser_is_named_with_its_corrected_p_value() -> None:
    table = _table(
        {("r-0123abcd", "bm25-286b153c"): NEAR, ("r-0123abcd", "dense-0b52e784"): BAD,
         ("r-0123abcd", "hybrid-ab459aad"): GOOD}
    )  # fmt: skip
    v = verdict(table, "nDCG@3", STATS)
    assert v.ranking["retriever"].to_list() == [
        "hybrid-ab459aad",
        "bm25-286b153c",
        "dense-0b52e784",
    ]
    assert v.ranking["mean"].to_list() == pytest.approx(
        [np.mean(GOOD), np.mean(NEAR), np.mean(BAD)]
    )
    assert (v.ranking["low"][0], v.ranking["high"][0]) == bootstrap_mean_ci(GOOD, STATS)
    pairs = {(p["higher"], p["lower"]): p for p in v.pairs.iter_rows(named=True)}
    assert list(pairs) == [
        ("hybrid-ab459aad", "bm25-286b153c"),
        ("hybrid-ab459aad", "dense-0b52e784"),
        ("bm25-286b153c", "dense-0b52e784"),
    ]
    raw = [
        randomisation_test(np.subtract(a, b), stats(permutations=10_000))[0]
        for a, b in ((GOOD, NEAR), (GOOD, BAD), (NEAR, BAD))
    ]
    # n = 12: all 4096 sign flips are enumerated, so the p-values are exact (seed-free)
    assert [p["p_perm"] for p in pairs.values()] == pytest.approx(raw)
    assert [p["p_holm"] for p in pairs.values()] == pytest.approx(list(holm(raw)))
    lost = pairs[("hybrid-ab459aad", "dense-0b52e784")]
    assert lost["difference"] == pytest.approx(np.mean(np.subtract(GOOD, BAD)))
    assert lost["low"] > 0 and lost["significant"]
    assert not pairs[("hybrid-ab459aad", "bm25-286b153c")]["significant"]
    sentence = v.sentences["r-0123abcd"]
    assert sentence.startswith("hybrid and bm25 are indistinguishable on 12 questions; ")
    assert "dense is worse than hybrid (p = 0.001) and bm25 (p = " in sentence
    lines = v.lines()
    assert lines[0].startswith("reader r: retrievers ranked by eRAG nDCG@3 (mean over 12")
    assert lines[1].split() == ["1.", "hybrid", f"{np.mean(GOOD):.3f}", *lines[1].split()[3:]]
    assert lines[-1] == f"  => {sentence}"
    assert len(lines) == 1 + 3 + 3 + 1
    assert sum(line.endswith(" *") for line in lines) == 2  # the two significant pairs


def test_identical_retrievers_are_indistinguishable_and_each_reader_has_its_family() -> None:
    table = _table(
        {("a", "x"): GOOD, ("a", "y"): GOOD, ("b", "x"): GOOD, ("b", "y"): BAD,
         ("b", "z"): NEAR}
    )  # fmt: skip
    v = verdict(table, "nDCG@3", STATS, dataset="sample")
    a = v.pairs.filter(pl.col("reader") == "a").row(0, named=True)
    assert (a["difference"], a["low"], a["high"], a["p_perm"], a["p_holm"]) == (0, 0, 0, 1, 1)
    assert v.sentences["a"] == (
        "x and y are indistinguishable on 12 questions (Holm-corrected p, alpha = 0.05)."
    )
    b = v.pairs.filter(pl.col("reader") == "b")
    assert b.height == 3  # reader a's one pair is not in reader b's Holm family
    assert b["p_holm"].to_list() == pytest.approx(list(holm(b["p_perm"].to_numpy())))
    assert v.dataset == "sample" and v.readers == ("a", "b")
    assert "**a**: x and y are indistinguishable" in v.markdown()


def test_the_verdict_is_deterministic_and_follows_the_metric_asked() -> None:
    table = _table({("a", "x"): GOOD, ("a", "y"): NEAR})
    assert verdict(table, "P@3", STATS).text == verdict(table, "P@3", STATS).text
    assert verdict(table, "P@3", STATS).ranking["mean"][0] == pytest.approx(np.mean(GOOD) / 2)
    assert headline_metric(table) == "nDCG@3"  # the first metric column


def test_one_retriever_has_nothing_to_compare() -> None:
    v = verdict(_table({("a", "bm25-286b153c"): GOOD}), "nDCG@3", STATS)
    assert v.pairs.height == 0
    assert v.sentences["a"] == "only one retriever (bm25): nothing to compare."


def test_bad_tables_are_refused_in_one_line() -> None:
    with pytest.raises(InputError, match="non-empty erag_per_query"):
        verdict(_table({}).clear(), "nDCG@3", STATS)
    with pytest.raises(InputError, match="missing column"):
        verdict(_table({("a", "x"): GOOD}), "RR", STATS)
    broken = _table({("a", "x"): [float("nan"), 1.0]})
    with pytest.raises(
        InputError, match="non-finite nDCG@3 for reader 'a', retriever 'x', query 'q00'"
    ):
        verdict(broken, "nDCG@3", STATS)


def test_short_names_drop_only_the_partition_hash() -> None:
    assert short_name("bm25-286b153c") == "bm25"
    assert short_name("my-reader-v2") == "my-reader-v2"


def test_the_default_run_prints_the_verdict_first_in_at_most_60_lines() -> None:
    """``make test`` writes the default job's stdout to run.out before pytest runs."""
    if not DEFAULT_RUN_OUT.is_file():
        pytest.skip(f"{DEFAULT_RUN_OUT} not written (make test runs the default job first)")
    lines = DEFAULT_RUN_OUT.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 60, f"{len(lines)} lines"
    assert lines[0].startswith("== Verdict")
    readers = [i for i, line in enumerate(lines) if line.startswith("reader ")]
    assert len(readers) >= 1
    for start in readers:
        assert "retrievers ranked by eRAG" in lines[start]
        sentence = next(line for line in lines[start:] if line.startswith("  => "))
        assert (
            "indistinguishable" in sentence or "is worse than" in sentence or "only one" in sentence
        )
    first_table = next(i for i, line in enumerate(lines) if line.startswith("== ") and i > 0)
    assert first_table > readers[-1]  # every verdict line comes before the tables
    (said,) = [line for line in lines if line.startswith("Full tables as CSV and parquet: ")]
    folder = Path(said.split(": ", 1)[1].split(" (", 1)[0])
    for name in ("erag_report", "verdict_pairs", "correlation_report"):
        assert (folder / f"{name}.csv").is_file() and (folder / f"{name}.parquet").is_file()
