"""Where reader generation runs: in this process (default) or on Ray actors.

The registry's optional ``generation`` section (and the ``reader`` resource's overrides) says
which executor generates the unseen pairs of a partition; it is operational only — it never
changes an answer's key, a fingerprint or a partition key:

=====================  ==========================================================================
key                    meaning (default)
=====================  ==========================================================================
``executor``           ``inprocess`` (the reader runs in the calling process) or ``ray``
``address``            Ray only: ``local`` (a Ray cluster started for the call on this machine and
                       shut down after it), ``auto`` (the running cluster this machine belongs to)
                       or ``ray://HOST:PORT`` (Ray Client). An already connected Ray session
                       (``ray.is_initialized()``) is used as it is, whatever the address.
``actors``             Ray only: reader replicas, one per actor (2)
``num_cpus``           Ray only: CPUs each actor reserves (1; a number > 0)
``num_gpus``           Ray only: GPUs each actor reserves (0; e.g. 1 for one GPU per replica)
=====================  ==========================================================================

A bad value is one :class:`~erag_dagster.core.errors.InputError` line naming where it came from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from erag_dagster.core.errors import InputError

EXECUTORS = ("inprocess", "ray")
KEYS = ("executor", "address", "actors", "num_cpus", "num_gpus")
_ADDRESS_RE = re.compile(r"^(local|auto|ray://[^\s/]+(:\d+)?)$")


@dataclass(frozen=True)
class ExecutorSpec:
    """A validated ``generation`` section (see the module docstring for each field)."""

    executor: str = "inprocess"
    address: str = "local"
    actors: int = 2
    num_cpus: float = 1.0
    num_gpus: float = 0.0

    @property
    def on_ray(self) -> bool:
        return self.executor == "ray"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None, where: str) -> ExecutorSpec:
        """Validate ``data`` (``None``: the defaults); ``where`` names its source in errors."""
        raw = {k: v for k, v in (data or {}).items() if v is not None and v != ""}
        unknown = sorted(set(raw) - set(KEYS))
        if unknown:
            raise InputError(
                f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(KEYS)}"
            )
        executor = str(raw.get("executor", "inprocess"))
        if executor not in EXECUTORS:
            raise InputError(f"{where}: executor {executor!r} unknown; use {', '.join(EXECUTORS)}")
        address = str(raw.get("address", "local"))
        if not _ADDRESS_RE.match(address):
            raise InputError(f"{where}: address {address!r} must be local, auto or ray://HOST:PORT")
        actors = raw.get("actors", 2)
        if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
            raise InputError(f"{where}: actors must be an integer >= 1, got {actors!r}")
        values = {}
        for key, low, strict in (("num_cpus", 0.0, True), ("num_gpus", 0.0, False)):
            value = raw.get(key, 1.0 if key == "num_cpus" else 0.0)
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok or (value <= low if strict else value < low):
                wanted = "a number > 0" if strict else "a number >= 0"
                raise InputError(f"{where}: {key} must be {wanted}, got {value!r}")
            values[key] = float(value)
        return cls(executor, address, actors, values["num_cpus"], values["num_gpus"])

    def replace(self, where: str, **changes: Any) -> ExecutorSpec:
        """A copy with the ``changes`` that are not ``None``/empty applied, validated like
        :meth:`from_mapping`."""
        current = {k: getattr(self, k) for k in KEYS}
        current.update({k: v for k, v in changes.items() if v is not None and v != ""})
        return ExecutorSpec.from_mapping(current, where)
