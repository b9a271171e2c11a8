"""Prefix-shared, line-stopped generation against plain generation, on the real packaged readers.

The reader prefills the prompt prefix a call's prompts share once and reuses its KV cache
(``erag_dagster.readers.prefix_sharing``), and stops a row once its answer is final
(``erag_dagster.readers.stopping``). The reference here is plain ``generate`` written out in the
test: one prompt at a time, no cache given, no stopping criterion, ``max_new_tokens`` tokens,
post-processed. In float32 both must give the same answers; likelihoods and P(yes) the same
values with and without the shared prefix.
"""

from __future__ import annotations

import pytest
import torch

from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.readers.batching import pad_batch, until_eos
from erag_dagster.readers.extraction import extract_answer
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.loading import eos_ids, generation_config
from erag_dagster.readers.prefix_sharing import MIN_SHARED_TOKENS, shared_prefix

FP32 = {"dtype": "float32", "device": "cpu", "num_threads": 1, "batch_size": 8}


def _pairs(n_queries: int = 6, per_query: int = 3) -> list[tuple[str, str]]:
    """(question, passage) pairs of the embedded sample: each question with its own article's
    first passages (answerable or not: the reader writes short and long answers)."""
    ds = load_dataset("sample")
    texts = ds.corpus.get_column("text").to_list()
    questions = ds.queries.get_column("question").to_list()
    step = max(1, len(texts) // n_queries)
    return [
        (questions[q * len(questions) // n_queries], texts[(q * step + j) % len(texts)])
        for q in range(n_queries)
        for j in range(per_query)
    ]


def _plain_answers(reader: object, items: list[tuple[str, str]]) -> list[str]:
    """The reference: each prompt alone through ``generate``, no cache, no stopping rule."""
    loaded = reader._ensure()
    limit = reader._input_limit(None)
    eos = eos_ids(loaded)
    config = generation_config(reader.spec.max_new_tokens, loaded.tokenizer.pad_token_id, eos)
    answers = []
    with torch.inference_mode():
        for question, passage in items:
            ids = reader._fitted_ids(question, [passage], limit)
            out = loaded.model.generate(
                input_ids=torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                generation_config=config,
            )
            row = until_eos(out[0, len(ids) :].tolist(), eos)
            text = loaded.tokenizer.decode(row, skip_special_tokens=True)
            answers.append(extract_answer(text))
    return answers


@pytest.mark.parametrize(
    "reader_name", ["smollm2-135m", pytest.param("gemma3-270m", marks=pytest.mark.slow)]
)
def test_prefix_shared_generation_equals_plain_generation_fp32(reader_name: str) -> None:
    entry = load_registry().reader(reader_name)
    small_batches = {**FP32, "batch_size": 4}
    reader = reader_from_config(reader_name, {**entry.config, **small_batches}).load()
    items = _pairs(2, 3)  # 6 pairs: batches of 4 and 2, rows of different lengths
    limit = reader._input_limit(None)
    prompts = [reader._fitted_ids(q, [p], limit) for q, p in items]
    assert reader._shared(prompts) >= MIN_SHARED_TOKENS  # the shared path is the one tested
    assert len({len(p) for p in prompts}) > 1  # rows of different lengths: padding after it
    reader.reset_timings()
    answers = reader.answer(items)
    assert answers == _plain_answers(reader, items)
    # every row stopped by its first line's end or EOS: no batch ran all 16 steps for nothing
    generated = sum(t.generated_tokens for t in reader.timings)
    assert generated < len(items) * reader.spec.max_new_tokens
    plain = {"share_prefix": False, "stop_at_line_end": False}
    off = reader_from_config(reader_name, {**entry.config, **small_batches, **plain})
    assert off.fingerprint == reader.fingerprint  # not hashed: they do not change answers
    assert off.answer(items) == answers
    decoded_to_the_end = sum(t.generated_tokens for t in off.timings)
    # SmolLM2 (chat) ends its answers with EOS right after the first line (18 pairs: 204 tokens
    # either way); Gemma (base model) writes on after it (18 pairs: 154 vs 288 tokens measured)
    assert decoded_to_the_end >= generated
    if reader_name == "gemma3-270m":
        assert decoded_to_the_end > generated


@pytest.mark.slow
def test_likelihoods_and_yes_probability_equal_with_and_without_the_shared_prefix() -> None:
    shared = reader_from_config("smollm2-135m", FP32).load()
    plain = reader_from_config("smollm2-135m", {**FP32, "share_prefix": False})
    items = _pairs(2, 3)
    conts = [(q, p, c) for q, p in items for c in (" Paris", " the year 1989")]
    with_prefix = shared.continuation_log_probs(conts)
    without = plain.continuation_log_probs(conts)
    assert [len(r) for r in with_prefix] == [len(r) for r in without]
    for a, b in zip(with_prefix, without, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
    assert shared.yes_probability(items) == pytest.approx(plain.yes_probability(items), abs=1e-5)


def test_share_prefix_setting() -> None:
    from erag_dagster.core.errors import InputError
    from erag_dagster.readers.spec import ReaderSpec

    with pytest.raises(InputError, match="share_prefix must be true, false or auto"):
        ReaderSpec.from_dict({"share_prefix": "yes"}, name="r")
    with pytest.raises(InputError, match="do not apply to backend 'openai'"):
        ReaderSpec.from_dict(
            {"backend": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1",
             "share_prefix": True}, name="r",
        )  # fmt: skip
    # auto: float32 shares, bf16 does not (its answers would change); nothing is loaded for it
    prompts = [[*range(100, 120), 1], [*range(100, 120), 2]]
    bf16 = reader_from_config("r", {"dtype": "bfloat16", "device": "cpu"})
    assert bf16._shared(prompts) == 0
    assert bf16.fingerprint != reader_from_config("r", {"dtype": "float32"}).fingerprint


def test_shared_prefix_length_policy() -> None:
    base = list(range(100, 112))
    assert shared_prefix([[*base, 1, 2], [*base, 3]]) == 12
    # at least one own token per prompt: the prefix stops before the shortest prompt's end
    assert shared_prefix([[*base, 1], [*base, 1, 2]]) == 12
    assert shared_prefix([base, [*base, 5]]) == 11
    assert shared_prefix([[*base, 1, 2]], None) == 0  # one prompt: nothing to share
    assert shared_prefix([[*base[:5], 1], [*base[:5], 2]]) == 0  # under MIN_SHARED_TOKENS
    assert shared_prefix([[*base, 1, 2], [*base, 1, 3]], ends=[12, 12]) == 11


def test_pad_batch_keeps_the_shared_prefix_in_front() -> None:
    rows = [[1, 2, 3, 4, 5], [1, 2, 3, 9], [1, 2, 3, 7, 8, 6, 6]]
    ids, mask = pad_batch(rows, 0, True, torch.device("cpu"), shared=3)
    assert ids.tolist() == [[1, 2, 3, 0, 0, 4, 5], [1, 2, 3, 0, 0, 0, 9], [1, 2, 3, 7, 8, 6, 6]]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    for row, ids_row, pos_row, mask_row in zip(rows, ids, positions, mask, strict=True):
        kept = [(int(t), int(p)) for t, p, m in zip(ids_row, pos_row, mask_row, strict=True) if m]
        assert kept == [(t, i) for i, t in enumerate(row)]  # each token at its plain position


def test_no_shared_prefix_where_a_row_could_outgrow_a_sliding_window() -> None:
    """Gemma 3's local layers attend 512 cache positions back; the padding inside a shared-prefix
    row would push the prefix out of that window (docs in :mod:`.prefix_sharing`). A call whose
    longest prompt plus ``max_new_tokens`` exceeds the window prefills without sharing; shorter
    calls and models without a window (SmolLM2, Llama) share as before."""
    from erag_dagster.readers.prefix_sharing import sliding_window, window_allows_sharing

    registry = load_registry()
    gemma = reader_from_config("gemma3-270m", {**registry.reader("gemma3-270m").config, **FP32})
    smol = reader_from_config("smollm2-135m", {**registry.reader("smollm2-135m").config, **FP32})
    assert sliding_window(gemma._ensure().model.config) == 512
    assert sliding_window(smol._ensure().model.config) is None
    ds = load_dataset("sample")
    texts = ds.corpus.get_column("text").to_list()
    question = ds.queries.get_column("question").to_list()[0]
    limit = gemma._input_limit(None)
    short = [gemma._fitted_ids(question, [t], limit) for t in texts[:3]]
    long = [gemma._fitted_ids(question, texts[3 + 6 * i : 9 + 6 * i], limit) for i in range(2)]
    assert max(map(len, short)) + 16 <= 512 < max(map(len, long))
    assert gemma._shared(short) >= MIN_SHARED_TOKENS  # eRAG-sized prompts still share
    assert gemma._shared(short + long) == 0  # end-to-end-sized ones do not
    config = gemma._ensure().model.config
    assert not window_allows_sharing(config, short + long, 16)
    assert window_allows_sharing(smol._ensure().model.config, short + long, 16)
