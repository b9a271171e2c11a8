"""The registry a resource was bound to, carried unchanged through Dagster's per-run copies.

Dagster makes a fresh copy of a configurable resource for every run from its constructor
arguments and the run's config; a private attribute does not survive that copy, and a config
field is reset by any run config of the resource. A *resource dependency* (Dagster's public
``ResourceDependency``) does survive, unchanged and out of run config's reach: the parsed
registry travels as one.

No ``from __future__ import annotations`` in this module: Dagster recognises a resource
dependency by its evaluated annotation, and a postponed (string) one is not recognised.
"""

import dagster as dg

from erag_dagster.config.registry import Registry


class RegistryBound(dg.ConfigurableResource):
    """A resource that may carry an already parsed registry (``None``: parse the file)."""

    parsed_registry: dg.ResourceDependency[Registry | None] = None
