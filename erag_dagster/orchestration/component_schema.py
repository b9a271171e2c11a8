"""Typed attribute models of the eRAG Dagster component, derived from the registry's own
declarations.

``dg check yaml`` (which ``dg check defs`` runs first) validates a ``defs.yaml`` against the
component's JSON schema, and the UI shows that schema; these models make it say what the
registry reads. Nothing here is a second set of rules: every key set, type and default is read
from the declaration that owns it, and every value is still checked by the registry's parser
when the component loads (:func:`erag_dagster.config.registry.parse_registry`):

- a reader's keys and types: :class:`~erag_dagster.readers.spec.ReaderSpec`'s fields and each
  backend's options class (:data:`~erag_dagster.readers.backends.BACKENDS`);
- a retriever's keys: every kind's registration (:data:`~erag_dagster.retrieval.kinds.KINDS`)
  with its value rule's words as the description, plus the operational and scope keys;
- ``evaluation``: :class:`~erag_dagster.config.evaluation.EvaluationConfig`'s fields and
  defaults; a dataset's ``evaluation``: the keys a dataset may override;
- ``generation``: :class:`~erag_dagster.labels.executor.ExecutorSpec`'s fields;
- ``label_store``: a location, or ``{env: NAME}`` (the location read from ``$NAME`` at run
  time, shown in the UI by its name only).

Types are strict (a quoted ``"7"`` is not an integer): a registry section is the registry's
YAML as written, and Dagster's templating (which re-reads a rendered string as YAML) is not
applied inside it. An integer is accepted where a number is wanted, and kept as written (a
partition key hashes the value: ``120`` and ``120.0`` would be two keys).
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, fields
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from erag_dagster.config.evaluation import DATASET_OVERRIDES, FIELDS, EvaluationConfig
from erag_dagster.config.registry import OPERATIONAL_KEYS, SCOPE_KEYS
from erag_dagster.labels.executor import ExecutorSpec
from erag_dagster.readers.backends import BACKENDS
from erag_dagster.readers.spec import ReaderSpec
from erag_dagster.retrieval.kinds import KINDS

__all__ = [
    "DatasetAttributes",
    "EnvReference",
    "EvaluationAttributes",
    "GenerationAttributes",
    "ReaderAttributes",
    "RetrieverAttributes",
    "plain",
]

_STRICT = ConfigDict(extra="forbid", strict=True)


def _schema_type(hint: Any) -> Any:
    """The annotation a field gets in a model: the declaration's type, ``X | None`` for any
    ``X``, an int accepted where a float is wanted, a tuple as a list."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        parts = [_schema_type(a) for a in typing.get_args(hint) if a is not type(None)]
        return typing.Union[tuple(parts)] if len(parts) > 1 else parts[0]  # noqa: UP007
    if hint is float:
        return int | float
    origin = typing.get_origin(hint)
    if origin in (tuple, list):
        (item, *_) = typing.get_args(hint) or (Any,)
        return list[_schema_type(item)]
    return hint


def _nullable(words: dict[str, Any]) -> Any:
    """A callable that puts a rule's JSON-schema ``words`` on the non-null branch of an
    optional field's schema (``anyOf: [{type: integer, minimum: 1}, {type: null}]``)."""
    if not words:
        return None

    def extra(schema: dict[str, Any]) -> None:
        for branch in schema.get("anyOf", [schema]):
            if branch.get("type") != "null":
                for key, value in words.items():
                    known = branch.get(key)
                    branch[key] = {**known, **value} if isinstance(known, dict) else value

    return extra


def _default(field: Any) -> Any:
    if field.default is not MISSING:
        return field.default
    if field.default_factory is not MISSING:
        return field.default_factory()
    return None


def _model(
    name: str,
    doc: str,
    entries: dict[str, tuple[Any, str]],
    schemas: dict[str, Any] | None = None,
    config: ConfigDict = _STRICT,
) -> type[BaseModel]:
    """A model named ``name`` with one optional field per entry: ``{key: (type, words)}``;
    ``schemas``: JSON-schema words a key's rule states (its declaration's), by key."""
    model = create_model(  # type: ignore[call-overload]
        name,
        __config__=config,
        __doc__=doc,
        **{
            key: (
                kind | None,
                Field(
                    default=None,
                    description=words,
                    json_schema_extra=_nullable(dict((schemas or {}).get(key) or {})),
                ),
            )
            for key, (kind, words) in entries.items()
        },
    )
    return typing.cast("type[BaseModel]", model)


class EnvReference(BaseModel):
    """A value read from an environment variable at run time (``{env: NAME}``): Dagster's
    ``EnvVar``, so the UI and run config show the variable's name, never its value."""

    model_config = _STRICT
    env: str = Field(description="the name of an environment variable")


class FewShotAttributes(BaseModel):
    """One worked example turn of a reader's prompt."""

    model_config = _STRICT
    question: str
    passage: str
    answer: str


SECRET_READER_KEYS = {
    "api_key": "refused: put the key in an environment variable and name it with api_key_env",
    "headers": "refused: a server key goes in an environment variable named by api_key_env",
}
"""Keys a reader does not take that hold a secret when written: the schema lets them through
so that the component refuses them at load without echoing the value (a schema error prints
the mapping it is about)."""


def _reader_entries() -> dict[str, tuple[Any, str]]:
    entries: dict[str, tuple[Any, str]] = {key: (Any, w) for key, w in SECRET_READER_KEYS.items()}
    classes = [ReaderSpec, *(b.options for b in BACKENDS.values())]
    for cls in classes:
        hints = typing.get_type_hints(cls)
        backends = [n for n, b in BACKENDS.items() if cls is b.options]
        scope = f" (backend {', '.join(backends)} only)" if backends else ""
        for f in fields(cls):
            if f.name in ("name", "options") or f.name in entries:
                continue
            kind = _schema_type(hints[f.name])
            if f.name == "few_shot":
                kind = list[FewShotAttributes] | FewShotAttributes
            if f.name == "backend":
                kind = Literal[tuple(BACKENDS)]  # type: ignore[valid-type]
            default = "" if f.name == "num_threads" else f"; default {_default(f)!r}"
            entries[f.name] = (kind, f"reader key {f.name}{scope}{default}")
    return entries


ReaderAttributes = _model(
    "ReaderAttributes",
    "A reader entry of the registry (docs/registry.md#readers): the keys every backend reads "
    "and each backend's own; values checked by the registry when the component loads.",
    _reader_entries(),
)


def _retriever_entries() -> tuple[dict[str, tuple[Any, str]], dict[str, Any]]:
    """Every retriever key with its kinds' rule words, and the JSON schema of the keys whose
    rule says one and is the same in every kind that reads the key."""
    kinds = " | ".join(KINDS)
    entries: dict[str, tuple[Any, str]] = {"kind": (Literal[tuple(KINDS)], kinds)}  # type: ignore[valid-type]
    rules: dict[str, list[Any]] = {}
    for name, kind in KINDS.items():
        for key, rule in kind.keys.items():
            words = f"{name}: {rule.wanted}" if rule is not None else f"{name} key {key}"
            if key in entries:
                words = f"{entries[key][1]}; {words}"
            entries[key] = (Any, words)
            rules.setdefault(key, []).append(rule.schema if rule is not None else None)
    for key in sorted(OPERATIONAL_KEYS | SCOPE_KEYS):
        entries.setdefault(key, (Any, f"operational key {key} (not hashed)"))
    schemas = {k: s[0] for k, s in rules.items() if s[0] and all(x == s[0] for x in s)}
    return entries, schemas


RetrieverAttributes = _model(
    "RetrieverAttributes",
    "A retriever entry of the registry (docs/registry.md#retrievers): ``kind`` and the keys "
    "that kind reads; values checked by the registry when the component loads.",
    *_retriever_entries(),
)


def _dataclass_entries(cls: type, only: frozenset[str] | None = None) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {
        f.name: (_schema_type(hints[f.name]), f"default {_default(f)!r}")
        for f in fields(cls)
        if only is None or f.name in only
    }


_EVALUATION_SCHEMAS = {name: f.schema for name, f in FIELDS.items()}
EvaluationAttributes = _model(
    "EvaluationAttributes",
    "The registry's evaluation section (docs/registry.md#evaluation).",
    _dataclass_entries(EvaluationConfig),
    _EVALUATION_SCHEMAS,
)
DatasetEvaluationAttributes = _model(
    "DatasetEvaluationAttributes",
    "The evaluation settings one dataset overrides.",
    _dataclass_entries(EvaluationConfig, DATASET_OVERRIDES),
    _EVALUATION_SCHEMAS,
)
GenerationAttributes = _model(
    "GenerationAttributes",
    "Where readers generate (docs/registry.md#generation).",
    _dataclass_entries(ExecutorSpec),
)


class DatasetAttributes(BaseModel):
    """One dataset of the registry's ``datasets`` section (docs/registry.md#datasets): its spec,
    whether it gets the reader stages, its evaluation overrides and any spec option."""

    model_config = ConfigDict(extra="allow", strict=True)
    spec: str = Field(description="dataset spec, e.g. sample, beir:DIR, jsonl:DIR")
    reader_labels: bool | None = Field(default=None, description="reader stages (eRAG labels)")
    evaluation: DatasetEvaluationAttributes | None = None  # type: ignore[valid-type]
    __pydantic_extra__: dict[str, str | int | float | bool]


def plain(value: Any) -> Any:
    """An attribute value as the registry parser reads it: models as the mappings they were
    given (only the keys written), lists and mappings walked."""
    if isinstance(value, BaseModel):
        return {
            k: plain(v) for k, v in value.model_dump(exclude_unset=True, round_trip=True).items()
        }
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value
