"""``erag-dagster run``: materialise every asset on a dataset, then print the reports."""

from __future__ import annotations

import argparse

from erag_dagster.cli.common import load_dataset, load_registry


def cmd_run(args: argparse.Namespace) -> int:
    from erag_dagster.config.evaluation import STATISTICS_FIELDS
    from erag_dagster.orchestration.pipeline import (
        DEFAULT_REPORTS,
        DEFAULT_STAGES,
        materialize_all,
        print_reports,
    )
    from erag_dagster.orchestration.progress import relaying_notes
    from erag_dagster.orchestration.resources import EvalSettings

    load_registry(args.registry)  # a bad registry file is one line naming it, before any run
    settings = EvalSettings(
        dataset=args.dataset or "",
        registry_path=args.registry or "",
        k=args.k,
        label_k=args.label_k,
        metric=args.metric,
        **{name: getattr(args, name) for name in STATISTICS_FIELDS},
    )
    with relaying_notes() as progress:  # + each doc_labels partition's estimate (issue #11)
        materialize_all(
            settings,
            stages=DEFAULT_STAGES,
            verbose=args.verbose,
            progress=progress,
            load_dataset=load_dataset,
            launched_by="erag-dagster run",  # the runs' erag/launched_by tag
        )
    from erag_dagster.core.paths import storage_dir

    print_reports(
        registry_path=args.registry or "", only=DEFAULT_REPORTS, verbose=args.verbose,
        full=args.full, tables_dir=storage_dir("reports", "tables"), settings=settings,
    )  # fmt: skip
    from erag_dagster.orchestration.assets.html_report import page_path

    print(f"\nHTML report: {page_path()}")  # written by this run's html_report step
    return 0
