"""Loading a reader's model once: tokenizer, weights, context length, and generation settings.

A :class:`LoadedModel` is what :class:`~erag_dagster.readers.transformers_reader.TransformersReader`
shares between readers of the same fingerprint and device (each holds a ``lock`` so one batch
runs at a time). Remote code is never trusted.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from erag_dagster.core.errors import InputError
from erag_dagster.readers.models import ModelSource, load_folder_kwargs
from erag_dagster.readers.spec import ReaderSpec

__all__ = ["LoadedModel", "eos_ids", "generation_config", "load_model", "torch_threads"]


@dataclass
class LoadedModel:
    """A loaded model and what the reader needs to know about it."""

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
    reference: Any = None
    """The float64 twin of ``model`` for the margin guard (:mod:`.exact_greedy`), made on
    first need."""


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with ``n`` torch CPU threads, restoring the previous setting."""
    previous = torch.get_num_threads()
    if previous != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


def load_model(
    spec: ReaderSpec, source: ModelSource, dtype: torch.dtype, device: torch.device
) -> LoadedModel:
    """Load tokenizer and weights (remote code never trusted) on ``device`` in ``dtype``."""
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
    )
    from transformers.utils import logging as hf_logging

    started = time.perf_counter()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # also the one-off GGUF conversion's de-quantisation bar
    name_or_path = spec.model
    try:
        name_or_path, kwargs = load_folder_kwargs(source, spec)
        with torch_threads(spec.num_threads):
            config = AutoConfig.from_pretrained(name_or_path, **kwargs)
            seq2seq = bool(getattr(config, "is_encoder_decoder", False))
            auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
            tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
            model = auto.from_pretrained(name_or_path, dtype=dtype, **kwargs)
    except OSError as exc:
        raise InputError(
            f"reader {spec.name!r}: cannot load {name_or_path!r} ({str(exc).splitlines()[0]})"
        ) from None
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.to(device)
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
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        device=device,
        dtype=dtype,
        is_seq2seq=seq2seq,
        chat=not seq2seq and bool(getattr(tokenizer, "chat_template", None)),
        context_length=context,
        num_parameters=params,
        load_seconds=time.perf_counter() - started,
        lock=threading.Lock(),
    )


def eos_ids(loaded: LoadedModel) -> list[int]:
    ids: set[int] = set()
    configured = loaded.model.generation_config.eos_token_id
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    if loaded.tokenizer.eos_token_id is not None:
        ids.add(int(loaded.tokenizer.eos_token_id))
    return sorted(ids)


def generation_config(max_new_tokens: int, pad: int, eos: list[int]) -> Any:
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad,
        eos_token_id=eos,
    )
