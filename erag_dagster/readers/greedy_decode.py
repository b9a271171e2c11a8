"""Greedy decoding that drops each row from the batch as soon as it is done.

transformers' ``generate`` keeps a batch's shape until its last row stops: a row that has ended
(end of sequence, or its answer final: :mod:`.stopping`) is padded and still runs through the
model at every step, so a batch decodes at the cost of all its rows until its longest answer
ends. On a CPU that cost follows the row count: measured here (SmolLM2 135M, float32, 2 cores,
300-token prompts) a decode step took 287 ms with 16 rows, 177 ms with 4, 147 ms with 2 and
94 ms with 1. :func:`greedy_decode` runs the same greedy loop and, after each step, removes the
rows that have ended from the KV cache, the attention mask and the positions, so the steps after
most answers are final cost the rows still decoding.

**The same answers.** Every row sees the same tokens at the same positions, with the same
attention mask, as in ``generate`` (positions are the mask's cumulative sum, so the padding of a
left-padded or shared-prefix row, :mod:`.prefix_sharing`, does not shift them), and chooses the
arg-max of its float32 logits; only the batch's shape changes from step to step. In float32 that
changes rounding only, as any batch layout does, and the margin guard (:mod:`.exact_greedy`)
decides every row whose greedy choice came near a tie with the float64 twin, as it does for
``generate``'s output (``tests/test_greedy_decode.py`` compares both on real prompts of the
packaged readers). In bf16 (never guarded) answers may flip as with any change of batch layout.

**Policy**: decoder-only models (an encoder-decoder's rows go through ``generate``); greedy only
(the project's readers never sample); a row ends at its first end-of-sequence token (kept in its
tokens), when ``final`` holds for its decoded text (``stopped``, as :class:`.stopping.AnswerStop`
records it), or at ``max_new_tokens``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from erag_dagster.readers.prefix_sharing import cache_kwarg

__all__ = ["Decoded", "greedy_decode"]


@dataclass
class Decoded:
    """What :func:`greedy_decode` made of a batch, one entry per row in input order.

    ``tokens``: the generated ids (an end-of-sequence token kept, nothing after it);
    ``stopped``: the token count at which ``final`` ended the row (``None``: it did not);
    ``gaps``: with ``record_gaps``, the gap between the two best float32 logits at each step the
    row decoded (empty otherwise)."""

    tokens: list[list[int]]
    stopped: list[int | None]
    gaps: list[list[float]] = field(default_factory=list)

    def smallest(self, steps: Sequence[int]) -> list[float]:
        """Per row, the smallest gap over its first ``steps[row]`` steps (``inf`` for none: a
        row that decided nothing, or gaps not recorded) — as
        :meth:`.exact_greedy.GapRecorder.smallest`."""
        out = []
        for row, n in enumerate(steps):
            recorded = self.gaps[row][:n] if row < len(self.gaps) else []
            out.append(min(recorded) if recorded else math.inf)
        return out


def greedy_decode(
    model: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    cache: Any,
    *,
    max_new_tokens: int,
    eos: Sequence[int],
    final: Callable[[str], bool] | None,
    decode: Callable[[list[list[int]]], list[str]],
    record_gaps: bool,
) -> Decoded:
    """Greedy tokens of a left-padded batch (``ids``, ``mask``: rows × width), each row dropped
    from the batch once it has ended (module docstring).

    ``cache``: a KV cache of the batch's first ``cache.get_seq_length()`` columns (a shared
    prefix, :mod:`.prefix_sharing`), or ``None``; it is consumed (grown and cut). ``decode``
    turns token rows into texts for ``final`` (the tokenizer's ``batch_decode`` without special
    tokens); ``final=None`` ends rows at end of sequence or ``max_new_tokens`` only."""
    from transformers import DynamicCache

    rows = ids.shape[0]
    accepts = inspect.signature(model.forward).parameters
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    if cache is None:
        cache = DynamicCache(config=model.config)
        fed = ids
    else:
        cached = cache.get_seq_length()
        fed, positions = ids[:, cached:], positions[:, cached:]
    ends = set(eos)
    out = Decoded([[] for _ in range(rows)], [None] * rows, [[] for _ in range(rows)])
    live = list(range(rows))  # the input rows still in the batch, in batch order
    for step in range(max_new_tokens):
        kwargs: dict[str, Any] = {cache_kwarg(model): cache, "use_cache": True}
        if "position_ids" in accepts:
            kwargs["position_ids"] = positions
        if "logits_to_keep" in accepts:
            kwargs["logits_to_keep"] = 1
        logits = model(input_ids=fed, attention_mask=mask, **kwargs).logits[:, -1, :].float()
        chosen = logits.argmax(-1)
        picked = chosen.tolist()
        if record_gaps:
            top = logits.topk(2, dim=-1).values
            for j, gap in enumerate((top[:, 0] - top[:, 1]).tolist()):
                out.gaps[live[j]].append(gap)
        going = []
        for j, token in enumerate(picked):
            out.tokens[live[j]].append(token)
            if token not in ends:
                going.append(j)
        if final is not None and going:
            texts = decode([out.tokens[live[j]] for j in going])
            kept = []
            for j, text in zip(going, texts, strict=True):
                if final(text):
                    out.stopped[live[j]] = len(out.tokens[live[j]])
                else:
                    kept.append(j)
            going = kept
        if not going or step + 1 == max_new_tokens:
            break
        if len(going) < len(live):
            index = torch.tensor(going, dtype=torch.long, device=ids.device)
            cache.batch_select_indices(index)
            mask, chosen, positions = mask[index], chosen[index], positions[index]
            live = [live[j] for j in going]
        mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
        positions = positions[:, -1:] + 1
        fed = chosen[:, None]
    if not record_gaps:
        out.gaps = []
    return out
