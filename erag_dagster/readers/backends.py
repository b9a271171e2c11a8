"""The reader backends, each registered once: ``backend:`` name → options class, reader class.

Adding a backend is its reader module (a class satisfying
:class:`~erag_dagster.readers.protocol.ReaderBackend`, built from a
:class:`~erag_dagster.readers.spec.ReaderSpec`), its options class (a
:class:`~erag_dagster.readers.options.BackendOptions` in a module light enough to import
whenever a spec is parsed: parsing refuses a key of another backend, so it knows every
backend's keys) and one line here. The reader class is named by ``"module:Class"`` and imported
only when a reader of that backend is built (:func:`~erag_dagster.readers.factory.reader_for_spec`):
vLLM and torch are heavy, and the ``openai`` backend needs neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from erag_dagster.readers.openai_options import OpenAIOptions
from erag_dagster.readers.options import BackendOptions
from erag_dagster.readers.transformers_options import TransformersOptions
from erag_dagster.readers.vllm_options import VLLMOptions

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "Backend"]


@dataclass(frozen=True)
class Backend:
    """One registered backend: its options class and its reader class as ``"module:Class"``
    (a module name starting with ``.`` is one of :mod:`erag_dagster.readers`)."""

    options: type[BackendOptions]
    reader: str


BACKENDS: dict[str, Backend] = {
    "transformers": Backend(TransformersOptions, ".transformers_reader:TransformersReader"),
    "openai": Backend(OpenAIOptions, ".openai_reader:OpenAIReader"),
    "vllm": Backend(VLLMOptions, ".vllm_reader:VLLMReader"),
}
"""In the order the error lines list them."""
DEFAULT_BACKEND = "transformers"
