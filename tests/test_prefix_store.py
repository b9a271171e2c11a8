"""Stored prompt prefixes (``erag_dagster.readers.prefix_store``) against no sharing at all.

On a CPU in float32 the transformers reader prefills every prompt from the longest token prefix
it has already computed — within a call (a passage two questions retrieved, the head of every
prompt) and across calls (an end-to-end list's top passage was an eRAG prompt before). The
reference is the same reader with ``share_prefix: false``: every prompt prefilled whole, in
length batches. Answers must be equal, P(yes) within float32 rounding, and the store must
actually have been read.
"""

from __future__ import annotations

import pytest
import torch

from erag_dagster.data.loaders import load_dataset
from erag_dagster.readers.batching import token_windows
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.prefix_store import MIN_REUSED_TOKENS, PrefixStore, plan_levels
from erag_dagster.registry import load_registry

FP32 = {"dtype": "float32", "device": "cpu", "num_threads": 1, "batch_size": 4}


def _items() -> tuple[list[tuple[str, str]], list[tuple[str, list[str]]]]:
    """eRAG pairs where passages repeat across questions, and top-3 lists whose leading
    passages repeat across lists and are eRAG passages (the default run's sharing pattern)."""
    ds = load_dataset("sample")
    texts = ds.corpus.get_column("text").to_list()
    questions = ds.queries.get_column("question").to_list()
    pairs = [(questions[q], texts[(q + j) % 5]) for q in range(3) for j in range(3)]
    lists = [(questions[q], [texts[q % 5], texts[(q + 1) % 5], texts[5 + q]]) for q in range(4)]
    return pairs, lists


@pytest.mark.parametrize(
    "reader_name", ["smollm2-135m", pytest.param("gemma3-270m", marks=pytest.mark.slow)]
)
def test_stored_prefixes_give_the_answers_and_probabilities_of_no_sharing(reader_name: str):
    config = load_registry().reader(reader_name).config
    stored = reader_from_config(reader_name, {**config, **FP32})
    plain = reader_from_config(reader_name, {**config, **FP32, "share_prefix": False})
    assert stored._reusing() and not plain._reusing()
    pairs, lists = _items()
    store = stored._ensure().prefixes
    store.clear()

    answers = stored.answer(pairs)
    reused_in_call = store.reused_tokens
    assert reused_in_call > 0  # the shared head and the repeated passages
    assert answers == plain.answer(pairs)

    before = store.reused_tokens
    end_to_end = stored.answer_with_contexts(lists)
    assert store.reused_tokens - before > 0  # from the eRAG prompts and the other lists
    assert end_to_end == plain.answer_with_contexts(lists)

    yes = stored.yes_probability(pairs)
    assert yes == pytest.approx(plain.yes_probability(pairs), abs=1e-5)
    prompt_tokens = sum(t.prompt_tokens for t in stored.timings)
    assert store.computed_tokens < prompt_tokens  # less prefill than the prompts hold


@pytest.mark.slow
def test_stored_prefixes_hold_past_gemmas_sliding_window() -> None:
    """Gemma 3's local layers attend 512 positions back: prompts longer than that, prefilled
    from stored prefixes (padding only in front), answer as without sharing."""
    config = {**load_registry().reader("gemma3-270m").config, **FP32}
    stored = reader_from_config("gemma3-270m", config)
    plain = reader_from_config("gemma3-270m", {**config, "share_prefix": False})
    ds = load_dataset("sample")
    texts = ds.corpus.get_column("text").to_list()
    question = ds.queries.get_column("question").to_list()[1]
    lists = [(question, texts[:6]), (question, [*texts[:5], texts[9]]), (question, texts[2:8])]
    limit = stored._input_limit(None)
    assert min(len(stored._fitted_ids(q, p, limit)) for q, p in lists) > 512
    assert stored.answer_with_contexts(lists) == plain.answer_with_contexts(lists)
    assert stored._ensure().prefixes.reused_tokens > 512


def test_plan_levels_computes_each_shared_segment_once() -> None:
    head = tuple(range(100, 120))
    a, b = head + (1, 2, 3) * 5, head + (1, 2, 3) * 5 + (7,)
    c, d = head + (4,) * 12 + (5,), head + (4,) * 12 + (6,)
    e = (9,) * 30  # shares nothing
    levels = plan_levels([a, b, c, d, e, e], lambda seq, limit: 0)
    planned = [seq for level in levels for seq in level]
    assert len(planned) == len(set(planned))  # each sequence once (e given twice)
    assert levels[0] == [head]  # the prefix of them all first
    assert a in levels[1] and head + (4,) * 12 in levels[1]  # a is b's prefix: before b
    assert set(levels[-1]) >= {b, c, d, e}
    # a shared prefix already held is not planned again
    held = plan_levels([c, d], lambda seq, limit: limit)
    assert held == [[c, d]]
    # too short to be worth a copy
    short = plan_levels([(1, 2, 3), (1, 2, 4)], lambda seq, limit: 0)
    assert short == [[(1, 2, 3), (1, 2, 4)]] and MIN_REUSED_TOKENS > 2


def test_store_finds_the_longest_prefix_and_keeps_within_its_budget() -> None:
    def layers(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2))]

    per_token = 2 * 2 * 4  # keys and values, 2 floats of 4 bytes
    store = PrefixStore(budget=40 * per_token)
    store.add(torch.arange(10), layers(10))
    store.add(torch.arange(20), layers(20))
    found, n = store.longest(torch.cat([torch.arange(15), torch.tensor([99])]), limit=16)
    assert n == 15 and found is not None and found[0][0].shape[2] == 20
    assert store.longest(torch.arange(30), limit=12)[1] == 12
    assert store.longest(torch.tensor([5, 6, 7]), limit=3) == (None, 0)
    store.add(torch.arange(100, 115), layers(15))  # 45 tokens > 40: the least recent goes
    assert store.nbytes <= store.budget and len(store) == 2
    assert store.longest(torch.arange(10), limit=10)[1] == 10  # from the 20-token entry
    store.add(torch.arange(50), layers(50))  # alone beyond the budget: not held
    assert len(store) == 2


def test_token_windows_keep_neighbours_together_within_the_budget() -> None:
    prompts = [[3, 1], [1, 2, 3], [1, 2], [2], [1, 2, 4, 5]]
    windows = token_windows(prompts, 5)
    assert [i for w in windows for i in w] == [2, 1, 4, 3, 0]  # token order
    assert all(sum(len(prompts[i]) for i in w) <= 5 or len(w) == 1 for w in windows)
