"""``erag-dagster run``: materialise every asset on a dataset, then print the reports; with
``--defs``, the eRAG graphs of a team's Dagster project
(:mod:`erag_dagster.orchestration.project`)."""

from __future__ import annotations

import argparse

from erag_dagster.cli.common import load_dataset, load_registry
from erag_dagster.core.errors import InputError

#: The command-line settings that belong in a component instance's ``defs.yaml`` under ``--defs``.
_REGISTRY_OPTIONS = ("dataset", "registry", "k", "label_k", "metric")


def cmd_run(args: argparse.Namespace) -> int:
    from erag_dagster.config.evaluation import STATISTICS_FIELDS
    from erag_dagster.orchestration.pipeline import Graph
    from erag_dagster.orchestration.resources import EvalSettings

    if args.defs:
        given = [
            f"--{n.replace('_', '-')}"
            for n in (*_REGISTRY_OPTIONS, *STATISTICS_FIELDS)
            if getattr(args, n) is not None
        ]
        if given:
            raise InputError(
                f"--defs builds what the defs.yaml files declare; {', '.join(given)} "
                "belong there (evaluation: ...), not on the command line"
            )
        from erag_dagster.orchestration.project import project_graphs

        graphs = project_graphs(args.defs)
    else:
        load_registry(args.registry)  # a bad registry file is one line naming it, before any run
        settings = EvalSettings(
            dataset=args.dataset or "",
            registry_path=args.registry or "",
            k=args.k,
            label_k=args.label_k,
            metric=args.metric,
            **{name: getattr(args, name) for name in STATISTICS_FIELDS},
        )
        settings.resolve()  # a bad --k/--metric is one line before Dagster's instance is touched
        graphs = [Graph.packaged(settings)]
    for graph in graphs:
        _run_graph(graph, args, many=len(graphs) > 1)
    return 0


def _run_graph(graph, args: argparse.Namespace, many: bool) -> None:
    """Materialise one graph, print its verdict and reports, and where its page is."""
    from erag_dagster.orchestration.assets.common import report_folder
    from erag_dagster.orchestration.pipeline import (
        DEFAULT_REPORTS,
        DEFAULT_STAGES,
        materialize_all,
        print_reports,
    )
    from erag_dagster.orchestration.progress import relaying_notes

    if many:
        print(f"\n== eRAG graph {'/'.join(graph.key_prefix) or '(no key prefix)'} ==")
    with relaying_notes() as progress:  # + each doc_labels partition's estimate (issue #11)
        materialize_all(
            graph=graph,
            stages=DEFAULT_STAGES,
            verbose=args.verbose,
            progress=progress,
            load_dataset=load_dataset,
            launched_by="erag-dagster run",  # the runs' erag/launched_by tag
        )
    tables = report_folder("tables", graph.key_prefix)
    print_reports(
        only=DEFAULT_REPORTS, verbose=args.verbose, full=args.full, tables_dir=tables,
        graph=graph,
    )  # fmt: skip
    print(f"HTML report: {graph.page}")  # written by this run's html_report step
