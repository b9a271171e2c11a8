#!/usr/bin/env python3
"""Check that README.md or a docs page quotes every figure of ``reproductions/*.yaml`` with the
same digits.

For each entry with a ``readme`` phrase: the phrase (whitespace runs and line breaks compared as
one space, U+2212 as ``-``) must occur in README.md or in one page of the docs site
(``docs/**/*.md``) and contain the entry's expected value printed with ``digits`` decimals.
Prints one line per mismatch and exits 1, else prints a one-line summary and exits 0. Run from
anywhere:

    .venv/bin/python scripts/check_readme_figures.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reproductions import load_reproductions, quoting_pages, readme_mismatches


def main() -> int:
    try:
        entries = load_reproductions()
    except ValueError as error:
        print(f"reproductions: {error}", file=sys.stderr)
        return 2
    pages = quoting_pages()
    problems = readme_mismatches(entries, pages)
    for line in problems:
        print(line, file=sys.stderr)
    quoted = sum(e.readme is not None for e in entries)
    if problems:
        return 1
    print(
        f"README.md and {len(pages) - 1} docs pages quote all {quoted} quoted figures of "
        f"{len(entries)} reproduction entries"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
