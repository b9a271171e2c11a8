"""Report tables are declared once (erag_dagster/reports/catalog.py) and every view is generated
from the declarations: the Dagster assets with their checks and groups, the main job's order,
the terminal sections, the reports ``erag-dagster run`` prints, and the page's blocks. A new
declaration, not in the catalog, becomes a working asset through the same factory."""

from __future__ import annotations

import dagster as dg
import polars as pl

from erag_dagster.config.registry import load_registry
from erag_dagster.orchestration.assets.reports import build_dataset_report
from erag_dagster.orchestration.definitions import build_defs
from erag_dagster.orchestration.pipeline import DEFAULT_REPORTS, plan
from erag_dagster.orchestration.resources import EvalSettings
from erag_dagster.orchestration.resources.io import PolarsJsonIOManagerFactory
from erag_dagster.reports.catalog import REPORTS, dataset_reports_for, reports_across
from erag_dagster.reports.declaration import Computed, PageBlock, Report, ReportInput
from erag_dagster.reports.html import DatasetSection, render_html_report
from erag_dagster.reports.run_report import ACROSS_TITLES, TITLES, RunReport, Section
from tests.stats_fixture import STATS

AGREEMENT = pl.DataFrame(
    {
        "method": ["erag"],
        "reader": ["r-0123abcd"],
        "retriever": ["bm25-0123abcd"],
        "agreement": [0.5],
        "kappa": [0.25],
    }
)


def test_every_dataset_report_is_an_asset_with_the_declared_group_and_checks() -> None:
    defs = build_defs()
    graph = defs.resolve_asset_graph()
    checks: dict[str, set[str]] = {}
    for assets_def in defs.assets or []:
        for spec in getattr(assets_def, "check_specs", []):
            checks.setdefault(spec.asset_key.to_user_string(), set()).add(spec.name)
    declared = dataset_reports_for(has_reader_labels=True)
    assert [r.key for r in declared] == [
        "retrieval_report", "erag_per_query", "erag_report", "correlation_report",
        "label_agreement", "efficiency_report",
    ]  # fmt: skip
    for report in declared:
        node = graph.get(dg.AssetKey(report.key))
        assert node.group_name == report.group
        assert {k.path[-1] for k in node.parent_keys} >= set(report.input_names)
        expected = set()
        if report.checks:
            expected = {"not_empty"}
            expected |= {"readme_figures"} if report.figures else set()
            expected |= {"no_regression"} if report.regression else set()
        assert checks.get(report.key, set()) == expected, report.key
        assert (node.automation_condition is not None) == report.automatic


def test_a_report_runs_right_after_the_last_asset_it_reads() -> None:
    order = [k.to_user_string() for step in plan(build_defs()) for k in step.keys]
    for report in dataset_reports_for(has_reader_labels=True):
        position = order.index(report.key)
        read = [order.index(name) for name in report.input_names if name in order]
        assert max(read) < position, report.key


def test_terminal_titles_and_default_reports_come_from_the_declarations() -> None:
    assert list(TITLES) == [r.key for r in REPORTS if r.scope == "dataset" and r.text]
    assert list(ACROSS_TITLES) == [r.key for r in reports_across()]
    assert tuple(r.key for r in REPORTS if r.printed) == DEFAULT_REPORTS
    assert "efficiency_report" not in DEFAULT_REPORTS  # minutes of fresh reader processes
    frame = AGREEMENT
    report = RunReport(sections=[Section("label_agreement", None, frame)], statistics=STATS)
    text = report.text()
    assert TITLES["label_agreement"] in text
    assert "0.250" in text  # the compact view: kappa per method, one column per system


def test_the_page_draws_each_declared_block_or_says_it_is_missing() -> None:
    frame = AGREEMENT
    page = render_html_report(
        [DatasetSection(name="d", reports={"label_agreement": frame})], statistics=STATS
    )
    for report in REPORTS:
        if report.scope == "dataset" and report.page is not None:
            assert f"<h3>{report.page.heading}</h3>" in page
    assert "no correlation report in this run" in page  # declared, not given: one line
    assert "Cohen&#x27;s kappa" in page  # the agreement block's legend


def _toy(inputs) -> Computed:
    qrels = inputs.values["qrels"]
    table = qrels.group_by("query_id").len().sort("query_id")
    return Computed(table, {"queries": table.height}, why_empty="no judgments")


TOY = Report(
    key="judged_per_query",
    title="Judged documents per query",
    inputs=(ReportInput("qrels"),),
    compute=_toy,
    text=lambda frame, _full, _stats: f"{frame.height} queries",
    page=PageBlock("Judged documents", lambda frame, _f, _s: f"<p>{frame.height}</p>", "none"),
    printed=False,
)


def test_a_new_declaration_is_a_working_asset_through_the_same_factory(tmp_path) -> None:
    @dg.asset(name="qrels")
    def qrels() -> pl.DataFrame:
        return pl.DataFrame({"query_id": ["q1", "q1", "q2"], "doc_id": ["a", "b", "c"],
                             "relevance": [1, 1, 1]})  # fmt: skip

    registry = load_registry(None)
    result = dg.materialize(
        [qrels, build_dataset_report(TOY)],
        resources={
            "settings": EvalSettings().bound_to(registry),
            "io_manager": PolarsJsonIOManagerFactory(base_dir=str(tmp_path)),
        },
    )
    assert result.success
    value = result.output_for_node("judged_per_query")
    assert value.to_dicts() == [{"query_id": "q1", "len": 2}, {"query_id": "q2", "len": 1}]
    (event,) = result.get_asset_materialization_events()[1:]
    assert event.materialization.metadata["queries"].value == 2
    (check,) = result.get_asset_check_evaluations()
    assert check.check_name == "not_empty" and check.passed
