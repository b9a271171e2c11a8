"""One place that turns a registry reader entry into a reader object, by ``backend``.

The backend's reader class is looked up in :data:`~erag_dagster.readers.backends.BACKENDS`
(``"module:Class"``) and its module imported only when a reader of that backend is built (vLLM
and torch are heavy; the ``openai`` backend needs neither). Every such class satisfies
:class:`~erag_dagster.readers.protocol.ReaderBackend`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, cast

from erag_dagster.readers.backends import BACKENDS
from erag_dagster.readers.protocol import ReaderBackend
from erag_dagster.readers.spec import ReaderSpec

__all__ = ["reader_class", "reader_for_spec", "reader_from_config"]


def reader_class(backend: str) -> Callable[[ReaderSpec], ReaderBackend]:
    """The reader class registered for ``backend`` (a name in :data:`BACKENDS`; ReaderSpec
    checked it), its module imported now."""
    module, _, name = BACKENDS[backend].reader.partition(":")
    reader = getattr(importlib.import_module(module, "erag_dagster.readers"), name)
    return cast("Callable[[ReaderSpec], ReaderBackend]", reader)


def reader_for_spec(spec: ReaderSpec) -> ReaderBackend:
    """The reader object for a validated spec (nothing loaded yet)."""
    return reader_class(spec.backend)(spec)


def reader_from_config(name: str, config: Mapping[str, Any]) -> ReaderBackend:
    """A reader for one registry entry (``config`` is the entry's mapping, without ``name``)."""
    return reader_for_spec(ReaderSpec.from_dict(config, name=name))
