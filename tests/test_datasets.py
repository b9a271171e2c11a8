"""Several datasets in one graph: the registry's ``datasets`` section, per-dataset asset-key
prefixes and partitions, the reports across datasets, and automation that recomputes only the
dataset that changed.

The slow world materialises three datasets through the main job: two subsets of the embedded
sample (reader stages on) and the SciFact BEIR copy in ../shared/data (human judgments only),
with a run-file retriever (the BM25 run written by ``erag-dagster retrieve``) scoped to SciFact.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml

from erag_dagster.cli import main
from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.data.spec import parse_spec
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import load_asset_value, materialize_all
from erag_dagster.orchestration.resources import EvalSettings
from tests.answer_seed import shared_answers
from tests.pipeline_fixtures import scoped_env, small_registry, write_instance_yaml
from tests.test_automation import _sensor_result, requested


def _with_datasets(folder: Path, datasets: dict, extra: dict | None = None, **changes) -> Path:
    """:func:`small_registry` with BM25 and ``extra`` retrievers, plus a ``datasets`` section."""
    path = small_registry(folder, **changes)
    raw = yaml.safe_load(path.read_text())
    raw["retrievers"] = {"bm25": raw["retrievers"]["bm25"], **(extra or {})}
    path.write_text(yaml.safe_dump({"datasets": datasets, **raw}, sort_keys=False))
    return path


# -- the registry section ------------------------------------------------------------------------


def test_dataset_entries_merge_options_and_resolve_paths(tmp_path: Path) -> None:
    (tmp_path / "data" / "beir").mkdir(parents=True)
    path = _with_datasets(
        tmp_path / "reg",
        {
            "sample": "sample?spread_questions=6",
            "theirs": {
                "spec": "beir:../data/beir",
                "spread_questions": 20,
                "evaluation": {"k": 7, "relevance_level": 2},
            },
        },
    )
    registry = load_registry(path)
    assert list(registry.datasets) == ["sample", "theirs"]
    theirs = registry.datasets["theirs"]
    parsed = parse_spec(theirs.spec)
    assert parsed.path == (tmp_path / "data" / "beir").resolve()  # against the registry folder
    assert parsed.options == {"spread_questions": "20"}
    assert theirs.reader_labels is False  # beir has no gold answers
    assert registry.datasets["sample"].reader_labels is True
    settings = EvalSettings(registry_path=str(path))
    assert settings.resolve("theirs").k == 7  # the dataset's override
    assert settings.resolve("theirs").relevance_level == 2  # TREC DL style: judged >= 2
    assert settings.resolve("sample").k == 10  # the shared evaluation section
    assert settings.resolve("sample").relevance_level == 1
    assert settings.resolve("sample").dataset == "sample?spread_questions=6"


def test_scope_keeps_partition_keys_and_drops_what_builds_on_it(tmp_path: Path) -> None:
    run = tmp_path / "theirs.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    extra = {
        "theirs": {"kind": "run_file", "path": str(run), "datasets": ["b"]},
        "fused": {"kind": "hybrid", "fuse": ["bm25", "theirs"]},
    }
    scoped = load_registry(
        _with_datasets(tmp_path / "s", {"a": "sample", "b": "sample"}, extra=extra)
    )
    unscoped_extra = {"theirs": {"kind": "run_file", "path": str(run)}}
    plain = load_registry(_with_datasets(tmp_path / "p", {"a": "sample"}, extra=unscoped_extra))
    # scope is not content: the partition key is the same with and without it
    assert scoped.retriever("theirs").partition_key == plain.retriever("theirs").partition_key
    assert list(scoped.for_dataset("a").retrievers) == ["bm25"]  # fused builds on theirs
    assert list(scoped.for_dataset("b").retrievers) == ["bm25", "theirs", "fused"]
    with pytest.raises(InputError, match="unknown dataset 'c'; known: a, b"):
        scoped.for_dataset("c")


def test_graph_has_one_prefixed_copy_per_dataset(tmp_path: Path, shared_data: Path) -> None:
    path = _with_datasets(
        tmp_path / "reg",
        {"sample": "sample?max_questions=4", "scifact": f"beir:{shared_data}/scifact/beir"},
    )
    defs = build_defs(str(path))
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"sample/doc_labels", "sample/correlation_report", "scifact/retrieval_report"} <= keys
    assert "scifact/doc_labels" not in keys  # beir: human-judgment assets only
    # shared by both datasets: the readers, the one report two judged datasets can share
    # (one dataset with reader stages: no eRAG leaderboard, no Table 1 across datasets) and
    # the run's HTML page
    assert {k for k in keys if "/" not in k} == {"reader_models", "beir_leaderboard", "html_report"}
    assert (
        dg.AssetKey(["scifact", "dataset_files"])
        in graph.get(dg.AssetKey(["scifact", "corpus"])).parent_keys
    )
    assert graph.get(dg.AssetKey(["sample", "retrieval_run"])).parent_keys == {
        dg.AssetKey(["sample", "bm25_index"]),
        dg.AssetKey(["sample", "dense_index"]),
        dg.AssetKey(["sample", "queries"]),
        dg.AssetKey(["sample", "corpus"]),
    }
    defs.resolve_all_job_defs()  # one op per dataset copy: no clash of node names
    checks = {k.to_user_string() for k in graph.asset_check_keys}
    assert "scifact/retrieval_run:retrieval_run_depth_ranks_unique" in checks or any(
        c.startswith("scifact/retrieval_run:") for c in checks
    )


# -- a materialised two-dataset world ------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, shared_data: Path):
    root = tmp_path_factory.mktemp("datasets")
    home = write_instance_yaml(root / "dagster_home")
    scifact = f"beir:{shared_data}/scifact/beir"
    with scoped_env(ERAG_STORAGE=str(root / "storage"), DAGSTER_HOME=str(home)):
        run = root / "bm25.trec"  # their system's run: here, our BM25 written by the CLI
        assert main(["retrieve", "--dataset", scifact, "--retriever", "bm25", "--k", "10",
                     "--output", str(run)]) == 0  # fmt: skip
        datasets = {
            "sample": "sample?max_questions=4",
            "spread": "sample?spread_questions=4",  # a second dataset with reader stages
            "scifact": {"spec": scifact, "spread_questions": 8},
        }
        extra = {"theirs": {"kind": "run_file", "path": str(run), "datasets": ["scifact"]}}
        registry = _with_datasets(root / "base", datasets, extra=extra)
        instance = dg.DagsterInstance.from_config(str(home))
        settings = EvalSettings(registry_path=str(registry))
        with shared_answers(tmp_path_factory):
            materialize_all(
                settings, instance=instance, stages=["labels", "meta"], log=lambda m: None
            )
        yield {
            "root": root, "registry": registry, "instance": instance, "datasets": datasets,
            "extra": extra, "scifact": scifact,
        }  # fmt: skip


def _edited(world, name: str, datasets: dict, changed: str | None = None) -> dg.Definitions:
    """The definitions of an edited registry, its inputs observed (as ``input_change_sensor``
    would have them observed; ``changed``: what its tick must name)."""
    path = _with_datasets(world["root"] / name, datasets, extra=world["extra"])
    defs = build_defs(str(path))
    if changed is not None:
        tick = _sensor_result(defs, world["instance"])
        assert tick.tags["erag/changed_inputs"] == changed
    observe = defs.resolve_job_def("observe_inputs")
    assert observe.execute_in_process(instance=world["instance"]).success
    return defs


@pytest.mark.slow
def test_each_dataset_has_its_reports_and_the_run_file_scores_as_bm25(world) -> None:
    registry = load_registry(world["registry"])
    sample = load_asset_value("sample/retrieval_report", world["instance"], str(world["registry"]))
    scifact = load_asset_value(
        "scifact/retrieval_report", world["instance"], str(world["registry"])
    )
    assert sample.get_column("retriever").to_list() == [registry.retriever("bm25").partition_key]
    theirs = registry.retriever("theirs").partition_key
    assert scifact.get_column("retriever").to_list() == [
        registry.retriever("bm25").partition_key,
        theirs,
    ]
    assert set(scifact.get_column("queries").to_list()) == {8}
    # same content, different identity: the run file's figures are BM25's
    metrics = [c for c in scifact.columns if c.startswith(("nDCG@", "R@")) and "_" not in c]
    bm25_row, theirs_row = scifact.select(metrics).rows()
    assert bm25_row == pytest.approx(theirs_row)
    erag = load_asset_value("sample/erag_report", world["instance"], str(world["registry"]))
    assert erag.height == 1 and erag.get_column("queries").to_list() == [4]


@pytest.mark.slow
def test_nothing_changed_requests_nothing(world) -> None:
    result = dg.evaluate_automation_conditions(
        defs=build_defs(str(world["registry"])), instance=world["instance"]
    )
    assert requested(result) == {}


@pytest.mark.slow
@pytest.mark.parametrize("edited", ["scifact", "sample"])
def test_editing_one_dataset_recomputes_only_its_assets(world, edited: str) -> None:
    base = build_defs(str(world["registry"]))
    tick = dg.evaluate_automation_conditions(defs=base, instance=world["instance"])
    datasets = dict(world["datasets"])
    datasets["scifact"] = {"spec": world["scifact"], "spread_questions": 10}
    if edited == "sample":
        datasets = {**world["datasets"], "sample": "sample?max_questions=5"}
    defs = _edited(world, f"edit-{edited}", datasets, changed=f"{edited}/dataset_files")
    try:
        result = dg.evaluate_automation_conditions(
            defs=defs, instance=world["instance"], cursor=tick.cursor
        )
        got = requested(result)
        assert set(got) == {f"{edited}/corpus", f"{edited}/queries", f"{edited}/qrels"}
    finally:  # the instance observes the base registry's inputs again for the other cases
        _edited(world, "base-again", world["datasets"])


@pytest.mark.slow
def test_adding_a_dataset_materialises_only_its_assets(world, shared_data: Path) -> None:
    base = build_defs(str(world["registry"]))
    tick = dg.evaluate_automation_conditions(defs=base, instance=world["instance"])
    dl19 = f"beir:{shared_data}/beir-msmarco-dl19-subset"
    defs = _edited(world, "added", {**world["datasets"], "dl19": dl19})
    first = dg.evaluate_automation_conditions(
        defs=defs, instance=world["instance"], cursor=tick.cursor
    )
    # Dagster counts a condition's first evaluation of a new asset as "handled"
    # (since_last_handled includes initial_evaluation), so a new dataset starts on the next tick
    assert requested(first) == {}
    result = dg.evaluate_automation_conditions(
        defs=defs, instance=world["instance"], cursor=first.cursor
    )
    got = set(requested(result))  # the tables, and what reads them in the same tick
    assert {"dl19/corpus", "dl19/queries", "dl19/qrels"} <= got
    assert all(key.startswith("dl19/") for key in got), got
    _edited(world, "base-again", world["datasets"])


@pytest.mark.slow
def test_run_prints_every_datasets_reports(world, capsys) -> None:
    from erag_dagster.orchestration.pipeline import print_reports

    print_reports(world["instance"], str(world["registry"]))
    out = capsys.readouterr().out
    assert "[dataset sample] ==" in out and "[dataset scifact] ==" in out
    assert "eRAG: list metrics" in out
    assert "dataset scifact]: not available" not in out  # no reader stage: not listed


@pytest.mark.slow
def test_reports_across_datasets_hold_each_datasets_own_figures(world) -> None:
    """Every cell of the cross-dataset tables is the figure of that dataset's own report."""
    from erag_dagster.reports.cross_leaderboard import MEAN_OVER_DATASETS

    load = lambda key: load_asset_value(key, world["instance"], str(world["registry"]))  # noqa: E731
    beir = load("beir_leaderboard")
    assert set(beir.get_column("dataset")) == {"sample", "spread", "scifact", MEAN_OVER_DATASETS}
    for name in ("sample", "spread", "scifact"):
        own = load(f"{name}/retrieval_report")
        for row in own.iter_rows(named=True):
            cells = beir.filter(
                (pl.col("dataset") == name) & (pl.col("retriever") == row["retriever"])
            )
            for cell in cells.iter_rows(named=True):
                assert cell["mean"] == pytest.approx(row[cell["metric"]], abs=1e-12)
    family = beir.filter(~pl.col("baseline") & pl.col("p_perm").is_not_null()).height
    assert set(beir.get_column("family")) == {family}  # Holm over every comparison shown
    erag = load("erag_leaderboard")
    for name in ("sample", "spread"):
        own = load(f"{name}/erag_report")
        cells = erag.filter(pl.col("dataset") == name)
        for cell in cells.iter_rows(named=True):
            mine = own.filter(pl.col("retriever") == cell["retriever"])
            assert cell["mean"] == pytest.approx(mine.get_column(cell["metric"])[0], abs=1e-12)
    across = load("table1_across")
    assert {"sample kendall_tau", "spread kendall_tau"} <= set(across.columns)
    assert "scifact kendall_tau" not in across.columns  # no reader stage there
    assert (
        dg.AssetKey("erag_leaderboard")
        not in build_defs(
            str(
                _with_datasets(
                    world["root"] / "one-labelled", {"a": "sample", "b": world["scifact"]}
                )
            )
        )
        .resolve_asset_graph()
        .get_all_asset_keys()
    )  # one labelled dataset: nothing to compare


@pytest.mark.slow
def test_html_page_has_each_dataset_with_its_own_figure_and_files(world) -> None:
    """One page for the run: a section per dataset, each with its own Figure 1 (a dataset's
    figure goes to ``reports/<dataset>/``: two datasets' figures do not overwrite each other)
    and links to its own stored files; the judged-only dataset says it has no eRAG labels."""
    records = world["instance"].fetch_materializations(dg.AssetKey("html_report"), limit=1)
    meta = records.records[0].asset_materialization.metadata
    page = Path(meta["report"].value)
    assert page == world["root"] / "storage" / "reports" / "report.html"
    assert meta["report_url"].value == page.as_uri()
    text = page.read_text(encoding="utf-8")
    sections = text.split('<section id="dataset-')[1:]
    assert [s.split("</h2>")[0].split("Dataset ")[1] for s in sections] == [
        "sample", "spread", "scifact"
    ]  # fmt: skip
    reports = world["root"] / "storage" / "reports"
    for name, section in zip(("sample", "spread"), sections, strict=False):
        (image,) = re.findall(r'src="data:image/png;base64,([^"]+)"', section)
        assert base64.b64decode(image) == (reports / name / "correlation_vs_k.png").read_bytes()
        assert f'href="../assets/{name}/erag_report.parquet"' in section
    assert "no eRAG labels in this run" in sections[2] and "<img" not in sections[2]
    assert 'href="../assets/scifact/retrieval_report.parquet"' in sections[2]
    across = text.split('<section id="across">')[1]  # the reports across datasets, as printed
    assert across.count("<pre") == 3 and "mean over datasets" in across
    assert '<a href="#across">' in text
