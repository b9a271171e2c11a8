"""ReaderBackend: what the rest of the code calls on a reader, whatever its backend.

Every backend registered in :data:`~erag_dagster.readers.backends.BACKENDS` builds a class that
satisfies this protocol (``tests/test_reader_backends.py`` checks each registered class's
members and call signatures without loading a model);
:func:`~erag_dagster.readers.factory.reader_for_spec` returns this type. It names only what
code outside ``readers/`` calls on any reader (the labeller, end-to-end RAG, the baselines,
reranking, accounting, the Ray actors).

Optional capabilities, looked up with ``getattr``/``hasattr`` where used and not part of the
protocol (a backend may lack them):

* ``generation_step`` (int; openai, vllm): pairs per ``answer`` call the labeller should use;
* ``p_yes_unavailable()`` (openai): one line saying why P("yes") cannot be read, or ``None``;
* ``continuation_log_probs(items)`` (transformers): teacher-forced log-probabilities, the
  likelihood label methods' one call (:mod:`erag_dagster.labels.likelihood`); a reader without
  it leaves those rows out;
* ``timings``, ``num_parameters``, ``device``, ``dtype``, ``guard_counts`` (transformers): what
  the benchmarks measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from erag_dagster.core.callbacks import OnBatch
from erag_dagster.readers.spec import ReaderSpec

__all__ = ["ReaderBackend"]


class ReaderBackend(Protocol):
    """A reader object (see the module docstring). Items are ``(question, passage)`` pairs or
    ``(question, passages)`` in rank order; results come back in input order; an empty input
    gives ``[]``. ``on_batch(indices, values)`` reports outputs as they finish, so a caller can
    store them before the call returns."""

    spec: ReaderSpec
    """The validated registry entry it was built from (a Ray actor rebuilds it from
    ``spec.to_dict()``)."""

    @property
    def name(self) -> str:
        """The registry name."""
        ...

    @property
    def fingerprint(self) -> str:
        """sha256 hex (64 chars) of :meth:`identity`: the key of its answers in the store."""
        ...

    @property
    def short_fingerprint(self) -> str:
        """The first 16 hex digits of :attr:`fingerprint`."""
        ...

    def identity(self) -> dict[str, Any]:
        """Everything the fingerprint hashes (a fresh JSON-serialisable copy, for audits)."""
        ...

    def load(self) -> ReaderBackend:
        """Load the model / start the engine / probe the server now; returns ``self``."""
        ...

    def close(self) -> None:
        """Free what :meth:`load` took (a later call loads again)."""
        ...

    def answer(
        self, items: Sequence[tuple[str, str]], on_batch: OnBatch | None = None
    ) -> list[str]:
        """eRAG's per-document call: one greedy, post-processed answer per pair."""
        ...

    def answer_with_context(
        self, question: str, passages: Sequence[str], max_input_tokens: int | None = None
    ) -> str:
        """End-to-end RAG: one answer from ``passages`` cut to ``max_input_tokens`` (tokens;
        ``None``: the spec's budget); no passages is the closed-book answer."""
        ...

    def answer_with_contexts(
        self,
        items: Sequence[tuple[str, Sequence[str]]],
        max_input_tokens: int | None = None,
        on_batch: OnBatch | None = None,
    ) -> list[str]:
        """Batched :meth:`answer_with_context`."""
        ...

    def yes_probability(self, items: Sequence[tuple[str, str]]) -> list[float]:
        """P("yes") in [0, 1] of a yes/no relevance question per pair (LLM annotation,
        reranking); a backend that cannot read it raises a one-line error."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` alone (exact with a local tokenizer, else an estimate)."""
        ...

    def estimate_prompt_tokens(self, items: Sequence[tuple[str, str]]) -> list[int]:
        """Prompt tokens per pair as :meth:`answer` would send them (before a run)."""
        ...

    def usage(self) -> dict[str, int]:
        """Totals since the reader was made: ``requests``, ``prompt_tokens``,
        ``completion_tokens``, ``retries``."""
        ...
