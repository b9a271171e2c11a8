"""Ray for the reader pool: importing it, connecting to a cluster, and Ray Client detection.

Ray is imported only here (:func:`import_ray`), when a pool starts; without it the error is one
line. :func:`connect` follows the executor's ``address`` (:mod:`erag_dagster.labels.executor`):
``local`` starts a new cluster sized for the actors, any other address joins one; a Ray Client
(``ray://``) session the server failed to start is tried :data:`CLIENT_ATTEMPTS` times. Workers
get the offline environment (:data:`_WORKER_ENV`): a remote worker must not reach a model hub.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from typing import Any

from erag_dagster.core.callbacks import Log
from erag_dagster.core.errors import EnvironmentFault
from erag_dagster.labels.executor import ExecutorSpec

__all__ = ["CLIENT_ATTEMPTS", "NAMESPACE", "connect", "import_ray", "is_client"]

#: What a remote Ray worker must not do: reach a model hub (local clusters inherit these anyway).
_WORKER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
#: The Ray namespace of this project's sessions and actors.
NAMESPACE = "erag-dagster"
#: Tries of a Ray Client (``ray://``) connection whose session the server failed to start.
CLIENT_ATTEMPTS = 3


def import_ray() -> Any:
    """The ``ray`` module, or one :class:`EnvironmentFault` line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise EnvironmentFault(
            "generation executor 'ray' needs the ray package, which is not installed: "
            "pip install 'ray==2.60.0' (or the project's [ray] extra)"
        ) from None
    return ray


def connect(ray: Any, spec: ExecutorSpec, log: Log) -> bool:
    """Connect ``ray`` as ``spec.address`` says (:mod:`.executor`). ``True``: this call opened
    the session (its pool shuts it down when it closes); ``False``: this process was connected
    already (a session someone else owns stays up). A failed connection is one
    :class:`EnvironmentFault` line."""
    if ray.is_initialized():
        return False
    env = {k: os.environ.get(k, v) for k, v in _WORKER_ENV.items()}
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "runtime_env": {"env_vars": env},
        "namespace": NAMESPACE,
    }
    address = kwargs["address"] = spec.address  # Ray's "local": always a new cluster
    if address == "local":
        cpus = max(os.cpu_count() or 1, math.ceil(spec.actors * spec.num_cpus))
        kwargs.update(num_cpus=cpus, object_store_memory=256 * 1024**2)
    else:
        kwargs.pop("include_dashboard")
    # Ray Client's proxy starts one server per session; on a loaded head that start can
    # fail (ConnectionAbortedError "Initialization failure from server"): tried 3 times.
    attempts = CLIENT_ATTEMPTS if address.startswith("ray://") else 1
    for attempt in range(1, attempts + 1):
        try:
            ray.init(**kwargs)
            break
        except (ConnectionError, RuntimeError, ValueError) as exc:
            lines = [line for line in str(exc).splitlines() if line.strip()]
            lines = lines or [type(exc).__name__]
            reason = lines[0].strip() + (f" ... {lines[-1].strip()}" if len(lines) > 1 else "")
            with contextlib.suppress(Exception):
                ray.shutdown()
            if attempt < attempts and isinstance(exc, ConnectionAbortedError):
                log(f"Ray: {address} refused the session ({reason}); trying again")
                time.sleep(2.0 * attempt)
                continue
            raise EnvironmentFault(f"cannot connect to Ray at {address!r}: {reason}") from None
    log(f"Ray: connected ({address}; started here: {address == 'local'})")
    return True


def is_client(ray: Any) -> bool:
    """Whether this process talks to Ray through Ray Client (``ray://``)."""
    try:
        return bool(ray.util.client.ray.is_connected())
    except AttributeError:  # pragma: no cover - Ray without the client module
        return False
