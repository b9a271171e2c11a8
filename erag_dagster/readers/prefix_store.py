"""Computed prompt prefixes, reused: each prompt is prefilled from the longest prefix whose
KV cache is already held, within a call and across calls (CPU, float32).

eRAG asks the reader about every retrieved document alone, then the end-to-end pass asks it
about the top-k documents together, and the run does this per retriever. The same token
prefixes come back again and again: a passage two questions retrieved (the prompt is
``head + passage + question``), the top document of an end-to-end list (its eRAG prompt is
``head + passage`` before the question), the lists of two retrievers that agree on their first
documents. One shared prefix per call (:mod:`.prefix_sharing`) catches only the template's
head; this store catches all of them.

How (:func:`prefill_all`, per window of prompts in token order): the prefixes the prompts
share with their token-order neighbours are planned as levels (:func:`plan_levels`: each shared
segment once, shortest first) and prefilled level by level in batches, each sequence from the
longest cache the store holds; a batch feeds every row the same number of tokens, a row with
fewer new tokens recomputing the stored positions just before them instead of padding between
prefix and new tokens (padding only in front; grouped by tokens left, so little is recomputed).
A row's cache covers all its tokens but the last, so the batch's one following step (the first
decode step, or the scoring pass) starts every row from its last token: the rows' caches are
left-padded into one batch cache (:func:`batch_cache`, layout ``padding | prompt``, positions
from the attention mask), the layout of plain left-padded generation, so the reader's batch
loop, stopping rules and the margin guard run unchanged.

Exactness: the key/value of position ``t`` depends only on tokens ``0 … t`` (causal attention,
positions ``0 … t``), so a cropped cache of another prompt with the same first ``n`` tokens is
that prompt's own cache up to float32 rounding of a different split of the same sums; answers
go through the margin guard (:mod:`.exact_greedy`) as in every other layout, and P(yes) agrees
to ~1e-6. Sliding-window layers (Gemma 3) keep every position here (plain layers) and the
window is applied by the attention mask over cache positions, which with padding only in
front are the true distances, so long prompts reuse too.

Policy: the store lives with the loaded model (one per model, dtype and device: a KV cache is
a function of those and the tokens), holds at most :data:`STORE_BYTES` of caches and drops the
least recently used first; a prefix shorter than :data:`MIN_REUSED_TOKENS` is not worth a copy
and is recomputed. Not used on a GPU (there a padded batch prefill costs little and the one
shared head of :mod:`.prefix_sharing` serves), for encoder-decoder models, or where
``share_prefix`` is off.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from erag_dagster.readers.batching import length_batches

__all__ = [
    "MIN_REUSED_TOKENS",
    "STORE_BYTES",
    "WINDOW_TOKENS",
    "PrefixStore",
    "batch_cache",
    "plan_levels",
    "prefill_all",
]

#: The most bytes of KV caches one loaded model's store holds (2 GiB: about 45,000 tokens of
#: SmolLM2-135M, 57,000 of Gemma 3 270M in float32 — the default run's prompts of one reader
#: and one retriever several times over).
STORE_BYTES = 2 << 30
#: Prompt tokens prefilled together before their batches run (:func:`prefill_all` per window
#: of prompts in token order): their caches are held at once (32,768 tokens: about 1.5 GB of
#: SmolLM2-135M float32 caches), so a long call keeps a bounded footprint.
WINDOW_TOKENS = 32_768
#: A stored prefix shorter than this is recomputed rather than copied.
MIN_REUSED_TOKENS = 8

Layers = list[tuple[torch.Tensor, torch.Tensor]]
"""Per decoder layer, ``(keys, values)`` of shape ``[1, heads, tokens, head_dim]``."""


@dataclass
class _Entry:
    tokens: torch.Tensor  # 1-D long, CPU: the tokens the cache covers
    layers: Layers
    nbytes: int


class PrefixStore:
    """KV caches of token sequences, least recently used dropped beyond ``budget`` bytes."""

    def __init__(self, budget: int = STORE_BYTES) -> None:
        self.budget = budget
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self._bytes = 0
        self.reused_tokens = 0
        """Prompt tokens read from the store instead of computed (since creation)."""
        self.computed_tokens = 0
        """Prompt tokens computed by :func:`prefill_all` (since creation)."""
        self.padded_tokens = 0
        """Input positions fed to the model by :func:`prefill_all`, padding and recomputed
        positions included (since creation)."""

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes of KV caches held."""
        return self._bytes

    def longest(
        self, tokens: torch.Tensor, limit: int, touch: bool = True
    ) -> tuple[Layers | None, int]:
        """The stored cache sharing the longest token prefix with ``tokens`` (at most
        ``limit`` tokens) and that length; ``(None, 0)`` below :data:`MIN_REUSED_TOKENS`.
        ``touch``: count it as used (least recently used order)."""
        best: tuple[int, ...] | None = None
        length = 0
        for key, entry in self._entries.items():
            m = min(limit, entry.tokens.shape[0])
            if m <= length:
                continue
            same = entry.tokens[:m] == tokens[:m]
            n = m if bool(same.all()) else int(same.to(torch.int8).argmin())
            if n > length:
                best, length = key, n
        if best is None or length < MIN_REUSED_TOKENS:
            return None, 0
        if touch:
            self._entries.move_to_end(best)
        return self._entries[best].layers, length

    def add(self, tokens: torch.Tensor, layers: Layers) -> None:
        """Hold ``layers`` as the cache of ``tokens`` (nothing when it alone exceeds the
        budget), dropping the least recently used entries beyond the budget."""
        key = tuple(tokens.tolist())
        nbytes = sum(k.nbytes + v.nbytes for k, v in layers)
        if nbytes > self.budget:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes
        self._entries[key] = _Entry(tokens.clone(), layers, nbytes)
        self._bytes += nbytes
        while self._bytes > self.budget:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.nbytes

    def clear(self) -> None:
        """Drop every cache."""
        self._entries.clear()
        self._bytes = 0


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plan_levels(targets: Sequence[tuple[int, ...]], held: Any) -> list[list[tuple[int, ...]]]:
    """The sequences to prefill, in levels computed one after another (first level first), so
    every token segment two targets share is computed once: besides the targets, each prefix
    a target shares with its token-order neighbour (at least :data:`MIN_REUSED_TOKENS`, longer
    than what ``held(seq, limit)`` — tokens already stored — covers) joins an earlier level,
    recursively; a sequence is planned once, at its earliest level."""
    levels: list[list[tuple[int, ...]]] = []
    current = sorted(set(targets))
    while current:
        shared: set[tuple[int, ...]] = set()
        for i, seq in enumerate(current):
            p = 0
            if i > 0:
                p = _lcp(current[i - 1], seq)
            if i + 1 < len(current):
                p = max(p, _lcp(seq, current[i + 1]))
            if MIN_REUSED_TOKENS <= p < len(seq) and held(seq, p) < p:
                shared.add(seq[:p])
        levels.append([seq for seq in current if seq not in shared])
        current = sorted(shared)
    planned: set[tuple[int, ...]] = set()
    ordered = []
    for level in reversed(levels):
        fresh = [seq for seq in level if seq not in planned]
        planned.update(fresh)
        if fresh:
            ordered.append(fresh)
    return ordered


def _prefill_level(
    model: Any,
    store: PrefixStore,
    level: Sequence[tuple[int, ...]],
    device: torch.device,
    cache_name: str,
    accepts: Any,
    batch_size: int,
    slack: float | None,
) -> None:
    """Prefill every sequence of ``level`` into ``store``, batched: each from its longest stored
    prefix, rows grouped by the number of tokens left to compute (:func:`length_batches` with
    ``slack``). A batch feeds every row the
    same number of tokens ``S`` (its longest remainder); a row with a shorter remainder
    recomputes the last stored positions before it instead of padding between prefix and new
    tokens, so padding is only ever in front (``padding | prefix | new``: true positions and
    true distances for sliding-window masks)."""
    from transformers import DynamicCache

    start = []
    for seq in level:
        layers, n = store.longest(torch.tensor(seq, dtype=torch.long), len(seq))
        if n < len(seq):  # else held already
            start.append((len(seq) - n, seq, layers, n))
    remainders = [range(rest) for rest, *_ in start]
    for indices in length_batches(remainders, batch_size, slack):
        chunk = [start[i] for i in indices]
        width = max(rest for rest, *_ in chunk)
        cached = [max(0, len(seq) - width) for _, seq, _, _ in chunk]
        front = max(cached)
        rows = len(chunk)
        ids = torch.zeros((rows, width), dtype=torch.long)
        mask = torch.zeros((rows, front + width), dtype=torch.long)
        per_row: list[Layers] = []
        for r, ((_, seq, layers, _n), c) in enumerate(zip(chunk, cached, strict=True)):
            fed = seq[c:]
            ids[r, width - len(fed) :] = torch.tensor(fed, dtype=torch.long)
            mask[r, front - c : front] = 1
            mask[r, front + width - len(fed) :] = 1
            per_row.append(
                [] if layers is None or c == 0 else [(k[:, :, :c], v[:, :, :c]) for k, v in layers]
            )
        cache = batch_cache(per_row, front) if front else DynamicCache()
        kwargs: dict[str, Any] = {
            "input_ids": ids.to(device),
            "attention_mask": mask.to(device),
            cache_name: cache,
            "use_cache": True,
        }
        if "position_ids" in accepts:
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, front:]
            kwargs["position_ids"] = positions.to(device)
        if "logits_to_keep" in accepts:
            kwargs["logits_to_keep"] = 1  # only the cache is wanted
        model(**kwargs)
        for r, (_, seq, _, n) in enumerate(chunk):
            own = [
                (
                    layer.keys[r : r + 1, :, -len(seq) :].clone(),
                    layer.values[r : r + 1, :, -len(seq) :].clone(),
                )
                for layer in cache.layers
            ]
            store.add(torch.tensor(seq, dtype=torch.long), own)
            store.reused_tokens += n
            store.computed_tokens += len(seq) - n
        store.padded_tokens += rows * width


def prefill_all(
    model: Any,
    store: PrefixStore,
    rows: Sequence[Sequence[int]],
    device: torch.device,
    cache_name: str,
    accepts: Any,
    batch_size: int,
    slack: float | None,
) -> list[Layers]:
    """Per row, the KV cache of all its tokens but the last (module docstring): the rows and
    the prefixes they share are planned (:func:`plan_levels`) and prefilled level by level in
    batches of ``batch_size`` (``slack``: :func:`length_batches`); the rows' caches are
    returned (held here, whatever the store drops later). ``cache_name``: the forward's cache
    keyword; ``accepts``: its parameters. A row of one token gets an empty cache."""
    targets = [tuple(row[:-1]) for row in rows]

    def held(seq: tuple[int, ...], limit: int) -> int:
        return store.longest(torch.tensor(seq, dtype=torch.long), limit, touch=False)[1]

    for level in plan_levels([t for t in targets if t], held):
        _prefill_level(model, store, level, device, cache_name, accepts, batch_size, slack)
    out: list[Layers] = []
    for seq in targets:
        if not seq:
            out.append([])
            continue
        layers, n = store.longest(torch.tensor(seq, dtype=torch.long), len(seq))
        if layers is None or n < len(seq):  # dropped by the budget meanwhile: compute alone
            _prefill_level(model, store, [seq], device, cache_name, accepts, 1, None)
            layers, n = store.longest(torch.tensor(seq, dtype=torch.long), len(seq))
        assert layers is not None and n == len(seq)
        out.append([(k[:, :, :n], v[:, :, :n]) for k, v in layers])
    return out


def batch_cache(per_row: Sequence[Layers], width: int) -> Any:
    """One DynamicCache of ``width`` positions for the batch: each row's cache left-padded with
    zeros (masked by the batch's attention mask, ``padding | prompt``)."""
    from transformers import DynamicCache

    some = next((layers for layers in per_row if layers), None)
    if some is None:
        return DynamicCache()
    merged = []
    for i in range(len(some)):
        keys, values = [], []
        for layers in per_row:
            if layers:
                k, v = layers[i]
            else:
                k = some[i][0][:, :, :0]
                v = some[i][1][:, :, :0]
            pad = width - k.shape[2]
            keys.append(torch.nn.functional.pad(k, (0, 0, pad, 0)))
            values.append(torch.nn.functional.pad(v, (0, 0, pad, 0)))
        merged.append((torch.cat(keys), torch.cat(values)))
    return DynamicCache(ddp_cache_data=merged)
