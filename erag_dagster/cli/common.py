"""What the ``erag-dagster`` commands share: a dataset or registry loaded as the API loads it,
the files a command reads (for the ``--output`` guard), the ``--metrics`` list, a printed table.
"""

from __future__ import annotations

from pathlib import Path

from erag_dagster.core.errors import InputError


def load_dataset(spec: str):
    """A dataset, loaded as the API loads it (:func:`erag_dagster.api.load_dataset_checked`)."""
    from erag_dagster.api import load_dataset_checked

    return load_dataset_checked(spec)


def load_registry(path: str | None):
    from erag_dagster.api import load_registry_file

    return load_registry_file(path)


def registry_inputs(registry) -> list[tuple[str, str | None]]:
    """The files a loaded registry reads: itself and every ``run_file`` it names."""
    reads: list[tuple[str, str | None]] = [("the registry", registry.path)]
    for entry in registry.retrievers.values():
        if entry.config.get("kind") == "run_file":
            reads.append((f"run_file {entry.name!r} of the registry", entry.config.get("path")))
    return reads


def dataset_inputs(spec: str) -> list[tuple[str, Path]]:
    """The files a dataset spec reads (none when the spec is bad: loading it says why)."""
    from erag_dagster.data.loaders import dataset_source_files

    try:
        return [("a dataset file", path) for path in dataset_source_files(spec)]
    except Exception:  # the spec's own error comes, one line, from load_dataset
        return []


def metrics_arg(text: str) -> list[str]:
    items = [m.strip() for m in text.split(",") if m.strip()]
    if not items:
        raise InputError("--metrics is empty; give a comma-separated list such as nDCG@10,R@100")
    return items


def print_table(frame, floatfmt: str = ".4f") -> None:
    from erag_dagster.reports.tables import format_table

    print(format_table(frame, floatfmt=floatfmt))
