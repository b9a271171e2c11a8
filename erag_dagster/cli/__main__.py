"""``python -m erag_dagster.cli``: the console script :func:`erag_dagster.cli.main`."""

from __future__ import annotations

import sys

from erag_dagster.cli import main

if __name__ == "__main__":
    sys.exit(main())
