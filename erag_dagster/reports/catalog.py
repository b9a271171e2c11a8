"""The report tables of a run, in print order: the one list every view is generated from.

The Dagster assets (:func:`erag_dagster.orchestration.assets.reports.build_report_assets`), the
terminal text (:class:`~erag_dagster.reports.run_report.RunReport`), the reports ``erag-dagster
run`` prints (:data:`erag_dagster.orchestration.pipeline.DEFAULT_REPORTS`) and the HTML page
(:mod:`erag_dagster.reports.html`, :mod:`erag_dagster.orchestration.assets.html_report`) read this
list; a new report table is a module declaring one :class:`~.declaration.Report` and one line here
(docs/ARCHITECTURE.md, "What an extension touches").
"""

from __future__ import annotations

from erag_dagster.reports import across_reports, dataset_reports
from erag_dagster.reports.declaration import Report

REPORTS: tuple[Report, ...] = (
    dataset_reports.RETRIEVAL_REPORT,
    dataset_reports.ERAG_PER_QUERY,
    dataset_reports.ERAG_REPORT,
    dataset_reports.CORRELATION_REPORT,
    dataset_reports.LABEL_AGREEMENT,
    dataset_reports.EFFICIENCY_REPORT,
    across_reports.BEIR_LEADERBOARD,
    across_reports.ERAG_LEADERBOARD,
    across_reports.TABLE1_ACROSS,
)
"""Every report table, dataset reports first, each scope in print order."""

BY_KEY: dict[str, Report] = {report.key: report for report in REPORTS}


def dataset_reports_for(has_reader_labels: bool) -> list[Report]:
    """The reports of one dataset: every dataset report, or with no reader labels (no gold
    answers) those that need no reader."""
    return [
        r for r in REPORTS if r.scope == "dataset" and (has_reader_labels or not r.needs_reader)
    ]


def reports_across() -> list[Report]:
    """The reports across datasets."""
    return [r for r in REPORTS if r.scope == "across"]
