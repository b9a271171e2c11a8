"""The registry of retriever and reader configs, and the partition keys their content names.

The registry is a YAML file (default: ``erag_dagster/registry.yaml`` shipped in the package;
``$ERAG_REGISTRY`` or an explicit path overrides it). A config's partition key is
``<name>-<first 8 hex of sha256(canonical JSON of the config)>``, where operational keys that do
not change results (:data:`OPERATIONAL_KEYS`) are left out of the hash and a hybrid's hash covers
the configs it fuses. Editing a config thus makes a new partition and keeps the old one as history.

Retrievers that name other things hash what they name, not the name: a ``run_file``'s hash holds
the sha256 of the file's bytes (not its path: a moved file keeps its partition, an edited one gets
a new partition); a ``rerank``'s holds the hash of its ``first_stage`` and of its scorer (the
reader config's hash, or the sha256 of every file of a cross-encoder folder). Relative paths are
resolved against the registry file's folder.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from erag_dagster.config.datasets import DatasetEntry, parse_datasets
from erag_dagster.config.evaluation import DATASET_OVERRIDES, EvaluationConfig
from erag_dagster.core.errors import InputError, where
from erag_dagster.core.hashing import sha256_text
from erag_dagster.core.input_files import load_yaml, yaml_key_lines
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.readers.spec import ReaderSpec, refuse_secrets
from erag_dagster.retrieval.kinds import KINDS
from erag_dagster.retrieval.kinds.asset import ASSET_KEY_PART as ASSET_KEY_PART
from erag_dagster.retrieval.kinds.base import COUNT, Rule

TOP_LEVEL_KEYS = ("retrievers", "readers", "evaluation", "generation", "datasets")
"""The sections a registry file may have (any other top-level key is refused)."""
OPERATIONAL_KEYS = frozenset(
    {"batch_size", "device", "num_threads", "threads",
     # backend: openai — how requests are sent, not what is answered
     "concurrency", "timeout_seconds", "max_retries", "api_key_env", "allow_link_local"}
)  # fmt: skip
RETRIEVER_KINDS = tuple(KINDS)
"""The retriever kinds, each registered once in :mod:`erag_dagster.retrieval.kinds` (this and
:data:`RETRIEVER_KEYS` are views of those registrations; the parser reads them directly)."""
RETRIEVER_KEYS = {name: frozenset({"kind", *kind.keys}) for name, kind in KINDS.items()}
"""Keys each retriever kind reads, besides :data:`OPERATIONAL_KEYS` and :data:`SCOPE_KEYS`; any
other key is refused (a typo would otherwise be ignored by the retriever yet change the
partition hash). Each kind's registration holds its keys and their value rules."""
SCOPE_KEYS = frozenset({"datasets"})
"""Where a retriever runs, not what it returns: left out of its hash (:mod:`.registry_datasets`)."""
_OPERATIONAL_RULES: dict[str, Rule] = {
    "batch_size": COUNT,
    "threads": COUNT,
    "num_threads": COUNT,
    "device": Rule(lambda v: isinstance(v, str), "auto, cpu, cuda or cuda:N"),
}
"""Value rules of the operational keys a retriever reads (its kind's keys have their own)."""


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*(?:-[A-Za-z0-9_.]+)*$")


def content_hash(config: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of ``config`` without operational keys."""
    canonical = {k: v for k, v in sorted(config.items()) if k not in OPERATIONAL_KEYS | SCOPE_KEYS}
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=str)
    return sha256_text(blob)


@dataclass(frozen=True)
class Entry:
    """One named config and its partition key."""

    name: str
    config: dict[str, Any]
    digest: str

    @property
    def partition_key(self) -> str:
        return f"{self.name}-{self.digest[:8]}"


@dataclass(frozen=True)
class Registry:
    """Retriever and reader configs plus the evaluation settings every front door uses."""

    path: str
    retrievers: dict[str, Entry]
    readers: dict[str, Entry]
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    """The ``evaluation`` section, typed and validated (:mod:`erag_dagster.config.evaluation`);
    on the view of one dataset, with that dataset's overrides and its spec as ``dataset``."""
    generation: ExecutorSpec = field(default_factory=ExecutorSpec)
    """Where readers generate (``generation`` section, operational: hashes nothing)."""
    datasets: dict[str, DatasetEntry] = field(default_factory=dict)
    """The ``datasets`` section (:mod:`.registry_datasets`); empty: one dataset, unprefixed."""
    dataset_name: str | None = None
    """Set on the view of one dataset (:meth:`for_dataset`), else ``None``."""
    reader_labels: bool = True
    """Whether this (view's) dataset gets the reader stages (:mod:`.registry_datasets`)."""

    def for_dataset(self, name: str | None) -> Registry:
        """The registry as one dataset sees it (``None``: this registry): the retrievers scoped
        to it (and those whose inputs all are), its evaluation overrides over the shared ones
        and its spec as ``evaluation.dataset``. Partitions of a dataset's assets come from it."""
        if name is None:
            return self
        if name not in self.datasets:
            known = ", ".join(self.datasets) or "none: the registry has no datasets section"
            raise InputError(f"{self.path}: unknown dataset {name!r}; known: {known}")
        entry = self.datasets[name]
        scoped = {
            n: e for n, e in self.retrievers.items() if name in e.config.get("datasets", [name])
        }
        while dropped := [  # builds on a retriever this dataset does not have
            n for n, e in scoped.items() if not set(_references(e.config)) <= set(scoped)
        ]:
            scoped = {n: e for n, e in scoped.items() if n not in dropped}
        kept = scoped
        evaluation = EvaluationConfig.from_mapping(
            entry.evaluation,
            f"{self.path}: dataset {name!r}",
            base=self.evaluation,
            allowed=DATASET_OVERRIDES,
        ).with_overrides(dataset=entry.spec)
        return replace(
            self,
            retrievers=kept,
            evaluation=evaluation,
            datasets={},
            dataset_name=name,
            reader_labels=entry.reader_labels,
        )

    @property
    def dataset_names(self) -> list[str | None]:
        """The datasets of the graph: the section's names, or ``[None]`` (one, unprefixed)."""
        return list(self.datasets) or [None]

    @cached_property
    def _by_partition(self) -> dict[str, Entry]:
        return {e.partition_key: e for e in [*self.retrievers.values(), *self.readers.values()]}

    def retriever(self, key: str) -> Entry:
        """Look up a retriever by name or partition key."""
        return self._lookup(key, self.retrievers, "retriever")

    def reader(self, key: str) -> Entry:
        """Look up a reader by name or partition key."""
        return self._lookup(key, self.readers, "reader")

    def _lookup(self, key: str, table: dict[str, Entry], what: str) -> Entry:
        if key in table:
            return table[key]
        entry = self._by_partition.get(key)
        if entry is not None and entry.name in table:
            return entry
        raise InputError(f"{self.path}: unknown {what} {key!r}; known: {', '.join(table)}")

    def first_config(self, kind: str) -> dict[str, Any]:
        """The config of the first retriever of ``kind`` (registry order); ``{}`` if none."""
        return next((e.config for e in self.retrievers.values() if e.config["kind"] == kind), {})

    @property
    def retriever_partitions(self) -> list[str]:
        return [e.partition_key for e in self.retrievers.values()]

    @property
    def reader_partitions(self) -> list[str]:
        return [e.partition_key for e in self.readers.values()]


def default_registry_path() -> str:
    """``$ERAG_REGISTRY`` or the packaged ``registry.yaml``."""
    if env := os.environ.get("ERAG_REGISTRY"):
        return env
    return str(resources.files("erag_dagster") / "registry.yaml")


def load_registry(path: str | Path | None = None) -> Registry:
    """Parse and validate a registry file; errors name the file and the entry."""
    path = str(path or default_registry_path())
    if not Path(path).exists():
        raise InputError(f"{path}: registry file not found")
    return parse_registry(load_yaml(path) or {}, path)


def parse_registry(
    raw: Any, path: str, section: tuple[str, ...] = (), asset_retrievers: bool = False
) -> Registry:
    """Validate a registry mapping read from the YAML file ``path`` (errors name it, with the
    line of an ``evaluation`` key; relative paths resolve against its folder). ``section``: the keys
    leading from the file's top to the mapping (``("attributes",)`` for the eRAG Dagster component's
    ``defs.yaml``: :mod:`erag_dagster.orchestration.component`). ``asset_retrievers``: allow ``kind:
    asset`` retrievers (an upstream asset of the Dagster project holding the registry, so only the
    component allows them; a registry file is refused with one line)."""
    if not isinstance(raw, dict):
        raise InputError(f"{path}: the registry must be a mapping with 'retrievers' and 'readers'")
    unknown = set(raw) - set(TOP_LEVEL_KEYS)
    if unknown:
        raise InputError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}")
    retrievers_raw = _section(raw, "retrievers", path)
    readers_raw = _section(raw, "readers", path)
    for name, cfg in retrievers_raw.items():
        kind = cfg.get("kind")
        component_only = isinstance(kind, str) and kind in KINDS and KINDS[kind].component_only
        if component_only and not asset_retrievers:
            raise InputError(
                f"{path}: retriever {name!r} has kind {kind!r}, which only the eRAG Dagster "
                "component reads (an asset of your project: docs/dagster-ui.md); use run_file here"
            )
        if not isinstance(kind, str) or kind not in KINDS:
            raise InputError(
                f"{path}: retriever {name!r} has kind {kind!r}; use one of {tuple(KINDS)}"
            )
        rules = {**_OPERATIONAL_RULES, **KINDS[kind].keys}
        known = {"kind", *KINDS[kind].keys} | OPERATIONAL_KEYS | SCOPE_KEYS
        for key, value in cfg.items():
            if key not in known:
                allowed = ", ".join(sorted(known))
                raise InputError(
                    f"{path}: retriever {name!r} ({kind}) has unknown key {key!r}; known: {allowed}"
                )
            rule = rules.get(key)
            if rule is not None and not rule.check(value):
                raise InputError(
                    f"{path}: retriever {name!r} has {key}: {value!r}; it must be {rule.wanted}"
                )
    reader_lines = yaml_key_lines(path, *section, "readers")
    for name, cfg in readers_raw.items():
        refuse_secrets(cfg.get("base_url"), cfg.get("api_key_env"), f"{path}: reader {name!r}")
        try:  # every reader's keys checked with the registry (max_new_tokens, device, ...):
            ReaderSpec.from_dict(cfg, name=name)  # every door refuses a bad one before work
        except InputError as exc:
            raise InputError(f"{where(path, reader_lines.get(name))}: {exc}") from None
    readers = {n: Entry(n, dict(c), content_hash(c)) for n, c in readers_raw.items()}
    retrievers = _retriever_entries(retrievers_raw, readers, path)
    evaluation = EvaluationConfig.from_mapping(
        raw.get("evaluation"), path, yaml_key_lines(path, *section, "evaluation")
    )
    generation = raw.get("generation")
    if generation is not None and not isinstance(generation, dict):
        raise InputError(f"{path}: 'generation' must be a mapping")
    spec = ExecutorSpec.from_mapping(generation, f"{path}: generation")
    datasets = parse_datasets(raw.get("datasets"), Path(path).resolve().parent, path)
    _check_scopes(retrievers, datasets, path)
    for entry in datasets.values():  # each dataset's overrides checked now, not at first use
        EvaluationConfig.from_mapping(
            entry.evaluation,
            path,
            yaml_key_lines(path, *section, "datasets", entry.name, "evaluation"),
            base=evaluation,
            allowed=DATASET_OVERRIDES,
        )
    return Registry(path, retrievers, readers, evaluation, spec, datasets)


def _references(config: dict[str, Any]) -> list[str]:
    """The retriever names a config builds on (a hybrid's ``fuse``, a rerank's first stage)."""
    return KINDS[config["kind"]].references(config)


def _check_scopes(
    retrievers: dict[str, Entry], datasets: dict[str, DatasetEntry], path: str
) -> None:
    """Each retriever's ``datasets`` names known datasets (and needs a ``datasets`` section)."""
    for entry in retrievers.values():
        scope = entry.config.get("datasets")
        if scope is None:
            continue
        if not isinstance(scope, list) or not scope or not all(isinstance(n, str) for n in scope):
            raise InputError(f"{path}: retriever {entry.name!r}: datasets must be a list of names")
        unknown = [n for n in scope if n not in datasets]
        if unknown:
            known = ", ".join(datasets) or "none: the registry has no datasets section"
            raise InputError(
                f"{path}: retriever {entry.name!r} names unknown dataset {unknown[0]!r}; "
                f"known: {known}"
            )


def _retriever_entries(
    raw: dict[str, dict[str, Any]], readers: dict[str, Entry], path: str
) -> dict[str, Entry]:
    """Check references between retrievers (no cycle, no unknown name) and hash each config,
    a referenced retriever by its own hash (module docstring)."""
    folder = Path(path).resolve().parent
    for name, cfg in raw.items():
        KINDS[cfg["kind"]].check(name, cfg, raw, readers, path)
    resolved = {name: dict(cfg) for name, cfg in raw.items()}
    for name, cfg in resolved.items():
        KINDS[cfg["kind"]].resolve(name, cfg, folder, path)
    digests: dict[str, str] = {}

    def digest(name: str, seen: tuple[str, ...]) -> str:
        if name in seen:
            cycle = " -> ".join([*seen[seen.index(name) :], name])
            raise InputError(f"{path}: retrievers refer to each other in a cycle: {cycle}")
        if name not in digests:
            cfg = resolved[name]
            hashed = KINDS[cfg["kind"]].identity(
                cfg, lambda other: digest(other, (*seen, name)), lambda r: readers[r].digest
            )
            digests[name] = content_hash(dict(hashed))
        return digests[name]

    return {name: Entry(name, resolved[name], digest(name, ())) for name in raw}


def _section(raw: dict[str, Any], key: str, path: str) -> dict[str, dict[str, Any]]:
    section = raw.get(key)
    if not isinstance(section, dict) or not section:
        raise InputError(f"{path}: '{key}' must be a non-empty mapping of name -> config")
    for name, cfg in section.items():
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise InputError(
                f"{path}: {key} name {name!r} must be letters, digits, '_', '.', '-' "
                "(partition keys are built from it)"
            )
        if not isinstance(cfg, dict):
            raise InputError(f"{path}: {key} entry {name!r} must be a mapping")
    return section
