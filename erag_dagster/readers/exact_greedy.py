"""Greedy answers that are a function of (reader, prompt) alone: the margin guard.

Greedy decoding takes the arg-max token at each step. Floating-point sums depend on the order
they are taken in, and that order depends on the batch (its width, its padding, which rows share
it, a shared prefix's KV cache), on the thread count and on the CPU's kernels (AVX2, AVX-512,
AMX): a logit computed in float32 differs from the exact value by some small ``e`` that changes
with all of these. The arg-max can only change when the top two logits are within ``2e``.

The guard (float32 readers): every decode step records the gap between the top two logits of
each row (:class:`GapRecorder`). A row whose smallest gap over the steps that made its answer is
below :data:`MARGIN_FLOOR` is decoded again alone (batch 1, no padding, no shared prefix) by a
float64 copy of the model (:func:`reference_answer`), whose rounding error is ~1e-12 of a
logit. Every other row keeps its float32 answer.

Why this makes the answer the same everywhere: if float32's error is below
``MARGIN_FLOOR / 2`` on every machine, a row that passes the guard on one machine has the exact
arg-max at every step (its float32 gap is at least the floor, the exact gap is positive), and a
row that fails it gets float64's answer, which is the exact arg-max unless two exact logits are
within ~1e-9 (a true tie: then float64 still picks one, the same on every x86-64 CPU we
measured). Either way the answer is the greedy answer of the exact-arithmetic model. The floor
(:data:`MARGIN_FLOOR`) is ~25x float32's largest logit error measured across batch layouts,
thread counts and CPU kernel paths (``bench/determinism.py``; docs/reader.md "Determinism"). bf16
and fp16 carry errors of ~0.1 logit, so no floor of this kind is cheap there: those dtypes are
explicit, hardware-recorded choices (:mod:`.hardware`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor

__all__ = [
    "GUARD_VERSION",
    "MARGIN_FLOOR",
    "REFERENCE_DTYPE",
    "GapRecorder",
    "decided_steps",
    "guard_identity",
    "reference_model",
]

GUARD_VERSION = 1
"""Bumped when the guard's rule changes (it is in the reader fingerprint)."""
MARGIN_FLOOR = 0.002
"""Top-1 minus top-2 logit (natural-log units) below which a float32 row is decoded again in
float64: ~25x float32's largest logit error measured here, 7.8e-5 (SmolLM2, 60 pairs, batch 1
and 16, native AVX-512 / AVX2 / SSE kernels, 1 and 2 threads: ``bench/determinism.py``)."""
REFERENCE_DTYPE = torch.float64
"""The dtype of the reference decode."""


def guard_identity() -> dict[str, Any]:
    """What the fingerprint records of the guard (its rule decides answers near ties)."""
    return {
        "version": GUARD_VERSION,
        "margin_floor": MARGIN_FLOOR,
        "reference_dtype": str(REFERENCE_DTYPE).removeprefix("torch."),
    }


class GapRecorder(LogitsProcessor):
    """A logits processor that changes nothing and records, per step, each row's gap between its
    top two scores (float32, on the CPU). Use one per ``generate`` call."""

    def __init__(self) -> None:
        self.gaps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        top = scores.topk(2, dim=-1).values.float()
        self.gaps.append((top[:, 0] - top[:, 1]).cpu())
        return scores

    def smallest(self, steps: Sequence[int]) -> list[float]:
        """Per row, the smallest gap over its first ``steps[row]`` steps (``inf`` for 0 steps:
        a row that generated nothing decided nothing)."""
        if not self.gaps:
            return [math.inf] * len(steps)
        table = torch.stack(self.gaps, dim=1)  # rows x steps
        out = []
        for row, n in enumerate(steps):
            n = min(n, table.shape[1])
            out.append(float(table[row, :n].min()) if n > 0 else math.inf)
        return out


def decided_steps(row: Sequence[int], stopped_at: int | None, eos: Sequence[int]) -> int:
    """How many decode steps chose the tokens an answer is made of: up to the answer stop
    (``stopped_at``) or the first end-of-sequence token, both included, else every step."""
    n = len(row) if stopped_at is None else min(stopped_at, len(row))
    for j, token in enumerate(row[:n]):
        if token in eos:
            return j + 1
    return n


def reference_model(model: Any) -> Any:
    """A float64 copy of ``model`` (same device), for :data:`REFERENCE_DTYPE` decodes."""
    twin = copy.deepcopy(model)
    twin.to(REFERENCE_DTYPE)
    twin.eval()
    return twin
