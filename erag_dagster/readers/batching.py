"""Batching prompts of token ids: length batches, padding, per-batch timings, token helpers.

Prompts are sorted by length and cut into consecutive runs (:func:`length_batches`) so padding
stays small: at most ``batch_size`` prompts each, and with ``slack`` (CPU) a batch is closed
before a prompt whose length would make padded positions exceed ``1 + slack`` times the real
tokens (prefill compute is the CPU bottleneck, so padding costs time 1:1; on a GPU padding is
nearly free and only ``batch_size`` applies).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["CPU_PAD_SLACK", "BatchTiming", "length_batches", "pad_batch", "until_eos", "word_ids"]

#: On CPU, a batch's padded positions stay within (1 + this) x its real prompt tokens (the
#: ``slack`` of :func:`length_batches` the transformers reader passes on CPU).
CPU_PAD_SLACK = 0.25


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


def length_batches(
    prompts: Sequence[Sequence[int]], batch_size: int, slack: float | None
) -> Iterator[list[int]]:
    """Indices of ``prompts`` sorted by length (stable), cut into batches (module docstring)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    batch: list[int] = []
    real = 0
    for i in order:
        n = len(prompts[i])
        full = len(batch) >= batch_size
        too_padded = slack is not None and batch and n * (len(batch) + 1) > (1 + slack) * (real + n)
        if batch and (full or too_padded):
            yield batch
            batch, real = [], 0
        batch.append(i)
        real += n
    if batch:
        yield batch


def pad_batch(
    rows: list[list[int]], pad: int, left: bool, device: torch.device, shared: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of ``rows`` padded to the longest with ``pad`` (on the
    left for decoder-only models, so every prompt ends where generation starts).

    ``shared`` (left padding only): the rows' first ``shared`` tokens are one prefix every row
    has; it stays in the first columns and the padding goes after it (``prefix | padding |
    rest``), so a cache of the prefix fits every row (:mod:`.prefix_sharing`)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span] = torch.tensor(row, dtype=torch.long)
        mask[i, span] = 1
        if left and shared and len(row) < width:
            ids[i, :shared] = torch.tensor(row[:shared], dtype=torch.long)
            mask[i, :shared] = 1
            ids[i, shared : width - len(row) + shared] = pad
            mask[i, shared : width - len(row) + shared] = 0
    return ids.to(device), mask.to(device)


def until_eos(row: list[int], eos: list[int]) -> list[int]:
    """Generated tokens up to and including the first end-of-sequence token."""
    for j, token in enumerate(row):
        if token in eos:
            return row[: j + 1]
    return row


def word_ids(tokenizer: Any, words: Sequence[str]) -> list[int]:
    """Token ids of the spellings in ``words`` that are a single token."""
    ids: set[int] = set()
    for word in words:
        encoded = tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1:
            ids.add(int(encoded[0]))
    return sorted(ids)
