"""The process-wide cache of loaded transformers models, shared by readers that may share one.

Readers whose fingerprints and devices are equal (they differ only in batch size, threads or
other operational keys) get the same :class:`~erag_dagster.readers.loading.LoadedModel`, loaded
once (:func:`shared_model`). :func:`drop_model` frees one model, :func:`close_all_readers`
every model this process loaded; a reader whose model was dropped reloads it on its next call.
Thread-safe: one lock guards the cache (a load under it: two threads never load one model
twice).
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import torch

from erag_dagster.readers.loading import LoadedModel

__all__ = ["close_all_readers", "drop_model", "shared_model"]

_LOADED: dict[Hashable, LoadedModel] = {}
_LOCK = threading.Lock()
_HOLDERS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Readers holding a cached model (their ``_loaded`` is cleared by :func:`close_all_readers`)."""


def shared_model(key: Hashable, load: Callable[[], LoadedModel], holder: Any) -> LoadedModel:
    """The cached model under ``key`` (``(fingerprint, device)``), loaded by ``load()`` on first
    need; ``holder`` (the reader, which keeps it as ``_loaded``) is remembered weakly."""
    with _LOCK:
        loaded = _LOADED.get(key)
        if loaded is None:
            loaded = _LOADED[key] = load()
        _HOLDERS.add(holder)
    return loaded


def drop_model(loaded: LoadedModel) -> None:
    """Remove ``loaded`` from the cache and free its memory (readers still holding it keep it
    until they let go)."""
    with _LOCK:
        for key, entry in list(_LOADED.items()):
            if entry is loaded:
                del _LOADED[key]
    on_cuda = loaded.device.type == "cuda"
    del loaded
    _free(on_cuda)


def close_all_readers() -> None:
    """Drop every model this process loaded (frees memory; a later call reloads)."""
    with _LOCK:
        cuda = any(entry.device.type == "cuda" for entry in _LOADED.values())
        _LOADED.clear()
        for reader in list(_HOLDERS):
            reader._loaded = None
    _free(cuda)


def _free(cuda: bool) -> None:
    gc.collect()
    if cuda and torch.cuda.is_available():
        torch.cuda.empty_cache()
