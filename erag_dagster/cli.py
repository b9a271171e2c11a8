"""``erag-dagster`` command line: thin over the same library functions the assets use.

One error boundary (:func:`main`): every expected failure prints ONE line on stderr naming what
and where, and exits 2 for bad input (:class:`~erag_dagster.errors.InputError`, including bad
arguments) or 1 for an environment or storage fault
(:class:`~erag_dagster.errors.EnvironmentFault`). Foreign exceptions from reading a user's file
are mapped with the file they concern (:func:`~erag_dagster.errors.concerning`); an unexpected
exception is a bug and keeps its traceback. ``--debug`` (or ``ERAG_DEBUG=1``) prints the
traceback of an expected failure too. Output files are checked for writability before the work
that fills them runs.

Why one module over 400 lines: each command is a short adapter (parse, call one library
function, print), and the parser table, the commands and the error boundary are read together
when a command is added; the logic they call lives in the library modules.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from erag_dagster import notices  # noqa: F401  (Dagster's beta notices filtered, before dagster)
from erag_dagster.credentials import mask_credentials
from erag_dagster.errors import InputError, as_fault, concerning

MAX_K = 2**31 - 1
"""Largest cut-off accepted: Anserini's ``int`` hit count (a larger one is a Java exception)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: a bad argument is an :class:`InputError` (exit 2)."""

    def error(self, message: str):  # type: ignore[override]
        command = self.prog.removeprefix("erag-dagster").strip()
        raise InputError(f"{command + ': ' if command else ''}{message} (see {self.prog} --help)")


def _count(text: str) -> int:
    """An argparse type: an integer in ``[1, MAX_K]`` (0 is refused, not "the default")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= value <= MAX_K:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and {MAX_K}")
    return value


def _dataset(spec: str):
    """A dataset, loaded as the API loads it (:func:`erag_dagster.api.load_dataset_checked`)."""
    from erag_dagster.api import load_dataset_checked

    return load_dataset_checked(spec)


def _registry(path: str | None):
    from erag_dagster.api import load_registry_file

    return load_registry_file(path)


def _registry_inputs(registry) -> list[tuple[str, str | None]]:
    """The files a loaded registry reads: itself and every ``run_file`` it names."""
    reads: list[tuple[str, str | None]] = [("the registry", registry.path)]
    for entry in registry.retrievers.values():
        if entry.config.get("kind") == "run_file":
            reads.append((f"run_file {entry.name!r} of the registry", entry.config.get("path")))
    return reads


def _dataset_inputs(spec: str) -> list[tuple[str, Path]]:
    """The files a dataset spec reads (none when the spec is bad: loading it says why)."""
    from erag_dagster.data.loaders import dataset_source_files

    try:
        return [("a dataset file", path) for path in dataset_source_files(spec)]
    except Exception:  # the spec's own error comes, one line, from _dataset
        return []


def _metrics_arg(text: str) -> list[str]:
    items = [m.strip() for m in text.split(",") if m.strip()]
    if not items:
        raise InputError("--metrics is empty; give a comma-separated list such as nDCG@10,R@100")
    return items


def _print_table(frame, floatfmt: str = ".4f") -> None:
    from erag_dagster.reports.tables import format_table

    print(format_table(frame, floatfmt=floatfmt))


def _report_json(report) -> str:
    return json.dumps({"per_query": report.per_query, "aggregate": report.aggregate}, indent=2)


def _report_frame(report, metrics: Sequence[str]):
    import polars as pl

    return pl.DataFrame(
        [{"metric": m, "value": report.aggregate[m]} for m in metrics],
        schema={"metric": pl.String, "value": pl.Float64},
    )


def cmd_retrieve(args: argparse.Namespace) -> int:
    from erag_dagster.data.spec import parse_spec
    from erag_dagster.output_guard import guard_output
    from erag_dagster.retrieval.runs import check_trec_ids, write_trec_run
    from erag_dagster.retrievers import run_retriever

    registry = _registry(args.registry)
    entry = registry.retriever(args.retriever)
    k = args.k if args.k is not None else int(registry.evaluation.get("k", 50))
    reads = [*_registry_inputs(registry), *_dataset_inputs(args.dataset)]
    guard_output(args.output, "retrieve", reads, force=args.force)
    ds = _dataset(args.dataset)
    check_trec_ids(ds.queries, "query_id", args.dataset)
    check_trec_ids(ds.corpus, "doc_id", args.dataset)
    log = (lambda m: print(m, file=sys.stderr)) if args.verbose else None
    subset = parse_spec(args.dataset).question_subset
    run = run_retriever(
        registry, entry.name, ds.corpus, ds.queries, k, log=log, question_subset=subset
    )
    write_trec_run(run, args.output, tag=entry.partition_key, command="retrieve")
    print(
        f"wrote {run.height} lines ({run.get_column('query_id').n_unique()} queries, k={k}) "
        f"to {args.output}",
        file=sys.stderr,
    )
    return 0


def cmd_evaluate_run(args: argparse.Namespace) -> int:
    from erag_dagster.metrics.human import evaluate_run
    from erag_dagster.retrieval.runs import read_trec_run

    metrics = _metrics_arg(args.metrics)
    ds = _dataset(args.dataset)
    with concerning(args.run):
        run = read_trec_run(args.run)
    unknown = set(run.get_column("doc_id").to_list()) - set(ds.corpus.get_column("doc_id"))
    if unknown:
        raise InputError(
            f"{args.run}: names {len(unknown)} document(s) not in {args.dataset}, "
            f"e.g. {sorted(unknown)[0]!r}"
        )
    report = evaluate_run(ds.qrels, run, metrics, relevance_level=args.relevance_level)
    if args.json:
        print(_report_json(report))
    else:
        _print_table(_report_frame(report, metrics))
    return 0


def cmd_label(args: argparse.Namespace) -> int:
    """``label``: :func:`erag_dagster.api.label`, its labels written to ``--output``."""
    from erag_dagster.api import label
    from erag_dagster.labels.store import resolve_store
    from erag_dagster.labels.store_url import store_files
    from erag_dagster.output_guard import guard_output, writing_output

    registry = _registry(args.registry)
    reads = [
        *_registry_inputs(registry),
        *_dataset_inputs(args.dataset),
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

    scores = score(args.labels, _metrics_arg(args.metrics), compat=args.compat)
    if args.json:
        print(_report_json(scores.report))
    else:
        _print_table(scores.aggregate)
    if scores.note:
        print(f"erag-dagster: note: {scores.note}", file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from erag_dagster.pipeline import (
        DEFAULT_REPORTS,
        DEFAULT_STAGES,
        materialize_all,
        print_reports,
    )
    from erag_dagster.progress import relaying_notes
    from erag_dagster.resources import EvalSettings

    _registry(args.registry)  # a bad registry file is one line naming it, before any run
    settings = EvalSettings(
        dataset=args.dataset or "",
        registry_path=args.registry or "",
        k=args.k or 0,
        label_k=args.label_k or 0,
        metric=args.metric or "",
    )
    with relaying_notes() as progress:  # + each doc_labels partition's estimate (issue #11)
        materialize_all(
            settings,
            stages=DEFAULT_STAGES,
            verbose=args.verbose,
            progress=progress,
            load_dataset=_dataset,
        )
    from erag_dagster.paths import storage_dir

    print_reports(
        registry_path=args.registry or "", only=DEFAULT_REPORTS, verbose=args.verbose,
        full=args.full, tables_dir=storage_dir("reports", "tables"),
    )  # fmt: skip
    from erag_dagster.assets.html_report import page_path

    print(f"\nHTML report: {page_path()}")  # written by this run's html_report step
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from erag_dagster.labels.store import open_store, redact_url, resolve_store
    from erag_dagster.labels.store_url import parse_store

    target = parse_store(resolve_store(args.store, writable=False))
    path = redact_url(target.where)
    if target.kind == "sqlite" and not Path(target.where).is_file():
        raise InputError(f"{path}: no label store here (run labelling first or pass --store)")
    with concerning(path):
        rows = open_store(args.store, read_only=True).audit(args.query, args.doc)
    if rows.height == 0:
        raise InputError(f"no stored label for query {args.query!r} and document {args.doc!r}")
    if args.json:
        print(json.dumps(rows.to_dicts(), indent=2, default=str))
    else:
        for row in rows.to_dicts():
            print("-" * 72)
            for key, value in row.items():
                print(f"{key:>22}: {value}")
    return 0


def cmd_import_recovery(args: argparse.Namespace) -> int:
    """Insert the answers of a label-store recovery file (written when the store stayed locked)."""
    from erag_dagster.labels.store import open_store, redact_url, resolve_store

    path = redact_url(resolve_store(args.store))
    with concerning(path, args.file):
        added = open_store(args.store).import_recovery(args.file)
    print(f"{args.file}: {added} answers added to {path} (already stored ones kept)")
    return 0


def cmd_store_copy(args: argparse.Namespace) -> int:
    """Copy every row of one label store into another (insert-if-absent; counts printed)."""
    from erag_dagster.labels.store import redact_url
    from erag_dagster.labels.store_copy import copy_store

    source, target = redact_url(args.source), redact_url(args.target)
    with concerning(source, target):
        counts = copy_store(args.source, args.target, chunk=args.chunk)
    for count in counts:
        print(f"{count.table}: {count.read} read, {count.added} added")
    added = sum(c.added for c in counts)
    print(f"copied {source} -> {target}: {added} rows added (rows already there kept)")
    return 0


def cmd_rerank(args: argparse.Namespace) -> int:
    from erag_dagster.output_guard import guard_output
    from erag_dagster.retrieval.rerank import CrossEncoderScorer, lift_report, rerank
    from erag_dagster.retrieval.runs import read_trec_run, write_trec_run
    from erag_dagster.retrievers import default_scorer

    metrics = _metrics_arg(args.metrics)
    registry = None if args.cross_encoder else _registry(args.registry)
    reads = [
        *(_registry_inputs(registry) if registry else []),
        *_dataset_inputs(args.dataset),
        ("the run file", args.run),
        ("the cross-encoder", args.cross_encoder),
    ]
    guard_output(args.output, "rerank", reads, force=args.force)
    ds = _dataset(args.dataset)
    with concerning(args.run):
        run = read_trec_run(args.run)
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
            ds.qrels, run, result, metrics=metrics, relevance_level=args.relevance_level
        )
        _print_table(
            report.select("metric", "depth", "before", "after", "difference", "p_perm", "p_t")
        )
    return 0


def cmd_correlate(args: argparse.Namespace) -> int:
    from erag_dagster.pipeline import materialize_all, print_reports
    from erag_dagster.progress import relaying_notes
    from erag_dagster.resources import EvalSettings

    registry = _registry(args.registry)
    wanted = [r.strip() for r in args.retrievers.split(",") if r.strip()]
    for name in wanted:
        registry.retriever(name)  # unknown names fail here, with the known ones listed
    if args.reader:
        registry.reader(args.reader)
    path = _narrowed_registry(registry, wanted, args.reader)
    settings = EvalSettings(
        dataset=args.dataset,
        registry_path=str(path),
        k=max(args.k, int(registry.evaluation.get("k", args.k))),
        label_k=args.k,
        e2e_ks=sorted({1, args.k} | ({3} if args.k > 3 else set())),
    )
    with relaying_notes() as progress:  # + each doc_labels partition's estimate (issue #11)
        materialize_all(
            settings,
            stages=["labels", "meta"],
            verbose=args.verbose,
            progress=progress,
            load_dataset=_dataset,
        )
    print_reports(registry_path=str(path), only=("correlation_report",), verbose=args.verbose)
    return 0


def _narrowed_registry(registry, retrievers: list[str], reader: str | None) -> Path:
    """A registry file holding only the chosen retrievers (and what hybrids fuse) and reader."""
    import yaml

    from erag_dagster.input_files import load_yaml
    from erag_dagster.paths import storage_dir

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
    from erag_dagster.paths import atomic_write_text

    atomic_write_text(target, yaml.safe_dump(raw, sort_keys=False))
    return target


def _gate_settings(args: argparse.Namespace):
    from erag_dagster.gate import GateSettings

    return GateSettings(
        dataset=args.dataset or "",
        reader=args.reader or "",
        downstream_metric=args.metric or "",
        metrics=tuple(_metrics_arg(args.metrics)) if args.metrics else (),
        k=args.k or 0,
        store=args.store or "",
        registry=args.registry or "",
    )


def cmd_compare(args: argparse.Namespace) -> int:
    """The regression gate (docs/gate.md): exit 3 when ``--fail-if`` matches the verdict."""
    from erag_dagster.gate import EXIT_GATE_FAILED, FAIL_RULES, GateRule, compare, save_baseline
    from erag_dagster.gate.render import to_json, to_markdown, to_text
    from erag_dagster.paths import check_output

    for option, target in (("--save-candidate", args.save_candidate), ("--output", args.output)):
        if target:
            check_output(target, option)
    rule = GateRule(margin=args.margin, alpha=args.alpha)
    log = (lambda m: print(m, file=sys.stderr)) if args.verbose else None
    result = compare(args.baseline, args.candidate, _gate_settings(args), rule, log=log)
    text = to_json(result) if args.json else to_markdown(result) if args.markdown else None
    text = text if text is not None else to_text(result)
    print(text)
    if args.output:
        from erag_dagster.paths import atomic_write_text

        atomic_write_text(args.output, text + "\n")
    if args.save_candidate:
        save_baseline(result.candidate, args.save_candidate)
        print(f"saved the candidate as a baseline: {args.save_candidate}", file=sys.stderr)
    if args.fail_if and result.verdict in FAIL_RULES[args.fail_if]:
        print(
            f"erag-dagster: gate failed: the candidate is {result.verdict} "
            f"(--fail-if {args.fail_if})",
            file=sys.stderr,
        )
        return EXIT_GATE_FAILED
    return 0


def cmd_baseline(args: argparse.Namespace) -> int:
    """Evaluate one ref and store it, with its identity, as a gate baseline file."""
    from erag_dagster.gate import make_baseline

    log = (lambda m: print(m, file=sys.stderr)) if args.verbose else None
    found = make_baseline(args.retriever, args.output, _gate_settings(args), log=log)
    means = ", ".join(f"{m} {v:.4f}" for m, v in found.aggregate.items())
    print(
        f"wrote baseline {args.output} ({found.retriever.label}, {len(found.query_ids)} queries, "
        f"k={found.identity.k}; {means}; {found.judged_now} pairs answered by the reader, "
        f"{found.from_store} from the store)",
        file=sys.stderr,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="erag-dagster",
        description="Evaluate retrievers by what they do for your RAG reader (eRAG).",
    )
    parser.add_argument("--debug", action="store_true", help=_DEBUG_HELP)
    common = argparse.ArgumentParser(add_help=False)  # --debug after the command name too
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "run", parents=[common], help="materialise every asset on a dataset and print the reports"
    )
    p.add_argument("--dataset", help="dataset spec (default: registry evaluation.dataset)")
    p.add_argument("--registry", help="registry YAML (default: packaged)")
    p.add_argument("--k", type=_count, help="retrieval depth")
    p.add_argument("--label-k", type=_count, help="label the top N documents of each run")
    p.add_argument("--metric", help="downstream metric (em, f1, rougel, accuracy, contains)")
    p.add_argument("--verbose", action="store_true", help=_VERBOSE_RUN_HELP)
    p.add_argument(
        "--full", action="store_true", help="print every cell of every table (default: compact)"
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "retrieve", parents=[common], help="run one registry retriever and write a TREC run"
    )
    p.add_argument("--dataset", required=True)
    p.add_argument("--retriever", required=True, help="registry name or partition key")
    p.add_argument("--k", type=_count, help="hits per query (default: registry evaluation.k)")
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)
    p.add_argument("--output", required=True)
    p.add_argument("--registry")
    p.add_argument("--verbose", action="store_true")
    p.set_defaults(func=cmd_retrieve)

    p = sub.add_parser(
        "evaluate-run", parents=[common], help="score a TREC run against the dataset's qrels"
    )
    p.add_argument("--dataset", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--metrics", required=True, help="e.g. nDCG@10,R@100,P@5,RR,AP")
    p.add_argument("--relevance-level", type=_count, default=1, help="binary measures: label >= N")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_evaluate_run)

    p = sub.add_parser("label", parents=[common], help="eRAG labels for a run with a reader")
    p.add_argument("--dataset", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--reader", help="registry reader name or a reader config YAML")
    p.add_argument("--metric", default="em")
    p.add_argument("--k", type=_count, help="label only the top k of each query")
    p.add_argument("--store", help=_STORE_HELP)
    p.add_argument("--registry")
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)
    p.add_argument("--output", required=True)
    p.add_argument(
        "--executor", choices=["inprocess", "ray"], help="default: registry generation.executor"
    )
    p.add_argument("--ray-address", help="local | auto | ray://HOST:PORT (executor ray)")
    p.set_defaults(func=cmd_label)

    p = sub.add_parser("score", parents=[common], help="list metrics on eRAG labels")
    p.add_argument("--labels", required=True, help="labels parquet or JSON {qid: [label, ...]}")
    p.add_argument("--metrics", required=True, help="e.g. P@5,Success@5,RR,AP,nDCG@10")
    p.add_argument("--compat", choices=["erag"], help="reproduce the reference erag 0.0.1")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser(
        "rerank", parents=[common], help="rerank a run's top-N with the reader (or a cross-encoder)"
    )
    p.add_argument("--dataset", required=True)
    p.add_argument("--run", required=True, help="first-stage TREC run")
    p.add_argument("--top-n", type=_count, default=100, help="first-stage documents rescored")
    p.add_argument("--k", type=_count, default=10, help="documents kept per query")
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)
    p.add_argument("--output", required=True, help="reranked TREC run")
    p.add_argument("--reader", help="registry reader name or partition key (default: first)")
    p.add_argument("--cross-encoder", help="a local Hugging Face cross-encoder folder instead")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N (default: the config's)")
    p.add_argument("--metrics", default="nDCG@10,AP,R@10", help="metrics of the lift report")
    p.add_argument("--relevance-level", type=_count, default=1, help="binary measures: label >= N")
    p.add_argument("--no-report", action="store_true", help="skip the before/after report")
    p.add_argument("--registry")
    p.add_argument("--verbose", action="store_true")
    p.set_defaults(func=cmd_rerank)

    p = sub.add_parser(
        "correlate", parents=[common], help="Table-1 report: labelling methods vs end-to-end"
    )
    p.add_argument("--dataset", required=True)
    p.add_argument("--retrievers", required=True, help="comma-separated registry retrievers")
    p.add_argument("--reader", help="registry reader (default: every registry reader)")
    p.add_argument("--k", type=_count, default=5, help="documents labelled / given end-to-end")
    p.add_argument("--registry")
    p.add_argument("--verbose", action="store_true", help=_VERBOSE_RUN_HELP)
    p.set_defaults(func=cmd_correlate)

    p = sub.add_parser(
        "audit", parents=[common], help="every stored label of a (query, document) pair"
    )
    p.add_argument("--query", required=True)
    p.add_argument("--doc", required=True)
    p.add_argument("--store", help=_STORE_HELP)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser(
        "import-recovery",
        parents=[common],
        help="add the answers of a recovery file (left when the label store stayed locked)",
    )
    p.add_argument("file", help="the <store>.recovery-<time>-<pid>.jsonl file")
    p.add_argument("--store", help=_STORE_HELP)
    p.set_defaults(func=cmd_import_recovery)

    p = sub.add_parser("store", parents=[common], help="label store maintenance")
    store_sub = p.add_subparsers(dest="store_command", required=True, parser_class=_Parser)
    p = store_sub.add_parser(
        "copy",
        parents=[common],
        help="copy every label of one store into another (rows already there are kept)",
    )
    p.add_argument("--from", dest="source", required=True, help="source store (path or URL)")
    p.add_argument("--to", dest="target", required=True, help="target store (created if absent)")
    p.add_argument("--chunk", type=_count, default=10_000, help="rows per transaction")
    p.set_defaults(func=cmd_store_copy)

    def gate_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dataset", help="dataset spec (default: registry evaluation.dataset)")
        p.add_argument("--reader", help="registry reader (default: the registry's first)")
        p.add_argument("--metric", help="downstream metric (default: registry evaluation.metric)")
        p.add_argument(
            "--metrics", help="list metrics, e.g. nDCG@5,RR (default: evaluation.list_metrics)"
        )
        p.add_argument(
            "--k", type=_count, help="documents labelled per query (default: evaluation.label_k)"
        )
        p.add_argument("--store", help=_STORE_HELP)
        p.add_argument("--registry")
        p.add_argument("--verbose", action="store_true", help="labelling progress on stderr")

    p = sub.add_parser(
        "compare",
        parents=[common],
        help="regression gate: is a candidate retriever worse than a baseline? (docs/gate.md)",
    )
    p.add_argument("--baseline", required=True, help=_REF_HELP)
    p.add_argument("--candidate", required=True, help=_REF_HELP)
    gate_options(p)
    p.add_argument(
        "--margin", type=float, default=0.0, help="smallest difference that counts (default 0)"
    )
    p.add_argument(
        "--alpha", type=float, default=0.05, help="level of the Holm-corrected p (default 0.05)"
    )
    p.add_argument(
        "--fail-if",
        choices=["worse", "worse-or-indistinguishable"],
        help="exit 3 when the overall verdict is this",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the result as JSON")
    fmt.add_argument("--markdown", action="store_true", help="print a GitHub markdown summary")
    p.add_argument("--output", help="also write what is printed to this file")
    p.add_argument("--save-candidate", help="write the candidate as a baseline file")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "baseline", parents=[common], help="evaluate a retriever and store it as a gate baseline"
    )
    p.add_argument("--retriever", required=True, help="a run file or a registry retriever")
    p.add_argument("--output", required=True, help="the baseline JSON file")
    gate_options(p)
    p.set_defaults(func=cmd_baseline)
    return parser


_FORCE_HELP = (
    "replace an existing --output file that is not an earlier output of this command "
    "(never one the run reads; docs/safety.md)"
)
_DEBUG_HELP = "on an error, print the traceback too (or set ERAG_DEBUG=1)"
_STORE_HELP = (
    "label store: SQLite file, sqlite:///FILE or postgresql://USER@HOST/DB (password from "
    "PGPASSWORD, never in the URL); default $ERAG_LABEL_STORE, else <storage root>/labels.sqlite"
)
_REF_HELP = (
    "a baseline .json (erag-dagster baseline), a TREC or .parquet run file, or a registry "
    "retriever name"
)
_VERBOSE_RUN_HELP = "show Dagster's own log on the terminal too (always in the run's event log)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the error boundary of the module docstring. Returns the exit status."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    debug = os.environ.get("ERAG_DEBUG", "").strip() not in ("", "0")
    try:
        args = build_parser().parse_args(argv)
        debug = debug or bool(getattr(args, "debug", False))
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print("erag-dagster: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        fault = as_fault(exc)
        if fault is None:
            raise  # not an expected failure: a bug, with its traceback
        if debug:
            traceback.print_exc()
        print(f"erag-dagster: error: {mask_credentials(str(fault))}", file=sys.stderr)
        return fault.exit_code


if __name__ == "__main__":
    sys.exit(main())
