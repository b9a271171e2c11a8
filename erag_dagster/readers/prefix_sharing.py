"""Shared-prefix KV cache: the prompt tokens every prompt of a call shares are prefilled once.

eRAG asks the reader about each of a query's k documents alone, so the k prompts (and, across
queries, every prompt) start with the same tokens: the chat template's head, the system prompt,
few-shot turns, the user template's text before its first placeholder (with a question-first
template, the question too). :func:`shared_prefix` finds the longest token prefix all prompts of
one reader call share; :func:`prefill` runs the model on it once; each batch then starts from a
copy of that cache grown to the batch (:func:`cache_for_batch`) and prefills only its own
tokens.

Rows are laid out ``prefix | padding | own tokens`` (:func:`~.batching.pad_batch` with
``shared``) and positions are the attention mask's cumulative sum, so every row sees the same
tokens at the same positions as in plain left-padded generation: the same computation split in
two passes. In float32 the answers are those of plain generation (``tests/test_prefix_sharing``).
In bf16 the two passes round differently and greedy answers flip as with any change of batch
layout (13% of SmolLM2's and 19% of Gemma's answers on 90 sample pairs here), so the reader's
``share_prefix: auto`` (default) shares in float32 only. The reader fingerprint does not hash
it, as it does not hash ``batch_size``.

Policy: decoder-only models only; a call with fewer than 2 prompts or a shared prefix shorter
than :data:`MIN_SHARED_TOKENS` prefills as before; the prefix stops at least one token before
the end of the shortest prompt (each row keeps one token of its own, whose logits start its
answer or score).

Sliding-window attention (Gemma 3's local layers: 512 tokens; Mistral): the window is applied
to cache positions, and the padding *inside* a shared-prefix row (``prefix | padding | own``)
puts the prefix further back than its true distance, so a layer would stop seeing prefix tokens
it must see. A call shares only when no row can get longer than the window
(:func:`window_allows_sharing`: its longest prompt plus the tokens it may generate). Measured
here before that rule: Gemma 3 270M's end-to-end answers to the default run's 30 hybrid top-3
lists (prompts of 359 to 856 tokens) differed from the unshared ones on 6 of 30 — "oxygen"
where float64 says "Oxygen" (top-2 gap 0.045), far beyond float32 rounding.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = [
    "MIN_SHARED_TOKENS",
    "cache_for_batch",
    "cache_kwarg",
    "decoder_inputs",
    "prefill",
    "shared_prefix",
    "sliding_window",
    "window_allows_sharing",
]

#: Below this many shared tokens the extra forward pass is not worth it.
MIN_SHARED_TOKENS = 8


def shared_prefix(prompts: Sequence[Sequence[int]], ends: Sequence[int] | None = None) -> int:
    """Length of the longest token prefix shared by every prompt, at most ``min(ends) - 1``
    (``ends``: where each prompt's own part must still begin; default each prompt's length).
    0 when there are fewer than 2 prompts or the prefix is shorter than
    :data:`MIN_SHARED_TOKENS`."""
    if len(prompts) < 2:
        return 0
    first = prompts[0]
    limit = min(ends if ends is not None else (len(p) for p in prompts)) - 1
    n = 0
    while n < limit and all(p[n] == first[n] for p in prompts):
        n += 1
    return n if n >= MIN_SHARED_TOKENS else 0


def sliding_window(config: Any) -> int | None:
    """The attention window (tokens) of a model whose layers use one, else ``None``: a config
    with an integer ``sliding_window`` whose ``layer_types`` (when given) name a sliding layer
    and that does not turn it off (``use_sliding_window: false``, as Qwen 2 configs do)."""
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or window <= 0:
        return None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types and not any("sliding" in str(t) for t in layer_types):
        return None
    return window


def window_allows_sharing(config: Any, prompts: Sequence[Sequence[int]], new_tokens: int) -> bool:
    """Whether a shared prefix is safe for ``prompts`` (module docstring): no sliding window,
    or every row (longest prompt + ``new_tokens``) fits in it."""
    window = sliding_window(config)
    longest = max((len(p) for p in prompts), default=0)
    return window is None or longest + new_tokens <= window


def cache_kwarg(model: Any) -> str:
    """The name the model's ``forward`` takes its KV cache by (``cache`` since transformers 5,
    ``past_key_values`` before)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def prefill(model: Any, prefix: Sequence[int], device: torch.device) -> Any:
    """The KV cache of ``prefix`` (one row; positions ``0 … len(prefix) − 1``)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    ids = torch.tensor([list(prefix)], dtype=torch.long, device=device)
    kwargs: dict[str, Any] = {cache_kwarg(model): cache, "use_cache": True}
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        kwargs["logits_to_keep"] = 1  # only the KV cache is wanted
    model(input_ids=ids, **kwargs)
    return cache


def cache_for_batch(cache: Any, rows: int) -> Any:
    """A copy of the one-row ``cache`` repeated to ``rows`` rows (the original stays intact:
    generation appends to the copy)."""
    grown = copy.deepcopy(cache)
    if rows > 1:
        grown.batch_repeat_interleave(rows)
    return grown


def decoder_inputs(
    loaded: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    cache: Any,
    accepts: Mapping[str, Any],
) -> dict[str, Any]:
    """A decoder-only forward's ``input_ids`` and ``position_ids`` (from the mask, so padding
    does not shift positions), after a cached prefix (``cache``: only the uncached columns are
    fed, the mask stays whole) or without one. ``loaded``: the
    :class:`~erag_dagster.readers.loading.LoadedModel`; ``accepts``: its forward's parameters
    (``position_ids`` is passed only where accepted)."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    if cache is None:
        out: dict[str, Any] = {"input_ids": ids}
    else:
        cached = cache.get_seq_length()
        out = {"input_ids": ids[:, cached:], cache_kwarg(loaded.model): cache}
        positions = positions[:, cached:]
    if "position_ids" in accepts:
        out["position_ids"] = positions
    return out
