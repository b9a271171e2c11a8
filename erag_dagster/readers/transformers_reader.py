"""TransformersReader: the RAG reader as a plain object (a Dagster resource wraps it).

This module holds the reader's identity, model loading, prompt fitting, the one batch loop and
its accounting; generation lives in :mod:`.transformers_generate` (:class:`GenerationMixin`),
the prefill-only scores in :mod:`.transformers_scoring` (:class:`ScoringMixin`), the
process-wide model cache in :mod:`.model_cache`; what stands alone in :mod:`.batching`,
:mod:`.loading`, :mod:`.prompts` and :mod:`.fingerprint`.

* :meth:`TransformersReader.answer` — eRAG's per-document call: one answer per
  ``(question, passage)`` pair, greedy, post-processed (:mod:`erag_dagster.readers.prompts`).
* :meth:`TransformersReader.answer_with_context` — end-to-end RAG: the top passages
  concatenated in rank order, cut to the token budget (policy in
  :func:`~erag_dagster.readers.prompts.build_context_prompt`).
* :meth:`TransformersReader.yes_probability` — P("yes") of a yes/no relevance question from the
  next-token distribution, normalised over the yes and no tokens (LLM annotation, reranking).

The model loads lazily on first use and once per process: loaded models are cached by
(fingerprint, device), so readers that differ only in batch size or threads share one copy.
Prompts are tokenised once, sorted by length and batched (left padding for decoder-only models)
so padding stays small; on CPU a batch is closed early rather than pad more than
:data:`~.batching.CPU_PAD_SLACK`. Results come back in input order. Causal LMs and
encoder-decoder models (T5, BART: ``config.is_encoder_decoder``) are supported; remote code is
never trusted.

Every batch appends a :class:`BatchTiming` to :attr:`TransformersReader.timings` (prompt and
generated tokens, seconds), so a benchmark can compute ``2 × num_parameters × tokens / seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import torch

from erag_dagster.core.callbacks import OnBatch
from erag_dagster.core.devices import resolve_device
from erag_dagster.core.errors import InputError
from erag_dagster.readers.batching import CPU_PAD_SLACK, BatchTiming, length_batches, pad_batch
from erag_dagster.readers.fingerprint import (
    fingerprint_of,
    reader_identity,
    resolve_reader_dtype,
    short,
)
from erag_dagster.readers.loading import LoadedModel, load_model, torch_threads
from erag_dagster.readers.model_cache import drop_model, shared_model
from erag_dagster.readers.models import ModelSource, resolve_model
from erag_dagster.readers.prefix_sharing import (
    cache_for_batch,
    prefill,
    shared_prefix,
    window_allows_sharing,
)
from erag_dagster.readers.prompts import (
    RELEVANCE_SYSTEM_PROMPT,
    RELEVANCE_TEMPLATE,
    build_context_prompt,
    build_messages,
    plain_prompt,
)
from erag_dagster.readers.spec import ReaderSpec
from erag_dagster.readers.transformers_generate import GenerationMixin
from erag_dagster.readers.transformers_scoring import ScoringMixin

__all__ = ["TransformersReader"]


class TransformersReader(GenerationMixin, ScoringMixin):
    """A Hugging Face transformers reader described by a :class:`ReaderSpec`."""

    def __init__(self, spec: ReaderSpec) -> None:
        self.spec = spec
        self.timings: list[BatchTiming] = []
        self.guard = True
        """The margin guard on float32 answers (:mod:`.exact_greedy`); benches turn it off to
        measure what it buys. Off, answers may depend on the batch layout and the machine."""
        self.guard_counts = {"rows": 0, "reference": 0}
        """Answers that went through the margin guard, and those decoded again in float64."""
        self._loaded: LoadedModel | None = None

    # -- identity (no model load needed) -------------------------------------------------------

    @property
    def name(self) -> str:
        """The registry name of this reader."""
        return self.spec.name

    @cached_property
    def device(self) -> torch.device:
        """The resolved device (``auto`` → CUDA when available, else CPU)."""
        return resolve_device(self.spec.device)

    @cached_property
    def dtype(self) -> torch.dtype:
        """The resolved dtype (``auto``: see ``fingerprint.resolve_reader_dtype``)."""
        return resolve_reader_dtype(self.spec, self.device)

    @cached_property
    def source(self) -> ModelSource:
        """Where the weights come from, with their content identity."""
        return resolve_model(self.spec)

    def identity(self) -> dict[str, Any]:
        """Everything the fingerprint hashes (a fresh copy, for audit metadata)."""
        return _deep_copy(self._identity)

    @cached_property
    def _identity(self) -> dict[str, Any]:
        return reader_identity(self.spec, self.source, self.dtype, self.device)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 hex (64 chars) of :meth:`identity`; ``short_fingerprint`` is its first 16."""
        return fingerprint_of(self._identity)

    @property
    def short_fingerprint(self) -> str:
        return short(self.fingerprint)

    def __repr__(self) -> str:
        return f"TransformersReader({self.spec.name!r}, {self.spec.model!r})"

    # -- loading -------------------------------------------------------------------------------

    def load(self) -> TransformersReader:
        """Load the model now (otherwise the first call does); returns ``self``."""
        self._ensure()
        return self

    def _ensure(self) -> LoadedModel:
        if self._loaded is None:
            self._loaded = shared_model(
                (self.fingerprint, str(self.device)),
                lambda: load_model(self.spec, self.source, self.dtype, self.device),
                self,
            )
        return self._loaded

    @property
    def num_parameters(self) -> int:
        """Parameter count of the loaded model (loads it)."""
        return self._ensure().num_parameters

    @property
    def load_seconds(self) -> float:
        """Wall time the (shared) model load took, in seconds (loads it)."""
        return self._ensure().load_seconds

    def close(self) -> None:
        """Free the model (a later call reloads it). Other readers sharing it keep their copy."""
        loaded, self._loaded = self._loaded, None
        if loaded is not None:
            drop_model(loaded)

    # -- prompts -------------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` alone (no special tokens)."""
        tok = self._ensure().tokenizer
        return len(tok(text, add_special_tokens=False)["input_ids"])

    def _cut_tokens(self, text: str, max_tokens: int) -> str:
        tok = self._ensure().tokenizer
        ids = tok(text, add_special_tokens=False)["input_ids"][: max(0, max_tokens)]
        return tok.decode(ids, skip_special_tokens=True)

    def _prompt_text(self, messages: list[dict[str, str]], answer_prefix: str) -> str:
        loaded = self._ensure()
        if loaded.chat:
            text = loaded.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            return text + answer_prefix
        if loaded.is_seq2seq:  # the decoder starts the answer; no prefix
            return plain_prompt(messages, "")
        return plain_prompt(messages, answer_prefix)

    def _encode(self, text: str) -> list[int]:
        loaded = self._ensure()
        # A chat template already writes its special tokens; plain prompts get the model's own.
        return loaded.tokenizer(text, add_special_tokens=not loaded.chat)["input_ids"]

    def _input_limit(self, max_input_tokens: int | None, new_tokens: int | None = None) -> int:
        """Prompt budget in tokens: ``max_input_tokens`` (or the spec's), at most the context
        length less the tokens to generate (``new_tokens``, default the spec's max_new_tokens)."""
        loaded = self._ensure()
        limit = max_input_tokens or self.spec.max_input_tokens
        new = self.spec.max_new_tokens if new_tokens is None else new_tokens
        ceiling = loaded.context_length - (0 if loaded.is_seq2seq else new)
        if ceiling < 16:  # the key that took the room is named, not a budget nobody set
            raise InputError(
                f"reader {self.spec.name!r}: max_new_tokens {new} leaves {max(ceiling, 0)} of "
                f"the model's {loaded.context_length} context tokens for the prompt; lower "
                "max_new_tokens"
            )
        return max(16, min(limit, ceiling) if limit else ceiling)

    def _fitted_ids(
        self,
        question: str,
        passages: Sequence[str],
        limit: int,
        relevance: bool = False,
    ) -> list[int]:
        """Token ids of the prompt for ``question`` + ``passages``, cut to ``limit`` tokens by
        the end-to-end policy (drop lowest-ranked passages, then cut the first one)."""

        def ids_for(context: str) -> list[int]:
            if relevance:
                messages = build_messages(
                    self.spec, question, context,
                    system_prompt=RELEVANCE_SYSTEM_PROMPT, template=RELEVANCE_TEMPLATE,
                    few_shot=(),
                )  # fmt: skip
                return self._encode(self._prompt_text(messages, ""))
            messages = build_messages(self.spec, question, context)
            return self._encode(self._prompt_text(messages, self.spec.answer_prefix))

        full = build_context_prompt(passages, None, count_tokens=lambda _: 0)
        ids = ids_for(full.context)
        if len(ids) <= limit:
            return ids
        overhead = len(ids_for(""))
        budget = limit - overhead
        if budget <= 0:
            given = self.spec.max_input_tokens == limit
            budget_is = (
                f"max_input_tokens={limit}"
                if given
                else f"the prompt budget of {limit} tokens (the model's context less "
                f"max_new_tokens {self.spec.max_new_tokens})"
            )
            raise InputError(
                f"reader {self.spec.name!r}: the prompt without any passage takes {overhead} "
                f"tokens, more than {budget_is}"
            )
        for _ in range(4):  # tokens at the passage/template joins may merge or split
            fitted = build_context_prompt(
                passages, budget, count_tokens=self.count_tokens, truncate=self._cut_tokens
            )
            ids = ids_for(fitted.context)
            if len(ids) <= limit:
                return ids
            budget -= len(ids) - limit
        return ids[:limit]

    # -- generation ----------------------------------------------------------------------------

    def _shared(self, prompts: Sequence[Sequence[int]], ends: Sequence[int] | None = None) -> int:
        """Tokens of ``prompts``' shared prefix to prefill once (:mod:`.prefix_sharing`; 0 when
        ``share_prefix`` is off — ``auto``: off unless float32 —, the model is an
        encoder-decoder, or a row could outgrow its sliding attention window)."""
        if not self._sharing():
            return 0
        new_tokens = self.spec.max_new_tokens
        if not window_allows_sharing(self._ensure().model.config, prompts, new_tokens):
            return 0
        return shared_prefix(prompts, ends)

    def _sharing(self) -> bool:
        """Whether prompt prefixes are shared (``share_prefix``; ``auto``: in float32)."""
        wanted = self.spec.share_prefix
        if wanted == "auto":
            wanted = self.dtype == torch.float32
        return bool(wanted) and not self._ensure().is_seq2seq

    def _run_batches(
        self,
        prompts: list[list[int]],
        kind: str,
        forward: Callable[[LoadedModel, torch.Tensor, torch.Tensor, Any], Any],
        collect: Callable[[LoadedModel, Any, torch.Tensor], tuple[list[Any], int]],
        on_batch: OnBatch | None = None,
        shared: int = 0,
    ) -> list[Any]:
        """The one batch loop: length batches (:func:`length_batches`), padded; ``forward``
        (timed) runs the model on a batch, ``collect`` turns its output into one value per
        prompt and the count of generated tokens. Values come back in input order; a
        :class:`BatchTiming` is recorded and ``on_batch(indices, values)`` called per batch.

        ``shared`` > 0: every prompt starts with the same ``shared`` tokens; they are prefilled
        once (timed with the first batch) and ``forward`` gets a copy of their KV cache grown to
        the batch (else ``None``), the rows laid out ``prefix | padding | rest``."""
        loaded = self._ensure()
        slack = CPU_PAD_SLACK if self.device.type == "cpu" else None
        values: list[Any] = [None] * len(prompts)
        with torch_threads(self.spec.num_threads), loaded.lock, torch.inference_mode():
            prefix_cache, prefix_seconds = None, 0.0
            if shared:
                began = time.perf_counter()
                prefix_cache = prefill(loaded.model, prompts[0][:shared], loaded.device)
                prefix_seconds = time.perf_counter() - began
            for chunk in length_batches(prompts, self.spec.batch_size, slack):
                rows = [prompts[i] for i in chunk]
                left = not loaded.is_seq2seq
                ids, mask = pad_batch(
                    rows, loaded.tokenizer.pad_token_id, left, loaded.device, shared
                )
                began = time.perf_counter()
                cache = None if prefix_cache is None else cache_for_batch(prefix_cache, len(rows))
                raw = forward(loaded, ids, mask, cache)
                seconds = time.perf_counter() - began + prefix_seconds
                prefix_seconds = 0.0
                batch_values, generated = collect(loaded, raw, ids)
                for value, i in zip(batch_values, chunk, strict=True):
                    values[i] = value
                prompt_tokens = sum(len(r) for r in rows)
                padded = int(ids.numel()) - (len(rows) * shared if cache is not None else 0)
                self.timings.append(
                    BatchTiming(kind, len(chunk), prompt_tokens, generated, padded, seconds)
                )
                if on_batch is not None:
                    on_batch(chunk, batch_values)
        return values

    def answer(
        self, items: Sequence[tuple[str, str]], on_batch: OnBatch | None = None
    ) -> list[str]:
        """Answer each ``(question, passage)`` from that passage alone; input order kept.

        Passages longer than the prompt budget (``max_input_tokens``, else the model's context
        minus ``max_new_tokens``) are cut at token level. An empty ``items`` returns ``[]``.
        ``on_batch(indices, answers)`` is called after each model batch with the positions in
        ``items`` it answered (so a caller can keep answers as they come).
        """
        if not items:
            return []
        limit = self._input_limit(None)
        prompts = [self._fitted_ids(q, [p], limit) for q, p in items]
        return self._generate(prompts, on_batch)

    def generated_tokens(
        self, items: Sequence[tuple[str, str]], final: Callable[[str], bool]
    ) -> list[list[int]]:
        """The token ids :meth:`answer` generates for each ``(question, passage)`` before its
        answer is read, each row stopped once ``final(text so far)`` holds or at
        ``max_new_tokens`` (EOS dropped): what a measurement reads several answer policies
        and ``max_new_tokens`` values from (``scripts/tune_prompts.py``)."""
        if not items:
            return []
        limit = self._input_limit(None)
        return self._generated_tokens([self._fitted_ids(q, [p], limit) for q, p in items], final)

    def answer_with_context(
        self, question: str, passages: Sequence[str], max_input_tokens: int | None = None
    ) -> str:
        """End-to-end RAG answer from ``passages`` (rank order) concatenated into one prompt.

        Budget: ``max_input_tokens`` (else the spec's, else the model's context minus
        ``max_new_tokens``) for the whole prompt. Lowest-ranked passages are dropped whole until
        the rest fits; if the top passage alone does not fit it is cut at token level. No
        passages gives the closed-book answer (empty context).
        """
        limit = self._input_limit(max_input_tokens)
        return self._generate([self._fitted_ids(question, list(passages), limit)])[0]

    def answer_with_contexts(
        self,
        items: Sequence[tuple[str, Sequence[str]]],
        max_input_tokens: int | None = None,
        on_batch: OnBatch | None = None,
    ) -> list[str]:
        """Batched :meth:`answer_with_context` for ``(question, passages)`` items (order kept);
        same prompts and truncation policy, so the answers are the same up to batching.
        ``on_batch`` as in :meth:`answer`."""
        if not items:
            return []
        limit = self._input_limit(max_input_tokens)
        prompts = [self._fitted_ids(q, list(ps), limit) for q, ps in items]
        return self._generate(prompts, on_batch)

    # -- accounting ----------------------------------------------------------------------------

    def usage(self) -> dict[str, int]:
        """Totals over :attr:`timings` in the shape of the ``openai`` reader's: generation
        calls' prompt tokens and generated tokens, batches as ``requests``, no retries."""
        generate = [t for t in self.timings if t.kind == "generate"]
        return {
            "requests": len(generate),
            "prompt_tokens": sum(t.prompt_tokens for t in generate),
            "completion_tokens": sum(t.generated_tokens for t in generate),
            "retries": 0,
        }

    def estimate_prompt_tokens(self, items: Sequence[tuple[str, str]]) -> list[int]:
        """Prompt tokens of each ``(question, passage)`` as :meth:`answer` would send them
        (exact: the model's tokenizer, after truncation)."""
        limit = self._input_limit(None)
        return [len(self._fitted_ids(q, [p], limit)) for q, p in items]

    def reset_timings(self) -> None:
        """Forget recorded batch timings."""
        self.timings.clear()

    def throughput(self) -> dict[str, float]:
        """Totals over :attr:`timings`: seconds, tokens, pairs, and GFLOP/s ≈ 2·params·tokens/s."""
        seconds = sum(t.seconds for t in self.timings)
        tokens = sum(t.tokens for t in self.timings)
        pairs = sum(t.size for t in self.timings)
        params = self.num_parameters if self._loaded is not None else 0
        gflops = 2.0 * params * tokens / seconds / 1e9 if seconds > 0 else 0.0
        return {
            "seconds": seconds,
            "tokens": float(tokens),
            "pairs": float(pairs),
            "gflops": gflops,
        }


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
