"""The resource keys of one eRAG graph, so several graphs share a Dagster code location.

The packaged project binds ``settings``, ``reader``, ``label_store`` and ``io_manager``; an eRAG
component instance with a ``key_prefix`` binds the same four under ``<part>__<part>__<name>``
(``team_a__erag__settings`` for ``[team_a, erag]``): the naming of its jobs, schedule and sensors
too (:func:`prefixed_name`), so two instances (two datasets, two teams) never bind two values under
one key. The asset bodies keep their parameter names (``settings``, ``reader``, ``label_store``,
``io_manager``); :mod:`erag_dagster.orchestration.assets.adapter` renames them to these keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

RESOURCE_NAMES = ("settings", "reader", "label_store", "io_manager")
"""The resources every eRAG graph binds, by the parameter names the asset bodies use."""


def prefixed_name(name: str, key_prefix: Sequence[str] = ()) -> str:
    """``name`` under a component's key prefix: ``team__erag__name`` for ``[team, erag]``
    (``name`` itself without a prefix)."""
    return "__".join([*key_prefix, name])


@dataclass(frozen=True)
class ResourceKeys:
    """The keys one graph binds its resources under (module docstring)."""

    key_prefix: tuple[str, ...] = ()
    shared_io_manager: bool = False
    """The graph's assets store through the code location's own ``io_manager`` (the component's
    ``io_manager: false``), not one bound under the prefix."""

    def key(self, name: str) -> str:
        """The key of resource ``name`` (one of :data:`RESOURCE_NAMES`)."""
        if name == "io_manager" and self.shared_io_manager:
            return name
        return prefixed_name(name, self.key_prefix)

    @property
    def renames(self) -> dict[str, str]:
        """``{parameter name: resource key}`` for every resource of :data:`RESOURCE_NAMES`."""
        return {name: self.key(name) for name in RESOURCE_NAMES}

    @property
    def io_manager(self) -> str:
        """The IO manager key of the graph's assets."""
        return self.key("io_manager")


UNPREFIXED = ResourceKeys()
"""The packaged project's keys (``settings``, ``reader``, ``label_store``, ``io_manager``)."""
