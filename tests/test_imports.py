"""The shape of the package: every module imports on its own, and the import contracts hold.

The contracts (``[tool.importlinter]`` in pyproject.toml: the layers of docs/ARCHITECTURE.md, no
cycle among the modules of any package, no Dagster in the evaluation logic, independent
backends) are checked by ``lint-imports``, which ``make lint`` runs; this test runs it too, so a
plain ``pytest`` sees an upward import or a cycle, with the offending import named.
"""

from __future__ import annotations

import ast
import os
import pkgutil
import re
import subprocess
import sys
import tomllib
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
        "import sys, erag_dagster.orchestration.definitions, erag_dagster.cli; "
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


# -- imports by name ----------------------------------------------------------------------------

#: A module name in a string: ``erag_dagster.a.b``, or ``.b`` relative to the module's package,
#: optionally ``:attribute`` (the ``"module:function"`` form).
_NAMED_MODULE = re.compile(r"^(erag_dagster(?:\.\w+)+|\.\w+(?:\.\w+)*)(?::\w+)?$")

#: The modules that import a computed name (never checkable by lint-imports): the package's lazy
#: public names (its root), a reader backend picked by readers/backends.BACKENDS (within
#: readers/), the packaged Gemma reader's chunk packages (third-party).
_DYNAMIC_IMPORTERS = {
    "erag_dagster/__init__.py",
    "erag_dagster/readers/factory.py",
    "erag_dagster/readers/models.py",
}


def _layers(contract_id: str) -> list[set[str]]:
    """The layers of one ``[tool.importlinter]`` layers contract, highest first."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["id"] == contract_id)
    return [set(re.split(r"\s*[|:]\s*", layer.strip())) for layer in contract["layers"]]


def _rank(layers: list[set[str]], name: str) -> int | None:
    """Index of the layer holding ``name`` (higher = lower in the house)."""
    return next((i for i, layer in enumerate(layers) if name in layer), None)


def _not_imports(tree: ast.Module) -> set[int]:
    """The string constants that name no import: docstrings and logger names."""
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            ids.add(id(body[0].value))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "getLogger":
            ids.update(id(arg) for arg in node.args)
    return ids


def _named_imports(path: Path) -> list[tuple[str, str]]:
    """(string, the module it names, absolute) for every module name written in a string of
    ``path`` (not a docstring or a logger's name), plus ``("<dynamic>", call)`` for an
    ``import_module`` or ``__import__`` call whose argument is not such a string."""
    tree = ast.parse(path.read_text())
    docs = _not_imports(tree)
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module.rpartition(".")[0] if not module.endswith("__init__") else module
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            match = _NAMED_MODULE.match(node.value)
            if match:
                name = match.group(1)
                found.append((node.value, package + name if name.startswith(".") else name))
        if isinstance(node, ast.Call):
            fn = node.func
            called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if called in {"import_module", "__import__"}:
                first = node.args[0] if node.args else None
                if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                    found.append(("<dynamic>", ast.unparse(node)))
    return found


def _upward(importer: str, target: str) -> str | None:
    """Why ``importer`` naming ``target`` breaks a layers contract, or ``None``."""
    a, b = importer.split("."), target.split(".")
    if len(b) < 2 or b[0] != "erag_dagster":
        return None
    contracts = [("layers", 1), ("orchestration-layers", 2), ("core-layers", 2)]
    for contract_id, depth in contracts:
        layers = _layers(contract_id)
        if depth == 2 and (
            len(a) < 3 or len(b) < 3 or a[1] != b[1] or a[1] != contract_id.split("-")[0]
        ):
            continue
        ra, rb = _rank(layers, a[depth]), _rank(layers, b[depth])
        if ra is not None and rb is not None and rb < ra:
            return f"{importer} names {target}, a layer above it ({contract_id})"
    return None


def test_no_string_import_crosses_a_layer_upward(tmp_path: Path) -> None:
    """A module named in a string (``"module:function"``, ``importlib.import_module("…")``)
    is an import lint-imports cannot see: none may name a higher layer of the contracts, and
    an import of a computed name is allowed only in :data:`_DYNAMIC_IMPORTERS`."""
    problems = []
    for path in sorted((ROOT / "erag_dagster").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        importer = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for text, target in _named_imports(path):
            if text == "<dynamic>":
                if rel not in _DYNAMIC_IMPORTERS:
                    problems.append(f"{rel}: imports a computed name: {target}")
            elif rel != "erag_dagster/__init__.py" and (why := _upward(importer, target)):
                problems.append(f"{rel}: {why}")
    assert problems == [], "\n".join(problems)
    # the scan sees each kind of use it must refuse
    probe = ROOT / "erag_dagster" / "metrics" / "_probe_upward.py"
    try:
        probe.write_text(
            'COMPUTE = "erag_dagster.evaluation.steps:decide"\nREL = ".x"\n'
            "def f(m):\n    return importlib.import_module(m)\n"
        )
        named = _named_imports(probe)
        assert ("erag_dagster.evaluation.steps:decide", "erag_dagster.evaluation.steps") in named
        assert any(text == "<dynamic>" for text, _ in named)
        assert _upward("erag_dagster.metrics._probe_upward", "erag_dagster.evaluation.steps")
        assert _upward("erag_dagster.core.errors", "erag_dagster.core.input_files")
        assert not _upward("erag_dagster.evaluation.steps", "erag_dagster.metrics.names")
    finally:
        probe.unlink()
