"""The reference pages document every command, option and registry key, once.

``docs/cli.md`` has one ``## `erag-dagster <command>` `` section per leaf command of the real
argparse parser (:func:`erag_dagster.cli.build_parser`), whose table rows name each of its
options; ``docs/registry.md`` has one section per registry section (and retriever kind) whose
table rows name each key the validators accept (:mod:`erag_dagster.config.registry`,
:mod:`erag_dagster.readers.spec`, :mod:`erag_dagster.labels.executor`,
:mod:`erag_dagster.config.datasets`). A command, option or key added to the code without a row
fails here, and so does a row for something the code no longer has. A documented item is the
first backticked word of a table row's first cell (``| `--k N` | ...`` documents ``--k``).

The strict site build (``mkdocs build --strict``: links, anchors, nav) runs in ``make lint``.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

import pytest

from erag_dagster.cli import build_parser
from erag_dagster.config import registry as reg
from erag_dagster.config.datasets import _ENTRY_KEYS
from erag_dagster.config.evaluation import DATASET_OVERRIDES, FIELDS
from erag_dagster.data.spec import COMMON_OPTIONS, KIND_OPTIONS
from erag_dagster.labels import executor
from erag_dagster.readers import spec as reader_spec

DOCS = Path(__file__).resolve().parents[1] / "docs"
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
ROW = re.compile(r"^\|\s*`([^`]+)`")


def sections(page: Path) -> dict[str, list[list[str]]]:
    """Heading text -> the table rows under it (each row's cells, stripped), up to the next
    heading of any level; a heading that occurs twice is a failure of the page."""
    found: dict[str, list[list[str]]] = {}
    current: list[list[str]] | None = None
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        heading = None if in_code else HEADING.match(line)
        if heading:
            title = heading.group(2)
            assert title not in found, f"{page.name}: heading {title!r} occurs twice"
            current = found[title] = []
        elif current is not None and not in_code and ROW.match(line):
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return found


def documented(rows: list[list[str]]) -> list[str]:
    """The item each row documents: the first word of the first backticked text of its first
    cell, plus further backticked option spellings in that cell (`-h`, `--help`)."""
    items = []
    for row in rows:
        for code in re.findall(r"`([^`]+)`", row[0]):
            items.append(code.split()[0])
    return items


def once(items: list[str], where: str) -> set[str]:
    """The items as a set, failing on any documented twice in one section."""
    twice = sorted(k for k, n in Counter(items).items() if n > 1)
    assert not twice, f"{where}: documented more than once: {', '.join(twice)}"
    return set(items)


# --- the command line -----------------------------------------------------------------------


def leaf_commands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> dict[str, argparse.ArgumentParser]:
    """``"store copy"`` -> its parser, for every command that has no subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            leaves: dict[str, argparse.ArgumentParser] = {}
            for name, sub in action.choices.items():
                leaves.update(leaf_commands(sub, (*prefix, name)))
            return leaves
    return {" ".join(prefix): parser}


COMMON_OPTIONS_OF_EVERY_COMMAND = {"--debug", "--help"}


def options(parser: argparse.ArgumentParser) -> set[str]:
    """Each argument's name (its first long option, else its first option, else the
    positional's dest), without the options every command has."""
    names = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            longs = [o for o in action.option_strings if o.startswith("--")]
            names.add((longs or action.option_strings)[0])
        else:
            names.add(action.dest)
    return names - COMMON_OPTIONS_OF_EVERY_COMMAND


CLI = sections(DOCS / "cli.md")
COMMANDS = leaf_commands(build_parser())
COMMAND_HEADING = re.compile(r"^`erag-dagster (.+)`$")


def test_cli_page_has_one_section_per_command() -> None:
    headed = [m.group(1) for title in CLI if (m := COMMAND_HEADING.match(title))]
    assert {"run", "label", "store copy"} <= set(COMMANDS)  # the walk reaches nested commands
    assert sorted(headed) == sorted(COMMANDS), (
        f"docs/cli.md sections {sorted(headed)} != erag-dagster commands {sorted(COMMANDS)}"
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_page_documents_every_option_of(command: str) -> None:
    title = f"`erag-dagster {command}`"
    assert title in CLI, f"docs/cli.md has no section {title}"
    rows = once(documented(CLI[title]), f"docs/cli.md {title}")
    assert rows == options(COMMANDS[command]), (
        f"docs/cli.md {title}: documented {sorted(rows)}, "
        f"parser has {sorted(options(COMMANDS[command]))}"
    )


def test_cli_page_documents_the_options_of_every_command() -> None:
    root = build_parser()
    every = {o for a in root._actions for o in a.option_strings}
    assert {"--debug", "--help"} <= every
    rows = once(documented(CLI["Options of every command"]), "docs/cli.md common options")
    assert rows >= COMMON_OPTIONS_OF_EVERY_COMMAND
    for command, parser in COMMANDS.items():  # the options left out per command are real
        present = {o for a in parser._actions for o in a.option_strings}
        assert present >= COMMON_OPTIONS_OF_EVERY_COMMAND, command


# --- the registry ---------------------------------------------------------------------------

REGISTRY = sections(DOCS / "registry.md")


def keys_in(title: str) -> set[str]:
    assert title in REGISTRY, f"docs/registry.md has no section {title!r}"
    return once(documented(REGISTRY[title]), f"docs/registry.md {title!r}")


def test_registry_page_documents_the_top_level_sections() -> None:
    assert keys_in("Top-level sections") == set(reg.TOP_LEVEL_KEYS)


def test_registry_page_documents_every_retriever_kind_and_key() -> None:
    assert keys_in("Keys every retriever takes") == reg.OPERATIONAL_KEYS | reg.SCOPE_KEYS
    kinds = [m.group(1) for t in REGISTRY if (m := re.match(r"^`kind: (\w+)`$", t))]
    assert sorted(kinds) == sorted(reg.RETRIEVER_KINDS)
    for kind in reg.RETRIEVER_KINDS:
        assert keys_in(f"`kind: {kind}`") == reg.RETRIEVER_KEYS[kind], kind


def reader_backends(key: str) -> set[str]:
    """The backends whose entries accept ``key`` (the rule of readers/spec.py)."""
    return {b for b in reader_spec.BACKENDS if key in reader_spec.backend_keys(b)}


def test_registry_page_documents_every_reader_key_and_its_backends() -> None:
    accepted = reader_spec.ALL_KEYS - {"name"}
    assert keys_in("Readers") == accepted
    for row in REGISTRY["Readers"]:
        key, column = documented([row])[0], row[1]
        stated = set(reader_spec.BACKENDS) if column == "all" else set(column.split(", "))
        assert stated == reader_backends(key), f"docs/registry.md reader key {key}: {column}"


def test_registry_page_documents_every_evaluation_key() -> None:
    # EvaluationConfig's settings, each with its one default (config/evaluation.py).
    assert keys_in("Evaluation") == set(FIELDS)
    per_dataset = {documented([r])[0] for r in REGISTRY["Evaluation"] if r[1] == "yes"}
    assert per_dataset == DATASET_OVERRIDES
    assert {r[1] for r in REGISTRY["Evaluation"]} == {"yes", "no"}


def test_registry_page_documents_every_generation_key() -> None:
    assert keys_in("Generation") == set(executor.KEYS)


def test_registry_page_documents_every_dataset_key() -> None:
    spec_options = set(COMMON_OPTIONS).union(*KIND_OPTIONS.values())
    assert keys_in("Datasets") == set(_ENTRY_KEYS) | spec_options


def test_readme_is_a_first_page() -> None:
    """The README stays a first page a new user reads through (docs/ hold the rest)."""
    lines = (DOCS.parent / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the limit is 150"
