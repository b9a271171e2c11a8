"""Cross-dataset reports on real data: BM25 runs on the embedded sample, the DL19 subset and
SciFact; eRAG labels stored by scripts/measure_label_methods.py (SmolLM2 on two SQuAD slices).

What is checked: every per-dataset cell is the single-dataset report's own number (exactly);
the mean over datasets is the mean of the cells; Holm's adjustment (hand-computed, and its
properties on the real table); the README's SciFact and DL19 figures come out of the BEIR
leaderboard.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from erag_dagster.config.registry import default_registry_path, load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.retrievers import run_retriever
from erag_dagster.meta.correlation_report import label_methods_table
from erag_dagster.meta.per_query import erag_per_query, erag_summary
from erag_dagster.reports.cross_leaderboard import (
    MEAN_OVER_DATASETS,
    DatasetRuns,
    beir_leaderboard,
    erag_leaderboard,
    format_cross_leaderboard,
)
from erag_dagster.reports.cross_table1 import format_table1_across, table1_across
from erag_dagster.reports.leaderboard import evaluate_runs, leaderboard, metric_scores
from erag_dagster.stats.significance import (
    bootstrap_mean_ci,
    holm,
    randomisation_test,
    stratified_bootstrap_mean_ci,
    stratified_randomisation_test,
)
from tests.reproductions import REPO_ROOT, load_reproductions
from tests.stats_fixture import STATS, stats

METRICS = ["nDCG@10", "R@100", "RR"]
LABELS = REPO_ROOT / "reproductions" / "data" / "label_methods"

# --- Holm ----------------------------------------------------------------------------------------


def test_holm_hand_computed() -> None:
    # m = 4 (the nan is not counted). Sorted: 0.005, 0.01, 0.03, 0.04; scaled by 4, 3, 2, 1:
    # 0.02, 0.03, 0.06, 0.04; running maximum: 0.02, 0.03, 0.06, 0.06.
    adjusted = holm([0.01, 0.04, 0.03, 0.005, math.nan])
    np.testing.assert_allclose(adjusted[:4], [0.03, 0.06, 0.06, 0.02], rtol=0, atol=1e-15)
    assert math.isnan(adjusted[4])
    # capped at 1; ties keep equal adjusted values
    np.testing.assert_array_equal(holm([0.5, 0.6]), [1.0, 1.0])
    np.testing.assert_allclose(holm([0.02, 0.02, 0.2]), [0.06, 0.06, 0.2])
    assert holm([]).size == 0
    assert np.isnan(holm([math.nan])).all()
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        holm([0.1, 1.5])


def test_holm_between_raw_and_bonferroni() -> None:
    p = np.random.default_rng(3).uniform(0, 0.2, size=40)
    adjusted = holm(p)
    assert (adjusted >= p).all()
    assert (adjusted <= np.minimum(1.0, p * p.size)).all()
    order = np.argsort(p)
    assert (np.diff(adjusted[order]) >= 0).all()  # same order as the raw p-values


def test_stratified_tests_reduce_to_the_plain_ones() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.1, 1, 12), rng.normal(0, 1, 12)
    # equal group sizes: the weights are one constant, so the exact test is the plain one
    p_strat, exact = stratified_randomisation_test([a[:6], a[6:]], stats(permutations=5000))
    p_plain, _ = randomisation_test(a, stats(permutations=5000))
    assert exact and p_strat == p_plain
    low, high = stratified_bootstrap_mean_ci([a, b], stats(resamples=500))
    assert low < (a.mean() + b.mean()) / 2 < high
    one = stratified_bootstrap_mean_ci([a], stats(resamples=2000))
    plain = bootstrap_mean_ci(a, stats(resamples=2000))
    assert abs(one[0] - plain[0]) < 0.15 and abs(one[1] - plain[1]) < 0.15
    with pytest.raises(InputError):
        stratified_bootstrap_mean_ci([a, []], STATS)


# --- BEIR leaderboard ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory):
    """The packaged BM25 and a second real BM25: Robertson's classic k1 = 1.2, b = 0.75."""
    raw = yaml.safe_load(Path(default_registry_path()).read_text(encoding="utf-8"))
    raw["retrievers"] = {
        "bm25": raw["retrievers"]["bm25"],
        "bm25-robertson": {"kind": "bm25", "k1": 1.2, "b": 0.75},
    }
    path = tmp_path_factory.mktemp("registry") / "registry.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return load_registry(path)


def bm25_runs(registry, spec: str, k: int, storage: Path) -> tuple[object, dict]:
    ds = load_dataset(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ERAG_STORAGE", str(storage))
        runs = {
            name: run_retriever(registry, name, ds.corpus, ds.queries, k, threads=1)
            for name in ("bm25", "bm25-robertson")
        }
    return ds, runs


@pytest.fixture(scope="module")
def two_datasets(registry, shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    storage = tmp_path_factory.mktemp("storage")
    sample = bm25_runs(registry, "sample", 100, storage)
    dl19 = bm25_runs(registry, f"beir:{shared_data / 'beir-msmarco-dl19-subset'}", 100, storage)
    return {
        "sample": DatasetRuns(sample[0].qrels, sample[1], 1),
        "dl19": DatasetRuns(dl19[0].qrels, dl19[1], relevance_level=2),
    }


def cell(board: pl.DataFrame, dataset: str, retriever: str, metric: str, **more) -> dict:
    where = (
        (pl.col("dataset") == dataset)
        & (pl.col("retriever") == retriever)
        & (pl.col("metric") == metric)
    )
    for column, value in more.items():
        where &= pl.col(column) == value
    rows = board.filter(where)
    assert rows.height == 1, (dataset, retriever, metric, rows)
    return rows.row(0, named=True)


def test_beir_cells_are_the_single_dataset_leaderboard(two_datasets) -> None:
    board = beir_leaderboard(two_datasets, METRICS, stats(resamples=300))
    assert board["dataset"].unique(maintain_order=True).to_list() == [
        "sample", "dl19", MEAN_OVER_DATASETS
    ]  # fmt: skip
    for name, ds in two_datasets.items():
        single = leaderboard(
            ds.qrels, ds.runs, METRICS, stats(resamples=300), relevance_level=ds.relevance_level
        )
        for row in single.iter_rows(named=True):
            for m in METRICS:
                got = cell(board, name, row["retriever"], m)
                assert (got["queries"], got["dropped"]) == (row["queries"], row["dropped"])
                for ours, theirs in [("mean", m), ("low", f"{m}_low"), ("high", f"{m}_high"),
                                     ("diff", f"{m}_diff"), ("p_perm", f"{m}_p_perm"),
                                     ("p_t", f"{m}_p_t")]:  # fmt: skip
                    assert got[ours] == row[theirs], (name, row["retriever"], m, ours)
    # the two BM25s really differ somewhere (otherwise the test checks little)
    assert cell(board, "dl19", "bm25-robertson", "nDCG@10")["diff"] != 0.0


def test_beir_mean_over_datasets(two_datasets) -> None:
    board = beir_leaderboard(two_datasets, METRICS, stats(resamples=300))
    reports = {
        name: evaluate_runs(ds.qrels, ds.runs, METRICS, relevance_level=ds.relevance_level)
        for name, ds in two_datasets.items()
    }
    for retriever in ("bm25", "bm25-robertson"):
        for m in METRICS:
            mean = cell(board, MEAN_OVER_DATASETS, retriever, m)
            cells = [cell(board, d, retriever, m)["mean"] for d in two_datasets]
            assert mean["mean"] == pytest.approx(sum(cells) / 2, abs=1e-15)
            assert mean["datasets"] == 2
            assert mean["queries"] == 120 + 43
            assert mean["low"] <= mean["mean"] <= mean["high"]
            if retriever == "bm25":
                assert (mean["diff"], mean["p_perm"], mean["p_holm"]) == (0.0, 1.0, None)
                continue
            # diff = mean over datasets of the per-dataset paired differences
            diffs = [
                np.mean(list(metric_scores(reports[d][retriever], m).values()))
                - np.mean(list(metric_scores(reports[d]["bm25"], m).values()))
                for d in two_datasets
            ]
            assert mean["diff"] == pytest.approx(np.mean(diffs), abs=1e-12)
            assert 0.0 < mean["p_perm"] <= 1.0 and mean["p_t"] is None


def test_beir_holm_family(two_datasets) -> None:
    board = beir_leaderboard(two_datasets, METRICS, stats(resamples=200))
    tested = board.filter(~pl.col("baseline"))
    # one retriever against the baseline on 2 datasets + the mean, 3 metrics
    assert tested.height == 9 and (board["family"] == 9).all()
    p, adjusted = tested["p_perm"].to_numpy(), tested["p_holm"].to_numpy()
    assert (adjusted >= p).all()
    assert (adjusted <= np.minimum(1, 9 * p)).all()
    np.testing.assert_array_equal(adjusted, holm(p))
    order = np.argsort(p, kind="stable")
    assert (np.diff(adjusted[order]) >= 0).all()
    assert board.filter(pl.col("baseline"))["p_holm"].is_null().all()
    text = format_cross_leaderboard(board, STATS)
    assert "Holm-adjusted over 9 comparisons" in text
    assert "paired randomisation test" in text
    assert "bm25 (baseline)" in text
    assert "not run on that dataset" not in text  # no missing cell, no such note
    row = cell(board, "sample", "bm25", "nDCG@10")
    assert f"{row['mean']:.3f} [{row['low']:.2f}, {row['high']:.2f}]" in text


def test_beir_missing_retriever_and_baseline(two_datasets) -> None:
    sample, dl19 = two_datasets["sample"], two_datasets["dl19"]
    only_base = DatasetRuns(dl19.qrels, {"bm25": dl19.runs["bm25"]}, 2)
    board = beir_leaderboard(
        {"sample": sample, "dl19": only_base}, ["nDCG@10"], stats(resamples=100)
    )
    assert board.filter((pl.col("dataset") == "dl19") & (pl.col("retriever") == "bm25-robertson")
                        ).height == 0  # fmt: skip
    mean = cell(board, MEAN_OVER_DATASETS, "bm25-robertson", "nDCG@10")
    assert mean["datasets"] == 1 and mean["mean"] is None and mean["p_holm"] is None
    assert board["family"][0] == 1  # only the sample cell is a comparison
    text = format_cross_leaderboard(board, STATS, markdown=False)
    assert "–" in text
    # a dataset without the baseline: its cells are there, its comparisons are not
    no_base = DatasetRuns(dl19.qrels, {"bm25-robertson": dl19.runs["bm25-robertson"]}, 2)
    board = beir_leaderboard({"sample": sample, "dl19": no_base}, ["nDCG@10"], stats(resamples=100))
    row = cell(board, "dl19", "bm25-robertson", "nDCG@10")
    assert row["mean"] is not None and row["p_perm"] is None and row["diff"] is None
    assert cell(board, MEAN_OVER_DATASETS, "bm25-robertson", "nDCG@10")["diff"] is None
    with pytest.raises(InputError, match="baseline 'dense'"):
        beir_leaderboard({"sample": sample}, ["nDCG@10"], stats(resamples=10), baseline="dense")
    with pytest.raises(InputError, match="at least one dataset"):
        beir_leaderboard({}, ["nDCG@10"], stats(resamples=10))


@pytest.mark.slow
def test_readme_figures_reproduce_through_the_beir_leaderboard(
    registry, shared_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """SciFact (Anserini's BEIR regression) and the DL19 subset figures of
    reproductions/*.yaml, read off the cross-dataset leaderboard of both (~25 s: SciFact's
    index and 2 x 300 queries)."""
    entries = [
        e
        for e in load_reproductions()
        if e.file in ("scifact.yaml", "dl19.yaml")
        and e.condition["kind"] == "retrieval"
        and e.condition["retriever"] == "bm25"
    ]
    assert {e.file for e in entries} == {"scifact.yaml", "dl19.yaml"}
    storage = tmp_path_factory.mktemp("storage")
    per_dataset = {}
    for file in ("scifact.yaml", "dl19.yaml"):
        entry = next(e for e in entries if e.file == file)
        spec = entry.dataset.replace("{shared}", str(shared_data))
        ds, runs = bm25_runs(registry, spec, int(entry.condition["k"]), storage)
        per_dataset[file] = DatasetRuns(ds.qrels, runs, int(entry.condition["relevance_level"]))
    metrics = sorted({e.metric for e in entries})
    board = beir_leaderboard(per_dataset, metrics, stats(resamples=200))
    for entry in entries:
        value = cell(board, entry.file, "bm25", entry.metric)["mean"]
        assert entry.passes(value), (entry.id, value, entry.expected)
    # one comparison (the Robertson BM25) per metric on each dataset and on the mean
    assert (board["family"] == 3 * len(metrics)).all()


# --- eRAG leaderboard and Table 1 from stored SmolLM2 labels -------------------------------------


def stored(name: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    folder = LABELS / name
    return pl.read_parquet(folder / "labels.parquet"), pl.read_parquet(
        folder / "end_to_end.parquet"
    )


def erag_tables() -> dict[str, pl.DataFrame]:
    """Per dataset: the eRAG labels of BM25's top 3 (``bm25``) and of the same three documents
    in reverse order (``bm25-reversed``: a document's eRAG label does not depend on its rank),
    through the erag_per_query the asset uses."""
    tables = {}
    for name in ("sample30", "squad200"):
        labels = stored(name)[0].filter(pl.col("method") == "eRAG").drop("method")
        reversed_ = labels.with_columns(rank=4 - pl.col("rank"))
        doc_labels = {("smollm2", "bm25"): labels, ("smollm2", "bm25-reversed"): reversed_}
        questions = labels.get_column("query_id").unique().to_list()
        tables[name] = erag_per_query(doc_labels, ["P@1", "RR", "nDCG@3", "Success@3"], questions)
    return tables


def test_erag_leaderboard_on_stored_labels() -> None:
    tables = erag_tables()
    board = erag_leaderboard(tables, None, stats(resamples=300))
    assert board.columns[0] == "reader"
    metrics = ["P@1", "RR", "nDCG@3", "Success@3"]
    for name, table in tables.items():
        summary = erag_summary(table, metrics)
        for row in summary.iter_rows(named=True):
            for m in metrics:
                got = cell(board, name, row["retriever"], m, reader="smollm2")
                assert got["mean"] == row[m] and got["queries"] == row["queries"]
    # reversing the order changes rank-sensitive metrics, not the set metric Success@3
    rev = cell(board, "squad200", "bm25-reversed", "Success@3", reader="smollm2")
    assert rev["diff"] == 0.0 and rev["p_perm"] == 1.0
    assert cell(board, "squad200", "bm25-reversed", "P@1", reader="smollm2")["diff"] != 0.0
    base = cell(board, "squad200", "bm25", "RR", reader="smollm2")
    assert (base["baseline"], base["diff"], base["p_holm"]) == (True, 0.0, None)
    mean = cell(board, MEAN_OVER_DATASETS, "bm25", "RR", reader="smollm2")
    assert mean["mean"] == pytest.approx(
        (cell(board, "sample30", "bm25", "RR")["mean"] + base["mean"]) / 2, abs=1e-15
    )
    assert (board["family"] == 3 * len(metrics)).all()
    # a second reader (same labels) doubles the family; its cells are the same numbers
    two = {n: pl.concat([t, t.with_columns(reader=pl.lit("copy"))]) for n, t in tables.items()}
    board2 = erag_leaderboard(two, None, stats(resamples=300))
    assert (board2["family"] == 6 * len(metrics)).all()
    copy = board2.filter(pl.col("reader") == "copy").drop("reader", "p_holm", "family")
    assert copy.equals(board.drop("reader", "p_holm", "family"))
    # a larger family: no adjusted p-value can shrink
    again = board2.filter(pl.col("reader") == "smollm2")["p_holm"].drop_nulls().to_numpy()
    assert (again >= board["p_holm"].drop_nulls().to_numpy()).all()
    text = format_cross_leaderboard(board, STATS)
    assert "| metric" in text and "reader" in text and "over 12 comparisons" in text
    # a reader that never judged the baseline's lists compares with its own first retriever
    other = {n: t.filter(pl.col("retriever") == "bm25-reversed").with_columns(reader=pl.lit("b"))
             for n, t in tables.items()}  # fmt: skip
    mixed = erag_leaderboard(
        {n: pl.concat([tables[n], other[n]]) for n in tables}, None, stats(resamples=50)
    )
    assert mixed.filter(pl.col("reader") == "b")["baseline"].all()
    assert (mixed["family"] == 3 * len(metrics)).all()
    with pytest.raises(InputError, match="missing column"):
        erag_leaderboard({"x": tables["squad200"].drop("RR")}, ["RR"], STATS)
    broken = tables["squad200"].with_columns(RR=pl.when(pl.int_range(pl.len()) == 5)
                                            .then(None).otherwise(pl.col("RR")))  # fmt: skip
    with pytest.raises(InputError, match=r"missing or non-finite RR for reader 'smollm2'"):
        erag_leaderboard({"squad200": broken}, None, STATS)
    with pytest.raises(InputError, match="baseline 'dense'"):
        erag_leaderboard(tables, None, STATS, baseline="dense")


def test_table1_across_datasets() -> None:
    tables = {name: label_methods_table(*stored(name), 3, name, stats(resamples=200))
              for name in ("sample30", "squad200")}  # fmt: skip
    wide = table1_across(tables)
    assert wide.columns[:3] == ["retriever", "method", "metric"]
    for name, table in tables.items():
        for row in table.iter_rows(named=True):
            got = wide.filter(
                (pl.col("retriever") == row["retriever"])
                & (pl.col("method") == row["method"])
                & (pl.col("metric") == row["metric"])
            ).row(0, named=True)
            for ours, theirs in [("kendall_tau", "kendall_tau"), ("low", "kendall_low"),
                                 ("high", "kendall_high"), ("n_queries", "n_queries")]:  # fmt: skip
                a, b = got[f"{name} {ours}"], row[theirs]
                assert a == b or (math.isnan(a) and math.isnan(b))
    assert wide.height == tables["squad200"].height
    # a method one dataset lacks is null there
    partial = table1_across(
        {"a": tables["sample30"], "b": tables["squad200"].filter(pl.col("method") == "eRAG")}
    )
    lacking = partial.filter(pl.col("method") == "containment")
    assert lacking.height and lacking["b kendall_tau"].is_null().all()
    text = format_table1_across(partial, STATS)
    assert "| retriever" in text and "–" in text and "no multiple-comparison correction" in text
    rho = table1_across(tables, statistic="spearman_rho")
    assert "squad200 spearman_rho" in rho.columns
    with pytest.raises(InputError, match="unknown statistic"):
        table1_across(tables, statistic="pearson")
