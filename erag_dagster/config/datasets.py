"""The registry's ``datasets:`` section: several evaluation sets in one graph.

.. code-block:: yaml

    datasets:
      sample: sample?spread_questions=30          # a spec string, or a mapping:
      scifact:
        spec: beir:../shared/data/scifact/beir    # relative paths: against the registry's folder
        spread_questions: 100                     # any spec option (data/spec.py), merged in
        reader_labels: false                      # no reader stages (default: false for beir)
        evaluation: {k: 100}                      # overrides of the evaluation section

A dataset name becomes the asset-key prefix of every asset of that dataset
(``scifact/retrieval_run``), so it must be a valid Dagster key part: a letter, then letters,
digits or ``_``. Without the section the registry has one dataset, ``evaluation.dataset``, and
today's unprefixed keys.

``reader_labels``: whether the dataset gets the reader stages (eRAG labels, end-to-end answers,
baselines, Table 1). They need gold answers, which a BEIR collection never has, so the default
is ``false`` for ``beir:`` and ``true`` for every other kind (a dataset whose queries lack
answers is refused by the labeller with one line naming the first such query).

A retriever entry may carry ``datasets: [names]``: it then runs on those datasets only (a run
file belongs to one dataset). This is scope, not content: it is left out of the retriever's
hash, so widening it keeps the partition key. A retriever that builds on a scoped one (hybrid,
rerank) is kept for a dataset only when everything it builds on is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from erag_dagster.core.errors import InputError
from erag_dagster.data.spec import COMMON_OPTIONS, KIND_OPTIONS, parse_spec

__all__ = ["DATASET_NAME_RE", "DatasetEntry", "parse_datasets"]

DATASET_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
#: Names a dataset cannot take: the unprefixed assets and groups of the graph.
RESERVED_NAMES = frozenset({"cross_dataset", "reader_models", "dataset_files", "inputs"})
_ENTRY_KEYS = frozenset({"spec", "reader_labels", "evaluation"})


@dataclass(frozen=True)
class DatasetEntry:
    """One dataset of the registry: its full ``spec`` (options merged, paths absolute),
    whether it gets the reader stages, and its ``evaluation`` overrides."""

    name: str
    spec: str
    reader_labels: bool
    evaluation: dict[str, Any] = field(default_factory=dict)


def parse_datasets(raw: Any, folder: Path, path: str) -> dict[str, DatasetEntry]:
    """The ``datasets`` section of the registry file ``path`` (``folder``: its folder), checked;
    ``{}`` when absent. Errors name the file and the dataset."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        raise InputError(f"{path}: 'datasets' must be a non-empty mapping of name -> spec")
    return {name: _entry(name, value, folder, path) for name, value in raw.items()}


def _entry(name: Any, value: Any, folder: Path, path: str) -> DatasetEntry:
    where = f"{path}: dataset {name!r}"
    if not isinstance(name, str) or not DATASET_NAME_RE.match(name) or name in RESERVED_NAMES:
        raise InputError(
            f"{where}: a dataset name is a letter, then letters, digits or '_' (it prefixes "
            f"asset keys), and not one of {', '.join(sorted(RESERVED_NAMES))}"
        )
    config = {"spec": value} if isinstance(value, str) else value
    if not isinstance(config, dict) or not isinstance(config.get("spec"), str):
        raise InputError(f"{where}: give a spec string, or a mapping with 'spec'")
    parsed = parse_spec(config["spec"])
    options = dict(parsed.options)
    allowed = set(_ENTRY_KEYS) | set(COMMON_OPTIONS) | set(KIND_OPTIONS[parsed.kind])
    for key, option in config.items():
        if key not in allowed:
            raise InputError(
                f"{where} has unknown key {key!r}; known: {', '.join(sorted(allowed))}"
            )
        if key in parsed.options:
            raise InputError(f"{where}: option {key!r} is given in the spec and as a key")
        if key not in _ENTRY_KEYS:
            options[key] = str(option).lower() if isinstance(option, bool) else str(option)
    spec = _spec_string(parsed.kind, parsed.path, options, folder)
    parse_spec(spec)  # the merged options checked as one spec
    reader_labels = config.get("reader_labels", parsed.kind != "beir")
    if not isinstance(reader_labels, bool):
        raise InputError(f"{where}: reader_labels is {reader_labels!r}; it must be true or false")
    overrides = config.get("evaluation") or {}
    if not isinstance(overrides, dict):
        raise InputError(f"{where}: evaluation overrides must be a mapping")
    # Their keys and values: EvaluationConfig.from_mapping(allowed=DATASET_OVERRIDES), in
    # registry.load_registry, where the shared evaluation section they override is known.
    return DatasetEntry(name, spec, reader_labels, dict(overrides))


def _spec_string(kind: str, where: Path | None, options: dict[str, str], folder: Path) -> str:
    """``kind[:PATH][?options]`` with PATH made absolute against ``folder``."""
    text = kind
    if where is not None:
        text += ":" + quote(str((folder / where.expanduser()).resolve()), safe="/:~")
    if options:
        text += "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in options.items())
    return text
