#!/usr/bin/env python3
"""Re-measure the default run: rewrite ``expected`` in ``reproductions/default_run.yaml`` from a
real run's report assets, and its answers in ``reproductions/answers/default_run.jsonl``.

When the default run changes (its readers, metric, data or a report), its figures move. This
reads every ``report_asset`` entry's value from the storage root of a real ``erag-dagster run``
(the rule ``tests/test_reproductions.py`` checks with), rounds it to the entry's ``digits`` and
rewrites that entry's ``expected:`` line in place (comments and order kept), printing one line
per entry that moved. The quoted phrases in docs/default-run.md (and the README) must then be
edited to the new digits: ``scripts/check_readme_figures.py`` lists every phrase that no longer
matches. Without ``--write`` nothing is rewritten (the lines are printed only).

With ``--write`` it also exports every reader output of that run's label store (eRAG answers,
end-to-end answers, P(yes) of the LLM annotation; one JSON line per generation, the recovery
file format that ``erag-dagster import-recovery`` checks line by line) to
``reproductions/answers/default_run.jsonl``. ``make test`` imports that file into the label store
of its own default run, so the run computes every report from these answers without generating
them again, and ``tests/test_determinism.py`` has this machine's readers answer a sample of them
anew: a CPU or library build that answers differently fails there.

    make run   # or: DAGSTER_HOME=... erag-dagster run
    .venv/bin/python scripts/refresh_default_run_figures.py .dagster_home/storage/erag [--write]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reproductions import STORAGE_ENV, Conditions, load_reproductions

FIGURES = Path(__file__).resolve().parents[1] / "reproductions" / "default_run.yaml"
ANSWERS = Path(__file__).resolve().parents[1] / "reproductions" / "answers" / "default_run.jsonl"


def export_answers(storage: Path, target: Path = ANSWERS) -> int:
    """Every generation of ``storage``'s label store as recovery-file lines in ``target``
    (sorted by key, so a re-export of the same answers is the same file); returns the count."""
    import polars as pl

    from erag_dagster.labels.recovery import recovery_text
    from erag_dagster.labels.store import open_store
    from erag_dagster.labels.tables import GENERATIONS

    store = open_store(storage / "labels.sqlite", read_only=True)
    pages = [row for page in store.iter_rows(GENERATIONS) for row in page]
    rows = pl.DataFrame(pages, schema=GENERATIONS.schema, orient="row").sort("generation_key")
    rows = rows.with_columns(
        pl.lit(None, dtype=pl.String).alias("producer_run_id"), pl.lit(0.0).alias("gen_seconds")
    )
    readers = store.reader_records(rows.get_column("reader_fingerprint").unique())
    # reader records and per-line digests: import-recovery verifies both (labels/recovery.py)
    target.write_text(recovery_text(rows, readers), encoding="utf-8")
    return rows.height


def rewrite_expected(text: str, entry_id: str, value: str) -> str:
    """``text`` with the ``expected:`` line of the entry ``entry_id`` set to ``value``."""
    pattern = re.compile(
        rf"(- id: {re.escape(entry_id)}\n(?:(?!  - id:).*\n)*?    expected: )[^\n]*"
    )
    new, count = pattern.subn(lambda m: m.group(1) + value, text, count=1)
    if count != 1:
        raise ValueError(f"{FIGURES.name}: no expected line for entry {entry_id}")
    return new


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("storage", type=Path, help="the run's storage root (its $ERAG_STORAGE)")
    parser.add_argument("--write", action="store_true", help="rewrite default_run.yaml")
    args = parser.parse_args()
    os.environ[STORAGE_ENV] = str(args.storage.resolve())
    conditions = Conditions(shared_data=Path("."))
    text = FIGURES.read_text(encoding="utf-8")
    moved = 0
    for entry in load_reproductions():
        if Path(entry.file).name != FIGURES.name or entry.condition.get("kind") != "report_asset":
            continue
        measured = conditions.value(entry)
        digits = entry.digits if entry.digits is not None else 3
        value = f"{measured:.{digits}f}"
        if abs(float(value) - entry.expected) > 0:
            moved += 1
            print(f"{entry.id}: {entry.expected} -> {value}")
            text = rewrite_expected(text, entry.id, value)
    if args.write:
        FIGURES.write_text(text, encoding="utf-8")
        answers = export_answers(args.storage)
        print(f"{answers} answers written to {ANSWERS.relative_to(FIGURES.parents[1])}")
    print(f"{moved} figure(s) moved" + ("; default_run.yaml rewritten" if args.write else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
