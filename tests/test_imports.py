"""The shape of the package: every module imports on its own, and the import contracts hold.

The contracts (``[tool.importlinter]`` in pyproject.toml: the layers of docs/ARCHITECTURE.md, no
cycle among the modules of any package, no Dagster in the evaluation logic, independent
backends) are checked by ``lint-imports``, which ``make lint`` runs; this test runs it too, so a
plain ``pytest`` sees an upward import or a cycle, with the offending import named.
"""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import erag_dagster

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# Imports each named module in a process where no erag_dagster module is loaded yet (the
# third-party libraries stay loaded: they are not what is checked), so a module that works only
# when another one happened to be imported first fails here.
_IMPORT_EACH = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "erag_dagster" or m.startswith("erag_dagster.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name + ": " + traceback.format_exc().strip().splitlines()[-1])
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def _modules() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.walk_packages(erag_dagster.__path__, prefix="erag_dagster.")
        if ".sample" not in info.name
    )


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def test_every_module_imports_on_its_own() -> None:
    modules = _modules()
    assert "erag_dagster.readers.transformers_reader" in modules and len(modules) > 80
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, *modules],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def test_import_contracts_hold() -> None:
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]
    assert "0 broken" in done.stdout
    # every contract of pyproject.toml was checked
    for contract in ("Layers of docs/ARCHITECTURE.md", "No import cycle", "no Dagster imports"):
        assert contract in done.stdout


#: Libraries only a step that runs a model or computes statistics needs (about 2.5 s of CPU to
#: import together here): the Dagster definitions and the CLI load without them, so every run
#: process, code-server reload and CLI call that runs no such step does not pay for them.
HEAVY = ("torch", "transformers", "sklearn", "scipy", "pyserini")


def test_definitions_and_cli_load_without_the_heavy_libraries() -> None:
    code = (
        "import sys, erag_dagster.definitions, erag_dagster.cli; "
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "", f"imported at load: {done.stdout.strip()}"


#: What Dagster keeps to itself: its underscore modules and two copy hooks of its classes.
_PRIVATE_ATTRIBUTES = ("_with_updated_values", "dagster_internal_init")


def _private_dagster_uses(path: Path) -> list[str]:
    """``file:line name`` of each import of a private Dagster module (``dagster._…``, also
    named in a string as ``importlib.import_module`` takes it) and each use of one of
    :data:`_PRIVATE_ATTRIBUTES` in ``path``."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Attribute):
            names = [node.attr] if node.attr in _PRIVATE_ATTRIBUTES else []
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if node.value.startswith("dagster._") else []
        found += [
            f"{path}:{node.lineno} {name}"
            for name in names
            if name.startswith("dagster._") or name in _PRIVATE_ATTRIBUTES
        ]
    return found


def test_no_module_uses_dagster_private_api(tmp_path: Path) -> None:
    """Dagster's public API only (issue 31 item 5): no module under erag_dagster imports
    ``dagster._…`` or calls ``_with_updated_values`` / ``dagster_internal_init``, so the
    package runs on the Dagster releases pyproject.toml's range names."""
    files = sorted((ROOT / "erag_dagster").rglob("*.py"))
    assert len(files) > 80
    found = [use for path in files for use in _private_dagster_uses(path)]
    assert found == [], found
    # the scan sees each kind of use it must refuse
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from dagster._core.utils import make_new_backfill_id\nimport dagster._cli\n"
        "x = y._with_updated_values({})\nz = importlib.import_module('dagster._utils')\n"
        "import dagster, dagster_shared\nfrom dagster import AssetKey\n"
    )
    assert [use.split(" ")[1] for use in _private_dagster_uses(probe)] == [
        "dagster._core.utils", "dagster._cli", "_with_updated_values", "dagster._utils",
    ]  # fmt: skip
