"""TransformersReader: the RAG reader as a plain object (a Dagster resource wraps it).

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
:data:`CPU_PAD_SLACK`. Results come back in input order. Causal LMs and encoder-decoder models
(T5, BART: ``config.is_encoder_decoder``) are supported; remote code is never trusted.

Every batch appends a :class:`BatchTiming` to :attr:`TransformersReader.timings` (prompt and
generated tokens, seconds), so a benchmark can compute ``2 × num_parameters × tokens / seconds``.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from erag_dagster.devices import resolve_device
from erag_dagster.errors import InputError
from erag_dagster.readers.fingerprint import (
    fingerprint_of,
    reader_identity,
    resolve_reader_dtype,
    short,
)
from erag_dagster.readers.models import ModelSource, load_folder_kwargs, resolve_model
from erag_dagster.readers.prompts import (
    RELEVANCE_SYSTEM_PROMPT,
    RELEVANCE_TEMPLATE,
    build_context_prompt,
    build_messages,
    plain_prompt,
    postprocess_answer,
)
from erag_dagster.readers.spec import ReaderSpec

__all__ = [
    "BatchTiming",
    "TransformersReader",
    "close_all_readers",
    "reader_from_config",
]

#: On CPU, a batch's padded positions stay within (1 + this) x its real prompt tokens.
CPU_PAD_SLACK = 0.25
OnBatch = Callable[[list[int], list[str]], None]
"""Called after each model batch with the item positions it answered and their answers."""
_YES_WORDS = ("yes", "Yes", " yes", " Yes", "YES")
_NO_WORDS = ("no", "No", " no", " No", "NO")


@dataclass(frozen=True)
class BatchTiming:
    """One forward/generate call: ``kind`` is ``generate`` or ``score``; tokens are real
    (non-padding) tokens; ``padded_tokens`` counts the padded input positions processed."""

    kind: str
    size: int
    prompt_tokens: int
    generated_tokens: int
    padded_tokens: int
    seconds: float

    @property
    def tokens(self) -> int:
        """Tokens processed: prompt tokens + generated tokens."""
        return self.prompt_tokens + self.generated_tokens


@dataclass
class _Loaded:
    model: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    is_seq2seq: bool
    chat: bool
    context_length: int
    num_parameters: int
    load_seconds: float
    lock: threading.Lock


_LOADED: dict[tuple[str, str], _Loaded] = {}
_LOADED_LOCK = threading.Lock()
_READERS: weakref.WeakSet[TransformersReader] = weakref.WeakSet()


def reader_from_config(name: str, config: Mapping[str, Any]) -> TransformersReader:
    """A reader for one registry entry (``config`` is the entry's mapping, without ``name``)."""
    return TransformersReader(ReaderSpec.from_dict(config, name=name))


def close_all_readers() -> None:
    """Drop every model this process loaded (frees memory; a later call reloads)."""
    with _LOADED_LOCK:
        cuda = any(entry.device.type == "cuda" for entry in _LOADED.values())
        _LOADED.clear()
        for reader in list(_READERS):
            reader._loaded = None
    gc.collect()
    if cuda and torch.cuda.is_available():
        torch.cuda.empty_cache()


class TransformersReader:
    """A Hugging Face transformers reader described by a :class:`ReaderSpec`."""

    def __init__(self, spec: ReaderSpec) -> None:
        self.spec = spec
        self.timings: list[BatchTiming] = []
        self._loaded: _Loaded | None = None

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
        return reader_identity(self.spec, self.source, self.dtype)

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

    def _ensure(self) -> _Loaded:
        if self._loaded is not None:
            return self._loaded
        key = (self.fingerprint, str(self.device))
        with _LOADED_LOCK:
            loaded = _LOADED.get(key)
            if loaded is None:
                loaded = self._load()
                _LOADED[key] = loaded
            _READERS.add(self)
        self._loaded = loaded
        return loaded

    def _load(self) -> _Loaded:
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoTokenizer,
        )
        from transformers.utils import logging as hf_logging

        started = time.perf_counter()
        name_or_path, kwargs = load_folder_kwargs(self.source, self.spec)
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            with self._threads():
                config = AutoConfig.from_pretrained(name_or_path, **kwargs)
                seq2seq = bool(getattr(config, "is_encoder_decoder", False))
                auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
                tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
                model = auto.from_pretrained(name_or_path, dtype=self.dtype, **kwargs)
        except OSError as exc:
            raise InputError(
                f"reader {self.spec.name!r}: cannot load {name_or_path!r} "
                f"({str(exc).splitlines()[0]})"
            ) from None
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        model.to(self.device)
        model.eval()
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        context = (
            getattr(config, "max_position_embeddings", None)
            or getattr(config, "n_positions", None)
            or getattr(tokenizer, "model_max_length", None)
            or 2048
        )
        context = min(int(context), 1_000_000)
        params = sum(p.numel() for p in model.parameters())
        return _Loaded(
            model=model,
            tokenizer=tokenizer,
            device=self.device,
            dtype=self.dtype,
            is_seq2seq=seq2seq,
            chat=not seq2seq and bool(getattr(tokenizer, "chat_template", None)),
            context_length=context,
            num_parameters=params,
            load_seconds=time.perf_counter() - started,
            lock=threading.Lock(),
        )

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
        if loaded is None:
            return
        with _LOADED_LOCK:
            for key, entry in list(_LOADED.items()):
                if entry is loaded:
                    del _LOADED[key]
        on_cuda = loaded.device.type == "cuda"
        del loaded
        gc.collect()
        if on_cuda and torch.cuda.is_available():
            torch.cuda.empty_cache()

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        """Run with ``spec.num_threads`` torch CPU threads, restoring the previous setting."""
        previous = torch.get_num_threads()
        if previous != self.spec.num_threads:
            torch.set_num_threads(self.spec.num_threads)
        try:
            yield
        finally:
            if torch.get_num_threads() != previous:
                torch.set_num_threads(previous)

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

    def _input_limit(self, max_input_tokens: int | None) -> int:
        loaded = self._ensure()
        limit = max_input_tokens or self.spec.max_input_tokens
        ceiling = loaded.context_length - (0 if loaded.is_seq2seq else self.spec.max_new_tokens)
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
            raise InputError(
                f"reader {self.spec.name!r}: the prompt without any passage takes {overhead} "
                f"tokens, more than max_input_tokens={limit}"
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

    def _batches(self, order: list[int], prompts: list[list[int]]) -> Iterator[list[int]]:
        """Consecutive runs of ``order`` (prompt indices sorted by length) forming batches.

        At most ``batch_size`` prompts each; on CPU a batch is also closed before a prompt
        whose length would make padded positions exceed ``1 + CPU_PAD_SLACK`` times the real
        tokens (prefill compute is the CPU bottleneck, so padding costs time 1:1; on a GPU
        padding is nearly free and only ``batch_size`` applies).
        """
        slack = CPU_PAD_SLACK if self.device.type == "cpu" else None
        batch: list[int] = []
        real = 0
        for i in order:
            n = len(prompts[i])
            full = len(batch) >= self.spec.batch_size
            too_padded = (
                slack is not None and batch and n * (len(batch) + 1) > (1 + slack) * (real + n)
            )
            if batch and (full or too_padded):
                yield batch
                batch, real = [], 0
            batch.append(i)
            real += n
        if batch:
            yield batch

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

    def _generate(self, prompts: list[list[int]], on_batch: OnBatch | None = None) -> list[str]:
        loaded = self._ensure()
        tok = loaded.tokenizer
        pad = tok.pad_token_id
        eos = _eos_ids(loaded)
        config = _generation_config(self.spec.max_new_tokens, pad, eos)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        answers: list[str] = [""] * len(prompts)
        with self._threads(), loaded.lock, torch.inference_mode():
            for chunk in self._batches(order, prompts):
                rows = [prompts[i] for i in chunk]
                input_ids, mask = _pad(rows, pad, left=not loaded.is_seq2seq, device=loaded.device)
                began = time.perf_counter()
                out = loaded.model.generate(
                    input_ids=input_ids, attention_mask=mask, generation_config=config
                )
                if loaded.device.type == "cuda":
                    torch.cuda.synchronize(loaded.device)
                seconds = time.perf_counter() - began
                new = out[:, 1:] if loaded.is_seq2seq else out[:, input_ids.shape[1] :]
                generated = 0
                for row, i in zip(new.tolist(), chunk, strict=True):
                    row = _until_eos(row, eos)
                    generated += len(row)
                    answers[i] = postprocess_answer(tok.decode(row, skip_special_tokens=True))
                self.timings.append(
                    BatchTiming(
                        kind="generate",
                        size=len(chunk),
                        prompt_tokens=sum(len(r) for r in rows),
                        generated_tokens=generated,
                        padded_tokens=int(input_ids.numel()),
                        seconds=seconds,
                    )
                )
                if on_batch is not None:
                    on_batch(chunk, [answers[i] for i in chunk])
        return answers

    # -- relevance -----------------------------------------------------------------------------

    def yes_probability(self, items: Sequence[tuple[str, str]]) -> list[float]:
        """P(yes) for "is this passage relevant to / does it answer the question?" per pair.

        From the logits of the first answer token: the probability mass of the "yes" spellings
        (``yes``, ``Yes``, …) divided by that of "yes" + "no" spellings, so each value is in
        [0, 1] and ignores other tokens. Input order kept; ``[]`` for no items.
        """
        if not items:
            return []
        loaded = self._ensure()
        yes_ids, no_ids = (
            _word_ids(loaded.tokenizer, _YES_WORDS),
            _word_ids(loaded.tokenizer, _NO_WORDS),
        )
        if not yes_ids or not no_ids:
            raise InputError(f"reader {self.spec.name!r}: tokenizer has no single 'yes'/'no' token")
        limit = self._input_limit(None)
        prompts = [self._fitted_ids(q, [p], limit, relevance=True) for q, p in items]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[float] = [0.0] * len(prompts)
        model = loaded.model
        accepts = inspect.signature(model.forward).parameters
        with self._threads(), loaded.lock, torch.inference_mode():
            for chunk in self._batches(order, prompts):
                rows = [prompts[i] for i in chunk]
                left = not loaded.is_seq2seq
                ids, mask = _pad(
                    rows, loaded.tokenizer.pad_token_id, left=left, device=loaded.device
                )
                began = time.perf_counter()
                kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
                if loaded.is_seq2seq:
                    start_id = model.config.decoder_start_token_id
                    kwargs["decoder_input_ids"] = torch.full(
                        (len(rows), 1), start_id, dtype=torch.long, device=loaded.device
                    )
                else:
                    if "position_ids" in accepts:
                        kwargs["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
                    if "logits_to_keep" in accepts:
                        kwargs["logits_to_keep"] = 1
                logits = model(**kwargs).logits[:, -1, :].float()
                probs = torch.softmax(logits, dim=-1)
                p_yes = probs[:, yes_ids].sum(-1)
                p_no = probs[:, no_ids].sum(-1)
                ratio = (p_yes / (p_yes + p_no).clamp(min=1e-30)).tolist()
                seconds = time.perf_counter() - began
                for value, i in zip(ratio, chunk, strict=True):
                    out[i] = float(value)
                self.timings.append(
                    BatchTiming(
                        "score", len(chunk), sum(len(r) for r in rows), 0, int(ids.numel()), seconds
                    )
                )
        return out

    # -- accounting ----------------------------------------------------------------------------

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


# -- helpers -------------------------------------------------------------------------------------


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def _eos_ids(loaded: _Loaded) -> list[int]:
    ids: set[int] = set()
    configured = loaded.model.generation_config.eos_token_id
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    if loaded.tokenizer.eos_token_id is not None:
        ids.add(int(loaded.tokenizer.eos_token_id))
    return sorted(ids)


def _generation_config(max_new_tokens: int, pad: int, eos: list[int]) -> Any:
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad,
        eos_token_id=eos,
    )


def _pad(
    rows: list[list[int]], pad: int, left: bool, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if left:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
        else:
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device)


def _until_eos(row: list[int], eos: list[int]) -> list[int]:
    """Generated tokens up to and including the first end-of-sequence token."""
    for j, token in enumerate(row):
        if token in eos:
            return row[: j + 1]
    return row


def _word_ids(tokenizer: Any, words: Sequence[str]) -> list[int]:
    """Token ids of the spellings in ``words`` that are a single token."""
    ids: set[int] = set()
    for word in words:
        encoded = tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1:
            ids.add(int(encoded[0]))
    return sorted(ids)
