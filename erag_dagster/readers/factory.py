"""One place that turns a registry reader entry into a reader object, by ``backend``.

``transformers`` → :class:`~erag_dagster.readers.transformers_reader.TransformersReader`,
``openai`` → :class:`~erag_dagster.readers.openai_reader.OpenAIReader`, ``vllm`` →
:class:`~erag_dagster.readers.vllm_reader.VLLMReader`. Each module is imported only when its
backend is used (vLLM and torch are heavy; the ``openai`` backend needs neither).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from erag_dagster.readers.spec import ReaderSpec

__all__ = ["reader_for_spec", "reader_from_config"]


def reader_for_spec(spec: ReaderSpec) -> Any:
    """The reader object for a validated spec."""
    if spec.backend == "openai":
        from erag_dagster.readers.openai_reader import OpenAIReader

        return OpenAIReader(spec)
    if spec.backend == "vllm":
        from erag_dagster.readers.vllm_reader import VLLMReader

        return VLLMReader(spec)
    from erag_dagster.readers.transformers_reader import TransformersReader

    return TransformersReader(spec)


def reader_from_config(name: str, config: Mapping[str, Any]) -> Any:
    """A reader for one registry entry (``config`` is the entry's mapping, without ``name``)."""
    return reader_for_spec(ReaderSpec.from_dict(config, name=name))
