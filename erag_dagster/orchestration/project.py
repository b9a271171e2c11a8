"""The eRAG graphs of a team's Dagster project, built from a terminal or CI.

``erag-dagster run --defs <folder>`` builds what the eRAG component instances under ``folder`` (a
``defs/`` folder of a Dagster project, or one instance's folder) declare, with the project's own
assets they read, and prints the same verdict and reports as ``erag-dagster run``, then the path of
the HTML page. The project is loaded as Dagster loads it (``dg``'s :class:`dagster.ComponentTree`:
the ``pyproject.toml`` with ``[tool.dg]`` or the ``dg.toml`` above ``folder``); each instance is the
one its ``defs.yaml`` builds (:attr:`erag_dagster.ERagEvaluation.built`), and its graph is
materialised as the main job materialises the packaged one
(:func:`erag_dagster.orchestration.pipeline.materialize_all`: the inputs observed, then every step
and partition in dependency order, each a run recorded in ``$DAGSTER_HOME``'s instance, the one ``dg
dev`` shows).

Edge cases: a folder outside any Dagster project, or one without an eRAG instance, is one
:class:`~erag_dagster.core.errors.InputError` line; an error while the project loads is the eRAG
error it holds (one line, its ``defs.yaml:line``), else Dagster's message's first line. The
project's package is imported from its ``src/`` folder (or its root) when it is not
installed in this environment.
"""

from __future__ import annotations

import sys
from pathlib import Path

from erag_dagster.core.errors import InputError
from erag_dagster.orchestration.component import ERagEvaluation
from erag_dagster.orchestration.pipeline import Graph
from erag_dagster.orchestration.resources.keys import prefixed_name

__all__ = ["project_graphs"]

_CONFIG_FILES = ("dg.toml", "pyproject.toml")


def _project_root(folder: Path) -> Path:
    """The nearest folder at or above ``folder`` with a ``dg.toml``, or a ``pyproject.toml``
    that has a ``[tool.dg]`` table."""
    for candidate in [folder, *folder.parents]:
        if (candidate / "dg.toml").is_file():
            return candidate
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and "[tool.dg" in pyproject.read_text(encoding="utf-8"):
            return candidate
    raise InputError(
        f"{folder}: not inside a Dagster project (no dg.toml, nor a pyproject.toml with "
        "[tool.dg], in it or above it); give the defs folder of your project"
    )


def _erag_error(exc: BaseException) -> InputError | None:
    """The erag InputError an exception raised while loading holds (its causes walked)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, InputError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def project_graphs(folder: str | Path) -> list[Graph]:
    """The eRAG graphs of the component instances declared at or under ``folder`` (module
    docstring), in the order the project declares them."""
    import dagster as dg

    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder (give your project's defs folder)")
    root = _project_root(folder)
    for path in (root / "src", root):
        if path.is_dir() and str(path) not in sys.path:
            sys.path.insert(0, str(path))
    try:
        tree = dg.ComponentTree.for_project(folder)
        defs = tree.build_defs()
        instances = tree.get_all_components(of_type=ERagEvaluation)
    except Exception as exc:
        found = _erag_error(exc)
        if found is not None:
            raise InputError(str(found)) from None
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(f"{root}: the Dagster project did not load: {first}") from None
    graphs = []
    for instance in instances:
        built = instance.built
        if built is None or not built.where.resolve().is_relative_to(folder):
            continue
        settings = dict(defs.resources or {})[prefixed_name("settings", built.key_prefix)]
        graphs.append(Graph(defs, built.registry, settings, built.key_prefix))
    if not graphs:
        raise InputError(
            f"{folder}: no eRAG component instance here (a defs.yaml with type: "
            "erag_dagster.ERagEvaluation)"
        )
    return graphs
