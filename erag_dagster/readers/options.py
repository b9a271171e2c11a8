"""BackendOptions: the registry keys one reader backend reads, typed, defaulted and checked once.

A backend's options class is a frozen dataclass whose fields ARE the keys only that backend
reads (field name = registry key, field default = the key's default, the class's
:meth:`~BackendOptions.validate` = the key's rules). :class:`~erag_dagster.readers.spec.ReaderSpec`
holds the keys every backend reads and one options object; the key sets of
:mod:`~erag_dagster.readers.spec` (which keys a backend takes, which it refuses) are derived
from these classes, so a key is written once: as a field.

How a YAML value becomes a field value is one rule, by the field's type (:func:`coerce`):
``int`` fields take integers or integer strings, ``float`` fields numbers or numeric strings,
``bool`` fields only ``true``/``false``, ``str`` fields anything (``str()``); a field of any
other type (``bool | str``, a tuple) is left to the class's checks. ``None`` means "the
default" and never reaches a class (:meth:`ReaderSpec.from_dict
<erag_dagster.readers.spec.ReaderSpec.from_dict>` drops it).

:class:`LocalWeightsOptions` is the base of the backends that load the weights themselves
(``transformers``, ``vllm``): ``gguf_file``, ``revision``, ``allow_download``, ``dtype``.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from erag_dagster.core.devices import EXPLICIT_DTYPES
from erag_dagster.core.errors import InputError

__all__ = [
    "DTYPE_NAMES",
    "BackendOptions",
    "LocalWeightsOptions",
    "check_int",
    "coerce",
    "field_names",
]

DTYPE_NAMES = ("auto", *EXPLICIT_DTYPES)
_SCALARS = (int, float, bool, str)


@functools.cache
def _scalar_types(cls: type) -> dict[str, type | None]:
    """Field name → the scalar type its YAML value is coerced to (``X | None`` counts as
    ``X``), or ``None`` for a field the class checks itself."""
    hints = typing.get_type_hints(cls)
    out: dict[str, type | None] = {}
    for f in fields(cls):
        hint = hints[f.name]
        if isinstance(hint, types.UnionType):
            rest = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = rest[0] if len(rest) == 1 else None
        out[f.name] = hint if hint in _SCALARS else None
    return out


def field_names(cls: type) -> frozenset[str]:
    """The field names of a dataclass: for an options class, the keys its backend reads."""
    return frozenset(f.name for f in fields(cls))


def coerce(cls: type, raw: Mapping[str, Any], label: str) -> dict[str, Any]:
    """``raw``'s values coerced to the types of ``cls``'s fields (the rule in the module
    docstring); a value that does not fit is an :class:`InputError` naming the reader
    (``label``) and the key. Keys that are not fields of ``cls`` pass through unchanged."""
    out = dict(raw)
    for key, kind in _scalar_types(cls).items():
        if key not in out or kind is None:
            continue
        value = out[key]
        if kind is bool:
            if not isinstance(value, bool):
                raise InputError(f"reader {label!r}: {key} must be true or false")
        elif kind is int:
            out[key] = _number(value, int, key, label, "an integer")
        elif kind is float:
            out[key] = _number(value, float, key, label, "a number")
        elif not isinstance(value, str):
            out[key] = str(value)
    return out


def _number(value: Any, kind: type, key: str, label: str, what: str) -> Any:
    allowed = (int, str) if kind is int else (int, float, str)
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise InputError(f"reader {label!r}: {key} must be {what}, got {value!r}")
    try:
        return kind(value)
    except ValueError:
        raise InputError(f"reader {label!r}: {key} must be {what}, got {value!r}") from None


def check_int(where: str, key: str, value: Any, low: int) -> None:
    """An :class:`InputError` unless ``value`` is an integer (not a bool) >= ``low``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InputError(f"{where}: {key} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class BackendOptions:
    """Base of a backend's options class (see the module docstring). A subclass declares its
    keys as fields with their defaults and adds its rules in :meth:`validate`."""

    @classmethod
    def registry_keys(cls) -> frozenset[str]:
        """The registry keys this backend reads beyond the common ones."""
        return field_names(cls)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], label: str) -> BackendOptions:
        """Options from the backend's keys of a registry entry (``None`` values already
        dropped; every key is one of :meth:`registry_keys`), coerced (:func:`coerce`), not yet
        validated (:meth:`validate` runs when the spec is built)."""
        return cls(**coerce(cls, raw, label))

    def to_dict(self) -> dict[str, Any]:
        """The keys and values, as the registry writes them."""
        return asdict(self)

    def validate(self, where: str, model: str) -> None:
        """Refuse out-of-range values with an :class:`InputError` starting with ``where``
        (``reader 'NAME'``); ``model`` is the spec's ``model`` (a rule may depend on it)."""


@dataclass(frozen=True)
class LocalWeightsOptions(BackendOptions):
    """Keys of a backend that loads the weights in this process (see the module docstring of
    :mod:`erag_dagster.readers.spec` for each key)."""

    gguf_file: str | None = None
    revision: str | None = None
    allow_download: bool = False
    dtype: str = "auto"

    def validate(self, where: str, model: str) -> None:
        if self.dtype not in DTYPE_NAMES:
            raise InputError(f"{where}: dtype {self.dtype!r} unknown; use {', '.join(DTYPE_NAMES)}")
