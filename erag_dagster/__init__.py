"""erag-dagster: evaluate retrievers by what they do for a RAG reader (eRAG), as Dagster assets.

The Python API (:mod:`erag_dagster.api`): :func:`evaluate` (retrievers x reader -> reports and
the verdict), :func:`label` (eRAG labels of one run) and :func:`score` (list metrics of one
labelled run), with the errors they raise (:class:`InputError`, :class:`EnvironmentFault`).
The Dagster component :class:`ERagEvaluation` (``type: erag_dagster.ERagEvaluation`` in a
``defs.yaml``) is one more such name. They are imported on first use, so ``import erag_dagster``
loads neither Dagster nor torch.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["ERagEvaluation", "EnvironmentFault", "InputError", "evaluate", "label", "score"]

# The names' types are in __init__.pyi (a static import here would put the API in the import
# graph of every module that imports the package, e.g. for its notices).
_LAZY = {
    "evaluate": "erag_dagster.api",
    "label": "erag_dagster.api",
    "score": "erag_dagster.api",
    "InputError": "erag_dagster.core.errors",
    "EnvironmentFault": "erag_dagster.core.errors",
    # the Dagster component (``type: erag_dagster.ERagEvaluation`` in a defs.yaml; dg finds it
    # through the package's dagster_dg_cli.registry_modules entry point and ``dir()``)
    "ERagEvaluation": "erag_dagster.orchestration.component",
}


def __getattr__(name: str) -> Any:
    """The API's names, imported on first access (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'erag_dagster' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
