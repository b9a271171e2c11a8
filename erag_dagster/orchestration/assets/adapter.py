"""Every eRAG asset body as Dagster calls it: its resources under the graph's keys, what it
logs and records masked.

The bodies are plain functions whose resource parameters are named ``settings``, ``reader``,
``label_store`` and ``io_manager``. :func:`adapt` gives Dagster a function with the same parameters,
the resource ones renamed to the graph's keys (:class:`~erag_dagster.orchestration.resources.keys.
ResourceKeys`: ``erag__settings`` under the component's key prefix ``[erag]``), which calls the body
under its own names; so two eRAG graphs in one code location bind their own resources, and the
bodies read as plain Python.

It is also the one door between an asset body and Dagster's records, where every secret is
masked with the one masking function (:func:`erag_dagster.core.credentials.mask_credentials`):

- every line logged through the step's ``context.log`` (the body's own, Dagster's events of the
  step) passes a logging filter (:data:`MASK_LOG_LINES`) before any handler sees it, so the event
  log never holds a secret a message carried (a token in a reader's ``base_url``, say);
- every metadata value of what the body yields or returns (:class:`dagster.Output`,
  :class:`dagster.MaterializeResult`, :class:`dagster.AssetCheckResult`) is masked
  (:func:`mask_metadata`): strings, Markdown, text, JSON, paths and URLs.

Resource config is the component's to keep clean: it refuses a literal secret before anything
is bound (:func:`erag_dagster.core.credentials.has_credentials`).
"""

from __future__ import annotations

import inspect
import logging
import typing
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

from erag_dagster.core.credentials import mask_credentials, mask_in
from erag_dagster.orchestration.resources.keys import RESOURCE_NAMES, ResourceKeys

__all__ = ["MASK_LOG_LINES", "adapt", "mask_metadata"]


class _MaskLogLines(logging.Filter):
    """Masks a record's message and arguments in place (always lets the record through)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = mask_credentials(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(mask_in(a) for a in record.args)
        elif isinstance(record.args, Mapping):
            record.args = mask_in(dict(record.args))
        return True


MASK_LOG_LINES = _MaskLogLines()
"""The filter every step's log manager gets (one object: ``addFilter`` adds it once)."""


def mask_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metadata`` with every secret masked: plain strings, JSON-like values and the text,
    Markdown, JSON, path and URL metadata values (other values as they are)."""
    out: dict[str, Any] = {}
    for key, value in (metadata or {}).items():
        if isinstance(value, dg.MarkdownMetadataValue):
            value = dg.MetadataValue.md(mask_credentials(value.md_str or ""))
        elif isinstance(value, dg.TextMetadataValue):
            value = dg.MetadataValue.text(mask_credentials(value.text or ""))
        elif isinstance(value, dg.JsonMetadataValue):
            value = dg.MetadataValue.json(mask_in(value.data))
        elif isinstance(value, dg.PathMetadataValue):
            value = dg.MetadataValue.path(mask_credentials(str(value.path)))
        elif isinstance(value, dg.UrlMetadataValue):
            value = dg.MetadataValue.url(mask_credentials(value.url or ""))
        elif isinstance(value, str | Mapping | list) and not isinstance(value, dg.MetadataValue):
            value = mask_in(value)
        out[key] = value
    return out


def _masked(item: Any) -> Any:
    """One value a body yields or returns, its metadata masked."""
    if isinstance(item, dg.Output | dg.AssetCheckResult):
        return item.with_metadata(mask_metadata(item.metadata))
    if isinstance(item, dg.MaterializeResult):
        checks = [c.with_metadata(mask_metadata(c.metadata)) for c in item.check_results or []]
        return item._replace(metadata=mask_metadata(item.metadata), check_results=checks)
    return item


def _mask_log_of(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Add :data:`MASK_LOG_LINES` to the log manager of the call's context, if it has one."""
    context = kwargs.get("context", args[0] if args else None)
    log = getattr(context, "log", None)
    if isinstance(log, logging.Logger):
        log.addFilter(MASK_LOG_LINES)


def _evaluated(signature: inspect.Signature, body: Callable[..., Any]) -> inspect.Signature:
    """``signature`` with its annotations evaluated in the body's module (a module with
    ``from __future__ import annotations`` holds strings, which Dagster would resolve in this
    module's namespace instead); as written when they cannot be evaluated."""
    try:
        hints = typing.get_type_hints(body, include_extras=True)
    except Exception:  # a name only a type checker sees: leave them as written
        return signature
    return signature.replace(
        parameters=[
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in signature.parameters.values()
        ],
        return_annotation=hints.get("return", signature.return_annotation),
    )


def adapt(body: Callable[..., Any], keys: ResourceKeys) -> Callable[..., Any]:
    """``body`` as Dagster should call it (module docstring): the same parameters, those named
    in :data:`~erag_dagster.orchestration.resources.keys.RESOURCE_NAMES` renamed to ``keys``'
    resource keys; a generator stays a generator (Dagster tells them apart). Name, docstring (the
    asset's description) and annotations are the body's."""
    signature = _evaluated(inspect.signature(body), body)
    renames = {p: keys.key(p) for p in signature.parameters if p in RESOURCE_NAMES}
    back = {key: name for name, key in renames.items()}

    def call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        _mask_log_of(args, kwargs)
        return body(*args, **{back.get(k, k): v for k, v in kwargs.items()})

    if inspect.isgeneratorfunction(body):

        def adapted(*args: Any, **kwargs: Any) -> Any:
            for item in call(args, kwargs):
                yield _masked(item)

    else:

        def adapted(*args: Any, **kwargs: Any) -> Any:
            return _masked(call(args, kwargs))

    adapted.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            p.replace(name=renames.get(p.name, p.name)) for p in signature.parameters.values()
        ]
    )
    adapted.__annotations__ = {
        renames.get(p.name, p.name): p.annotation
        for p in signature.parameters.values()
        if p.annotation is not inspect.Parameter.empty
    }
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(adapted, attribute, getattr(body, attribute))
    return adapted
