"""The regression-gate commands of ``erag-dagster`` (docs/gate.md): ``compare``, ``baseline``."""

from __future__ import annotations

import argparse
import sys

from erag_dagster.cli.common import metrics_arg


def _gate_settings(args: argparse.Namespace):
    from erag_dagster.gate import GateSettings

    return GateSettings(
        dataset=args.dataset or "",
        reader=args.reader or "",
        downstream_metric=args.metric or "",
        metrics=tuple(metrics_arg(args.metrics)) if args.metrics else (),
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
