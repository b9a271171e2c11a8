"""The regression-gate commands of ``erag-dagster`` (docs/gate.md): ``compare``, ``baseline``.

Both follow the one output rule (:func:`erag_dagster.core.output_guard.guard_output`) for every file
they write — ``--output`` and ``--save-candidate`` — checked before any work: never a file the
run reads (the label store, a ref, the registry and its run files, the dataset), never a
stranger's file without ``--force``. ``--save-candidate`` is written only after the gate
passed. Progress goes to stderr while they work (:class:`~erag_dagster.gate.heartbeat.
Heartbeat`: at least every 10 s, at most one line per 3 s; every line with ``--verbose``).
"""

from __future__ import annotations

import argparse
import sys


def _gate_settings(args: argparse.Namespace):
    from erag_dagster.gate import GateSettings

    return GateSettings(
        dataset=args.dataset,
        metric=args.metric,
        list_metrics=args.metrics,
        label_k=args.k,
        reader=args.reader or "",
        store=args.store or "",
        registry=args.registry or "",
        reference=args.reference,
        drop_unknown_queries=bool(args.drop_unknown_queries),
    )


def _heartbeat(args: argparse.Namespace, what: str):
    from erag_dagster.gate.heartbeat import Heartbeat

    def write(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return Heartbeat(write, what, verbose=bool(args.verbose))


def _guard_outputs(args: argparse.Namespace, settings) -> None:
    """``--output`` and ``--save-candidate`` under the output rule, before any work; the two
    may not name the same file."""
    from erag_dagster.core.output_guard import guard_output
    from erag_dagster.gate.compare import gate_inputs

    reads = gate_inputs(settings, [args.baseline, args.candidate])
    if args.output:
        guard_output(args.output, "compare", reads, force=args.force)
    if args.save_candidate:
        also = [*reads, ("the --output file", args.output)] if args.output else reads
        guard_output(
            args.save_candidate, "baseline", also, force=args.force, option="--save-candidate"
        )


def _write_report(path: str, text: str) -> None:
    from erag_dagster.core.output_guard import writing_output

    with writing_output(path, "compare") as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")


def cmd_compare(args: argparse.Namespace) -> int:
    """The regression gate (docs/gate.md): exit 3 when ``--fail-if`` fails it."""
    from erag_dagster.gate import EXIT_GATE_FAILED, GateRule, compare, save_baseline
    from erag_dagster.gate.escape import shown
    from erag_dagster.gate.render import cannot_decide_report, to_json, to_markdown, to_text
    from erag_dagster.gate.verdict import GateCannotDecide, gate_failure

    rule = GateRule(margin=args.margin, alpha=args.alpha)
    settings = _gate_settings(args)
    _guard_outputs(args, settings)
    require = bool(args.fail_if) and not args.allow_underpowered
    try:
        with _heartbeat(args, "compare") as log:
            result = compare(args.baseline, args.candidate, settings, rule, log=log,
                             require_power=require)  # fmt: skip
    except GateCannotDecide as exc:
        fmt = "json" if args.json else "markdown" if args.markdown else "text"
        text = cannot_decide_report(exc.power, args.baseline, args.candidate, fmt)
        print(text)
        if args.output:
            _write_report(args.output, text)
        failure = gate_failure("indistinguishable", exc.power, args.fail_if)
        print(f"erag-dagster: gate failed: {failure}", file=sys.stderr)
        return EXIT_GATE_FAILED
    text = to_json(result) if args.json else to_markdown(result) if args.markdown else None
    text = text if text is not None else to_text(result)
    print(text)
    if args.output:
        _write_report(args.output, text)
    assert result.power is not None
    failure = gate_failure(result.verdict, result.power, args.fail_if, args.allow_underpowered)
    if failure:
        if args.save_candidate:
            print(
                f"erag-dagster: the candidate was not saved to {shown(args.save_candidate)}: "
                "the gate failed",
                file=sys.stderr,
            )
        print(f"erag-dagster: gate failed: {failure}", file=sys.stderr)
        return EXIT_GATE_FAILED
    if args.save_candidate:
        save_baseline(result.candidate, args.save_candidate, option="--save-candidate")
        print(f"saved the candidate as a baseline: {shown(args.save_candidate)}", file=sys.stderr)
    return 0


def cmd_baseline(args: argparse.Namespace) -> int:
    """Evaluate one ref and store it, with its identity, as a gate baseline file."""
    from erag_dagster.gate import make_baseline
    from erag_dagster.gate.escape import shown

    with _heartbeat(args, "baseline") as log:
        found = make_baseline(args.retriever, args.output, _gate_settings(args), log=log,
                              force=args.force)  # fmt: skip
    means = ", ".join(f"{m} {v:.4f}" for m, v in found.aggregate.items())
    print(
        f"wrote baseline {shown(args.output)} ({shown(found.retriever.label)}, "
        f"{len(found.query_ids)} queries, "
        f"k={found.identity.k}; {means}; {found.judged_now} pairs answered by the reader, "
        f"{found.from_store} from the store)",
        file=sys.stderr,
    )
    if found.left_out:
        from erag_dagster.gate.compare import left_out_note

        print(f"erag-dagster: note: {shown(left_out_note('run', found))}", file=sys.stderr)
    return 0
