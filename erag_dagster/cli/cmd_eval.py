"""The evaluation commands of ``erag-dagster``: ``retrieve``, ``evaluate-run``, ``label``,
``score``, ``rerank`` and ``correlate``, each an adapter over one library function.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from erag_dagster.cli.common import (
    dataset_inputs,
    load_dataset,
    load_registry,
    metrics_arg,
    print_table,
    registry_inputs,
)
from erag_dagster.core.errors import concerning


def _report_json(report) -> str:
    return json.dumps({"per_query": report.per_query, "aggregate": report.aggregate}, indent=2)


def _report_frame(report, metrics: Sequence[str]):
    import polars as pl

    return pl.DataFrame(
        [{"metric": m, "value": report.aggregate[m]} for m in metrics],
        schema={"metric": pl.String, "value": pl.Float64},
    )


def cmd_retrieve(args: argparse.Namespace) -> int:
    """``retrieve``: the evaluation session's retrieve step (the one the assets, the API and
    the gate run), its run written as TREC to ``--output``."""
    from erag_dagster.core.callbacks import notes_to
    from erag_dagster.core.output_guard import guard_output
    from erag_dagster.evaluation.session import EvaluationSession
    from erag_dagster.retrieval.runs import check_trec_ids, write_trec_run

    registry = load_registry(args.registry)
    entry = registry.retriever(args.retriever)
    config = registry.evaluation.with_overrides("--k", k=args.k)
    k = config.k
    reads = [*registry_inputs(registry), *dataset_inputs(args.dataset)]
    guard_output(args.output, "retrieve", reads, force=args.force)
    ds = load_dataset(args.dataset)
    check_trec_ids(ds.queries, "query_id", args.dataset)
    check_trec_ids(ds.corpus, "doc_id", args.dataset)
    log = (lambda m: print(m, file=sys.stderr)) if args.verbose else None
    config = config.with_overrides("--dataset", dataset=args.dataset)  # its question subset
    with notes_to(lambda line: print(f"erag-dagster: note: {line}", file=sys.stderr)):
        run = EvaluationSession(config, registry, ds, log=log).retrieve(entry.name)
    write_trec_run(run, args.output, tag=entry.partition_key, command="retrieve")
    print(
        f"wrote {run.height} lines ({run.get_column('query_id').n_unique()} queries, k={k}) "
        f"to {args.output}",
        file=sys.stderr,
    )
    return 0


def cmd_evaluate_run(args: argparse.Namespace) -> int:
    from erag_dagster.metrics.human import evaluate_run
    from erag_dagster.retrieval.run_file import run_against_dataset
    from erag_dagster.retrieval.runs import read_trec_run

    config = load_registry(args.registry).evaluation.with_overrides(
        "evaluate-run", human_metrics=args.metrics, relevance_level=args.relevance_level
    )
    metrics = list(config.human_metrics)
    ds = load_dataset(args.dataset)
    with concerning(args.run):
        run = read_trec_run(args.run)
    # the run-file rule (unknown documents at file:line); a query the dataset lacks is left out
    # as trec_eval leaves out an unjudged one — and named, never dropped without a word
    loaded = run_against_dataset(
        run, ds.queries, ds.corpus, None, path=args.run, question_subset=True
    )
    if loaded.outside_ids:
        print(f"erag-dagster: note: {loaded.left_out_line(args.run)}", file=sys.stderr)
    report = evaluate_run(ds.qrels, loaded.run, metrics, relevance_level=config.relevance_level)
    if args.json:
        print(_report_json(report))
    else:
        print_table(_report_frame(report, metrics))
    return 0


def cmd_label(args: argparse.Namespace) -> int:
    """``label``: :func:`erag_dagster.api.label`, its labels written to ``--output``."""
    from erag_dagster.api import label
    from erag_dagster.core.output_guard import guard_output, writing_output
    from erag_dagster.labels.store import resolve_store
    from erag_dagster.labels.store_url import store_files

    registry = load_registry(args.registry)
    reads = [
        *registry_inputs(registry),
        *dataset_inputs(args.dataset),
        ("the run file", args.run),
        *store_files(resolve_store(args.store)),
        ("the reader config", args.reader if args.reader and Path(args.reader).is_file() else None),
    ]
    guard_output(args.output, "label", reads, force=args.force)
    result = label(
        args.dataset, args.run, args.reader, args.metric, k=args.k, store=args.store,
        registry=args.registry, executor=args.executor, ray_address=args.ray_address,
        log=lambda m: print(m, file=sys.stderr),
    )  # fmt: skip
    with writing_output(args.output, "label") as tmp:
        result.labels.write_parquet(tmp)
    fingerprint = str(result.labels["reader_fingerprint"][0]) if result.labels.height else "-"
    print(
        f"wrote {result.labels.height} labels to {args.output} "
        f"(judged now {result.judged_now}, from store {result.from_store}; "
        f"reader {fingerprint[:16]})",
        file=sys.stderr,
    )
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    """``score``: :func:`erag_dagster.api.score`, printed as a table or JSON."""
    from erag_dagster.api import score

    scores = score(args.labels, metrics_arg(args.metrics), compat=args.compat)
    if args.json:
        print(_report_json(scores.report))
    else:
        print_table(scores.aggregate)
    if scores.note:
        print(f"erag-dagster: note: {scores.note}", file=sys.stderr)
    return 0


def cmd_rerank(args: argparse.Namespace) -> int:
    from erag_dagster.core.output_guard import guard_output
    from erag_dagster.data.spec import parse_spec
    from erag_dagster.evaluation.retrievers import default_scorer
    from erag_dagster.retrieval.rerank import CrossEncoderScorer, lift_report, rerank
    from erag_dagster.retrieval.run_file import run_against_dataset
    from erag_dagster.retrieval.runs import read_trec_run, write_trec_run

    registry = load_registry(args.registry)
    config = registry.evaluation.with_overrides(
        "rerank", human_metrics=args.metrics, relevance_level=args.relevance_level
    )
    metrics = list(config.human_metrics)
    reads = [
        *(registry_inputs(registry) if not args.cross_encoder else []),
        *dataset_inputs(args.dataset),
        ("the run file", args.run),
        ("the cross-encoder", args.cross_encoder),
    ]
    guard_output(args.output, "rerank", reads, force=args.force)
    ds = load_dataset(args.dataset)
    with concerning(args.run):
        run = read_trec_run(args.run)
    subset = parse_spec(args.dataset).question_subset  # the registry run_file's rule
    loaded = run_against_dataset(
        run, ds.queries, ds.corpus, None, path=args.run, question_subset=subset
    )
    if loaded.outside_ids:
        print(f"erag-dagster: note: {loaded.left_out_line(args.run)}", file=sys.stderr)
    run = loaded.run
    if args.cross_encoder:
        scorer = CrossEncoderScorer(args.cross_encoder, device=args.device or "auto")
        tag = f"rerank-{Path(args.cross_encoder).name}"
    else:
        overrides = {"device": args.device} if args.device else None
        scorer = default_scorer(registry, args.reader, overrides)
        tag = f"rerank-{scorer.reader.name}"
    log = (lambda m: print(m, file=sys.stderr)) if args.verbose else None
    result = rerank(run, ds.queries, ds.corpus, scorer, top_n=args.top_n, k=args.k, log=log)
    write_trec_run(result.run, args.output, tag=tag, command="rerank")
    print(
        f"wrote {result.run.height} lines ({result.queries} queries, top-{args.top_n} -> "
        f"top-{args.k}) to {args.output}; {result.seconds_per_query:.3f} s/query, "
        f"{result.docs_per_second:.1f} docs/s",
        file=sys.stderr,
    )
    if ds.qrels.height and not args.no_report:
        report = lift_report(
            ds.qrels, run, result, metrics, config.statistics,
            relevance_level=config.relevance_level,
        )  # fmt: skip
        print_table(
            report.select("metric", "depth", "before", "after", "difference", "p_perm", "p_t")
        )
    return 0


def cmd_correlate(args: argparse.Namespace) -> int:
    from erag_dagster.orchestration.pipeline import materialize_all, print_reports
    from erag_dagster.orchestration.progress import relaying_notes
    from erag_dagster.orchestration.resources import EvalSettings

    registry = load_registry(args.registry)
    wanted = [r.strip() for r in args.retrievers.split(",") if r.strip()]
    for name in wanted:
        registry.retriever(name)  # unknown names fail here, with the known ones listed
    if args.reader:
        registry.reader(args.reader)
    path = _narrowed_registry(registry, wanted, args.reader)
    # --k: the depth labelled and given end-to-end (the config's label_k; retrieval at least as
    # deep); the end-to-end depths follow it by the configuration's own rule
    settings = EvalSettings(
        dataset=args.dataset,
        registry_path=str(path),
        k=max(args.k, registry.evaluation.k) if args.k else None,
        label_k=args.k,
    )
    with relaying_notes() as progress:  # + each doc_labels partition's estimate (issue #11)
        materialize_all(
            settings,
            stages=["labels", "meta"],
            verbose=args.verbose,
            progress=progress,
            load_dataset=load_dataset,
        )
    print_reports(registry_path=str(path), only=("correlation_report",), verbose=args.verbose)
    return 0


def _narrowed_registry(registry, retrievers: list[str], reader: str | None) -> Path:
    """A registry file holding only the chosen retrievers (and what hybrids fuse) and reader."""
    import yaml

    from erag_dagster.core.input_files import load_yaml
    from erag_dagster.core.paths import storage_dir

    raw = load_yaml(registry.path)
    keep: set[str] = set()
    scorers: set[str] = set()
    todo = list(retrievers)
    while todo:  # what hybrids fuse and reranks rerank, and the readers reranks score with
        entry = registry.retriever(todo.pop())
        keep.add(entry.name)
        todo += [p for p in [*entry.config.get("fuse", []), entry.config.get("first_stage")] if p]
        scorers.add(str(entry.config.get("scorer", "")).removeprefix("reader:"))
    # configs as resolved (run-file and folder paths absolute): the copy lives elsewhere
    raw["retrievers"] = {k: e.config for k, e in registry.retrievers.items() if k in keep}
    if reader:
        name = registry.reader(reader).name
        raw["readers"] = {n: raw["readers"][n] for n in raw["readers"] if n in scorers | {name}}
    target = storage_dir("registries") / f"correlate-{'-'.join(sorted(keep))}.yaml"
    from erag_dagster.core.paths import atomic_write_text

    atomic_write_text(target, yaml.safe_dump(raw, sort_keys=False))
    return target
