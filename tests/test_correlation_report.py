"""Table 1 / Figure 1 builders: correlation over queries, pivots, best marks, the k plot."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from erag_dagster.core.errors import InputError
from erag_dagster.meta.correlation import (
    CORRELATION_SCHEMA,
    PER_QUERY_COLUMNS,
    best_per_column,
    correlation_table,
    correlation_vs_k,
    table1,
)
from erag_dagster.meta.plots import plot_correlation_vs_k
from erag_dagster.stats.correlation import (
    bootstrap_distribution,
    kendall_tau_b,
    percentile_interval,
)
from tests.stats_fixture import STATS, stats

N = 30
QUERIES = [f"q{i:02d}" for i in range(N)]


def _inputs(seed: int = 0, shift: float = 0.0) -> tuple[pl.DataFrame, pl.DataFrame, np.ndarray]:
    """eRAG tracks end-to-end closely, provenance loosely, a constant method not at all.

    End-to-end scores exist for q02..q29 plus one extra query ``zz``: q00, q01 are unmatched
    on the per-query side, zz on the end-to-end side.
    """
    rng = np.random.default_rng(seed)
    e2e = np.round(rng.random(N), 1)  # ties, like EM/F1 averages
    rows = []
    for method, noise in (("erag", 0.1), ("provenance", 0.6), ("constant", None)):
        for metric in ("P@1", "nDCG@10"):
            for i, qid in enumerate(QUERIES):
                value = 0.5 if noise is None else e2e[i] + shift + rng.normal(0, noise)
                rows.append(("nq", "bm25", method, metric, qid, float(value)))
    per_query = pl.DataFrame(rows, schema=list(PER_QUERY_COLUMNS), orient="row")
    end_to_end = pl.DataFrame(
        {
            "dataset": "nq",
            "retriever": "bm25",
            "query_id": [*QUERIES[2:], "zz"],
            "value": [*e2e[2:].tolist(), 1.0],
        }
    )
    return per_query, end_to_end, e2e


def test_correlation_table_matches_scipy_on_inner_join() -> None:
    per_query, end_to_end, e2e = _inputs()
    table = correlation_table(per_query, end_to_end, stats(resamples=200))
    assert dict(table.schema) == CORRELATION_SCHEMA
    assert table.select("method", "metric").rows() == [
        ("erag", "P@1"),
        ("erag", "nDCG@10"),
        ("provenance", "P@1"),
        ("provenance", "nDCG@10"),
        ("constant", "P@1"),
        ("constant", "nDCG@10"),
    ]
    assert table["n_queries"].to_list() == [28] * 6
    assert table["n_unmatched"].to_list() == [3] * 6  # q00, q01 and zz
    for row in table.filter(pl.col("method") != "constant").iter_rows(named=True):
        x = (
            per_query.filter(
                (pl.col("method") == row["method"]) & (pl.col("metric") == row["metric"])
            )
            .sort("query_id")["value"]
            .to_numpy()[2:]
        )
        y = e2e[2:]
        assert row["kendall_tau"] == pytest.approx(
            sps.kendalltau(x, y, variant="b").statistic, abs=1e-12
        )
        assert row["spearman_rho"] == pytest.approx(sps.spearmanr(x, y).statistic, abs=1e-12)
        assert row["kendall_low"] < row["kendall_tau"] < row["kendall_high"]
        assert row["spearman_low"] < row["spearman_rho"] < row["spearman_high"]
    erag = table.filter(pl.col("method") == "erag")["kendall_tau"].to_list()
    prov = table.filter(pl.col("method") == "provenance")["kendall_tau"].to_list()
    assert min(erag) > 0.6 and max(prov) < min(erag)


def test_constant_method_is_nan_not_an_error() -> None:
    per_query, end_to_end, _ = _inputs()
    row = correlation_table(per_query, end_to_end, stats(resamples=50)).row(4, named=True)
    assert row["method"] == "constant"
    for column in ("kendall_tau", "kendall_low", "kendall_high", "spearman_rho"):
        assert math.isnan(row[column])
    assert row["n_queries"] == 28
    assert (row["kendall_undefined"], row["spearman_undefined"]) == (1.0, 1.0)
    assert row["kendall_ci_note"] == "correlation undefined (constant scores, or n < 2)"


def test_sparse_labels_report_the_undefined_share_and_no_biased_ci() -> None:
    """One exact-match label among the queries (the default run's eRAG dense P@3): over a
    third of the resamples miss it. The CI of the rest excluded 0 ([-0.14, -0.03] there); now
    it is not reported, and the table says why and how many resamples were undefined."""
    per_query, end_to_end, _ = _inputs()
    end_to_end = end_to_end.with_columns(
        value=pl.col("query_id").is_in(["q03", "q07", "q11"]).cast(pl.Float64)
    )
    sparse = per_query.filter(pl.col("method") == "erag", pl.col("metric") == "P@1")
    sparse = sparse.with_columns(value=(pl.col("query_id") == "q05").cast(pl.Float64) / 3)
    row = correlation_table(sparse, end_to_end, stats(resamples=1000)).row(0, named=True)
    # n = 28 matched, m = 3 ones: tau_b = -m / sqrt((n - 1) * m * (n - m)).
    assert row["kendall_tau"] == pytest.approx(-math.sqrt(3 / (27 * 25)))
    assert 0.3 < row["kendall_undefined"] < 0.45
    assert math.isnan(row["kendall_low"]) and math.isnan(row["kendall_high"])
    share = row["kendall_undefined"]
    assert row["kendall_ci_note"] == f"no CI: {share:.1%} of resamples undefined"
    # What dropping the undefined resamples gave: an interval entirely below 0.
    x = sparse.sort("query_id")["value"].to_numpy()[2:]
    y = end_to_end.sort("query_id")["value"].to_numpy()[:28]
    draws = bootstrap_distribution(x, y, kendall_tau_b, stats(resamples=1000, seed=0))
    assert percentile_interval(draws[~np.isnan(draws)], 0.95)[1] < 0
    dense = correlation_table(per_query, _inputs()[1], stats(resamples=200))
    assert dense["kendall_undefined"].to_list()[:4] == [0.0] * 4
    assert dense["kendall_ci_note"].to_list()[:4] == [None] * 4


def test_correlation_table_ignores_row_order() -> None:
    per_query, end_to_end, _ = _inputs(seed=3)
    ordered = correlation_table(per_query, end_to_end, stats(resamples=100))
    shuffled = correlation_table(
        per_query.sample(fraction=1.0, shuffle=True, seed=1),
        end_to_end.sample(fraction=1.0, shuffle=True, seed=2),
        stats(resamples=100),
    )
    assert shuffled.sort("method", "metric").equals(ordered.sort("method", "metric"))


def test_group_without_matched_queries_is_reported_with_n_zero() -> None:
    per_query = pl.DataFrame(
        [("wow", "dense", "erag", "P@1", "x1", 1.0)], schema=list(PER_QUERY_COLUMNS), orient="row"
    )
    _, end_to_end, _ = _inputs()
    row = correlation_table(per_query, end_to_end, stats(resamples=20)).row(0, named=True)
    assert (row["n_queries"], row["n_unmatched"]) == (0, 1)
    assert math.isnan(row["kendall_tau"]) and math.isnan(row["spearman_high"])


def test_correlation_table_input_errors() -> None:
    per_query, end_to_end, _ = _inputs()
    with pytest.raises(InputError, match="per_query: missing column"):
        correlation_table(per_query.drop("metric"), end_to_end, STATS)
    with pytest.raises(InputError, match=r"end_to_end: more than one value for .*query_id='q05'"):
        correlation_table(per_query, pl.concat([end_to_end, end_to_end.slice(3, 1)]), STATS)
    bad = per_query.with_columns(
        value=pl.when(pl.col("query_id") == "q07").then(float("nan")).otherwise("value")
    )
    with pytest.raises(InputError, match=r"non-finite value nan at .*query_id='q07'"):
        correlation_table(bad, end_to_end, STATS)


def _frame(rows: list[tuple]) -> pl.DataFrame:
    """A correlation frame (retriever bm25) from ``(method, metric, kendall_tau)`` rows on nq,
    or ``(dataset, method, metric, kendall_tau)`` rows."""
    full = [r if len(r) == 4 else ("nq", *r) for r in rows]
    return pl.DataFrame(
        [(d, "bm25", m, k, v) for d, m, k, v in full],
        schema={
            "dataset": pl.String,
            "retriever": pl.String,
            "method": pl.String,
            "metric": pl.String,
            "kendall_tau": pl.Float64,
        },
        orient="row",
    )


def test_table1_pivots_methods_by_metrics() -> None:
    frame = _frame(
        [
            ("erag", "P@1", 0.5),
            ("erag", "nDCG@10", 0.4),
            ("kilt", "P@1", 0.2),
            ("tqa", "erag", "P@1", 0.7),
        ]
    )
    wide = table1(frame)
    assert wide.columns == ["dataset", "retriever", "method", "P@1", "nDCG@10"]
    assert wide.rows() == [
        ("nq", "bm25", "erag", 0.5, 0.4),
        ("nq", "bm25", "kilt", 0.2, None),
        ("tqa", "bm25", "erag", 0.7, None),
    ]
    with pytest.raises(InputError, match="missing column"):
        table1(frame, "spearman_rho")
    with pytest.raises(InputError, match="more than one row"):
        table1(frame.vstack(frame.head(1)))


def test_best_per_column_marks_group_maximum_ties_and_skips_nan() -> None:
    frame = _frame(
        [
            ("erag", "P@1", 0.5),
            ("erag", "nDCG@10", float("nan")),
            ("kilt", "P@1", 0.5),
            ("kilt", "nDCG@10", 0.1),
            ("bleu", "P@1", 0.3),
            ("bleu", "nDCG@10", -0.2),
            ("tqa", "bleu", "P@1", 0.1),
        ]
    )
    best = best_per_column(table1(frame))
    assert best.rows() == [
        ("nq", "bm25", "erag", True, False),
        ("nq", "bm25", "kilt", True, True),
        ("nq", "bm25", "bleu", False, False),
        ("tqa", "bm25", "bleu", True, False),  # its own group; null nDCG@10 is never best
    ]


def test_the_closed_book_row_is_a_reference_never_marked_best() -> None:
    frame = _frame([("erag", "P@1", 0.4), ("closed_book", "P@1", 0.9), ("kilt", "P@1", 0.2)])
    best = best_per_column(table1(frame))
    assert best.rows() == [
        ("nq", "bm25", "erag", True),
        ("nq", "bm25", "closed_book", False),  # higher, but not a labelling of documents
        ("nq", "bm25", "kilt", False),
    ]


def test_correlation_vs_k_rows_and_values() -> None:
    per_k = {10: _inputs(seed=1, shift=0.0)[:2], 1: _inputs(seed=2)[:2]}
    frame = correlation_vs_k(per_k, stats(resamples=100))
    assert frame.columns == [
        "k", "dataset", "retriever", "method", "metric", "kendall_tau", "low", "high",
        "undefined", "ci_note", "n_queries",
    ]  # fmt: skip
    assert frame["k"].to_list() == [1] * 6 + [10] * 6
    direct = correlation_table(*per_k[10], stats(resamples=100))
    at_10 = frame.filter(pl.col("k") == 10)
    assert at_10["kendall_tau"].to_list()[:4] == direct["kendall_tau"].to_list()[:4]
    assert at_10["low"].to_list()[:4] == direct["kendall_low"].to_list()[:4]
    spearman = correlation_vs_k(per_k, stats(resamples=50), statistic="spearman_rho")
    assert "spearman_rho" in spearman.columns
    with pytest.raises(InputError, match="unknown statistic"):
        correlation_vs_k(per_k, STATS, statistic="pearson")
    with pytest.raises(InputError, match="positive integer"):
        correlation_vs_k({0: per_k[1]}, STATS)


def test_plot_correlation_vs_k_writes_png_atomically(tmp_path: Path) -> None:
    per_k = {k: _inputs(seed=k)[:2] for k in (1, 3, 5)}
    frame = correlation_vs_k(per_k, stats(resamples=50))
    target = tmp_path / "figs" / "figure1.png"
    assert plot_correlation_vs_k(frame, target, title="NQ") == target
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 1000
    assert [p.name for p in target.parent.iterdir()] == ["figure1.png"]  # no temp file left
    svg = plot_correlation_vs_k(frame, tmp_path / "figure1.svg")
    assert b"<svg" in svg.read_bytes()[:1000]


def test_plot_rejects_bad_frames(tmp_path: Path) -> None:
    frame = correlation_vs_k({1: _inputs()[:2]}, stats(resamples=20))
    with pytest.raises(InputError, match="missing column"):
        plot_correlation_vs_k(frame.drop("kendall_tau"), tmp_path / "x.png")
    with pytest.raises(InputError, match="empty"):
        plot_correlation_vs_k(frame.clear(), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def _labels(rows: list[tuple[str, int, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["query_id", "rank", "label"], orient="row").with_columns(
        doc_id=pl.format("d-{}-{}", "query_id", "rank")
    )


def test_per_system_tables_from_label_frames(tmp_path: Path) -> None:
    from erag_dagster.meta.correlation_report import correlation_report
    from erag_dagster.meta.per_query import correlation_inputs, erag_per_query, erag_summary

    # query a: relevant at rank 2 only; query b: relevant at rank 1 (graded 0.5 at rank 2)
    doc = {
        ("r1", "bm25"): _labels([("a", 1, 0.0), ("a", 2, 1.0), ("b", 1, 1.0), ("b", 2, 0.5)]),
        ("r1", "dense"): _labels([("a", 1, 1.0), ("a", 2, 0.0), ("b", 1, 0.0), ("b", 2, 0.0)]),
    }
    wide = erag_per_query(doc, ["P@1", "RR"], ["a", "b"])
    assert wide.columns == ["reader", "retriever", "query_id", "P@1", "RR"]
    assert wide.rows() == [
        ("r1", "bm25", "a", 0.0, 0.5), ("r1", "bm25", "b", 1.0, 1.0),
        ("r1", "dense", "a", 1.0, 1.0), ("r1", "dense", "b", 0.0, 0.0),
    ]  # fmt: skip
    summary = erag_summary(wide, ["P@1", "RR", "nDCG@5"])  # absent metrics are left out
    assert summary.rows() == [("r1", "bm25", 2, 0.5, 0.75), ("r1", "dense", 2, 0.5, 0.5)]

    baselines = {("r1", "bm25"): doc[("r1", "bm25")].with_columns(method=pl.lit("containment"))}
    e2e = {
        system: pl.DataFrame({"query_id": ["a", "b", "a", "b"], "k": [1, 1, 2, 2],
                              "score": [0.0, 1.0, 1.0, 1.0]})
        for system in doc
    }  # fmt: skip
    per_query, end_to_end = correlation_inputs(doc, baselines, e2e, ["P@1"], "nq", k=1)
    assert per_query.columns == list(PER_QUERY_COLUMNS)
    assert per_query.select("retriever", "method", "query_id", "value").rows() == [
        ("bm25 / r1", "eRAG", "a", 0.0), ("bm25 / r1", "eRAG", "b", 1.0),
        ("bm25 / r1", "containment", "a", 0.0), ("bm25 / r1", "containment", "b", 1.0),
        ("dense / r1", "eRAG", "a", 1.0), ("dense / r1", "eRAG", "b", 0.0),
    ]  # fmt: skip
    assert end_to_end.rows() == [
        ("nq", "bm25 / r1", "a", 0.0), ("nq", "bm25 / r1", "b", 1.0),
        ("nq", "dense / r1", "a", 0.0), ("nq", "dense / r1", "b", 1.0),
    ]  # fmt: skip

    report = correlation_report(
        doc,
        baselines,
        e2e,
        dataset="nq",
        metrics=["P@1"],
        label_k=1,
        e2e_ks=[1, 2],
        folder=tmp_path / "reports",
        stats=stats(resamples=50),
    )
    assert report.table.equals(correlation_table(per_query, end_to_end, stats(resamples=50)))
    assert report.by_k["k"].unique().sort().to_list() == [1, 2]
    assert set(report.by_k["metric"]) == {"P@1", "Success@1", "nDCG@1", "P@2", "Success@2",
                                          "nDCG@2"}  # fmt: skip
    assert report.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stored = pl.read_parquet(tmp_path / "reports" / "correlation_table.parquet")
    assert stored.equals(report.table)
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [
        "correlation_table.parquet", "correlation_vs_k.parquet", "correlation_vs_k.png"
    ]  # fmt: skip


def _pair_labels(rows: list[tuple[str, str, int, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "rank", "label"], orient="row")


def test_reader_transfer_rows_pair_one_readers_labels_with_anothers_end_to_end() -> None:
    """Two readers, one retriever: system ``bm25 / B`` gets its own eRAG rows (B's labels) and
    ``eRAG (labels of A)`` rows (A's labels), both matched with B's end-to-end scores."""
    from erag_dagster.meta.per_query import correlation_inputs, transfer_method

    labels_a = _pair_labels([("q1", "d1", 1, 1.0), ("q1", "d2", 2, 0.0), ("q2", "d3", 1, 0.0)])
    labels_b = _pair_labels([("q1", "d1", 1, 0.0), ("q1", "d2", 2, 1.0), ("q2", "d3", 1, 1.0)])
    e2e = pl.DataFrame({"query_id": ["q1", "q2"], "k": [2, 2], "score": [0.0, 1.0]})
    per_query, end_to_end = correlation_inputs(
        {("A", "bm25"): labels_a, ("B", "bm25"): labels_b},
        {},
        {("B", "bm25"): e2e},
        ["P@1"],
        "sample",
        2,
    )
    on_b = per_query.filter(pl.col("retriever") == "bm25 / B").sort("method", "query_id")
    assert transfer_method("A") == "eRAG (labels of A)"
    # P@1 of each query's top document: B judged (0, 1), A judged (1, 0)
    assert on_b.select("method", "query_id", "value").rows() == [
        ("eRAG", "q1", 0.0),
        ("eRAG", "q2", 1.0),
        ("eRAG (labels of A)", "q1", 1.0),
        ("eRAG (labels of A)", "q2", 0.0),
    ]
    on_a = per_query.filter(pl.col("retriever") == "bm25 / A")
    assert set(on_a["method"]) == {"eRAG", "eRAG (labels of B)"}
    assert end_to_end["retriever"].unique().to_list() == ["bm25 / B"]  # only B answered e2e
    table = correlation_table(per_query, end_to_end, stats(resamples=50))
    taus = dict(
        table.filter(pl.col("retriever") == "bm25 / B").select("method", "kendall_tau").rows()
    )
    assert taus["eRAG"] == pytest.approx(1.0) and taus["eRAG (labels of A)"] == pytest.approx(-1.0)


def test_one_reader_has_no_transfer_rows() -> None:
    from erag_dagster.meta.per_query import correlation_inputs

    labels = _pair_labels([("q1", "d1", 1, 1.0)])
    per_query, _ = correlation_inputs({("A", "bm25"): labels}, {}, {}, ["P@1"], "sample", 1)
    assert per_query["method"].unique().to_list() == ["eRAG"]
