"""The Ray cases (``tests/ray_cases.py``) in a pytest process of their own.

Importing ``ray`` into the process that runs the rest of the suite made the interpreter crash
later, in garbage collection while Dagster built definitions ("Fatal Python error:
Segmentation fault", in ``test_automation``; reproduced with ``ray_cases`` only collected, and
gone when it was not). So ray is imported only in this child process. The cases keep their own
``slow`` markers: the outer run's ``-m`` expression is passed on.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ray_cases_pass_in_their_own_process(request: pytest.FixtureRequest) -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"]
    markexpr = request.config.getoption("markexpr")
    if markexpr:
        command += ["-m", markexpr]
    command.append(str(REPO / "tests" / "ray_cases.py"))
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1800)
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    summary = done.stdout.strip().splitlines()[-1]
    assert re.search(r"\b\d+ passed\b", summary) and "failed" not in summary, tail
