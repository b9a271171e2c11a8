"""The decode loop that drops finished rows (``erag_dagster.readers.greedy_decode``) against
transformers' ``generate``, on the real packaged readers.

Both decode the same batches (length batches, a shared prefix where the reader shares one); the
loop removes a row from the batch once its answer is final or it has ended, ``generate`` keeps
every row to the batch's end. In float32 the answers and the generated tokens must be the same,
with the answer stop on and off; the loop must really run later steps on fewer rows.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from erag_dagster.config.registry import load_registry
from erag_dagster.data.loaders import load_dataset
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.greedy_decode import Decoded

FP32 = {"dtype": "float32", "device": "cpu", "num_threads": 1, "batch_size": 8}


def _pairs() -> list[tuple[str, str]]:
    """6 (question, passage) pairs of the embedded sample: two questions, each with three
    passages of its article's neighbourhood (answerable or not: short and long answers; rows of
    one batch end at different steps). Six, not more: the test decodes them six times."""
    ds = load_dataset("sample")
    texts = ds.corpus.get_column("text").to_list()
    questions = ds.queries.get_column("question").to_list()
    step = len(texts) // 4
    return [
        (questions[q * len(questions) // 4], texts[(q * step + j) % len(texts)])
        for q in (0, 2)
        for j in range(3)
    ]


def _rows_per_step(reader: object) -> list[int]:
    """Record the row count of every forward call of the reader's model (a forward hook)."""
    seen: list[int] = []
    model = reader._ensure().model
    model.register_forward_pre_hook(
        lambda _m, args, kwargs: seen.append(int(kwargs["input_ids"].shape[0])),
        with_kwargs=True,
    )
    return seen


@pytest.mark.parametrize(
    "reader_name", ["smollm2-135m", pytest.param("gemma3-270m", marks=pytest.mark.slow)]
)
def test_the_loop_gives_generates_answers_on_fewer_rows(reader_name: str) -> None:
    entry = load_registry().reader(reader_name)
    reader = reader_from_config(reader_name, {**entry.config, **FP32}).load()
    items = _pairs()
    rows = _rows_per_step(reader)
    reader.decode_with_generate = True
    with_generate = reader.answer(items)
    generate_rows = list(rows)
    rows.clear()
    reader.decode_with_generate = False
    assert reader.answer(items) == with_generate
    # generate keeps each batch's rows to its end; the loop lets rows go (the same calls for
    # the prefill of the shared prefix and of each batch, fewer rows in the decode steps)
    assert sum(rows) < sum(generate_rows)
    # the token path (likelihood labels, the probe) and the answer stop turned off agree too
    limit = reader._input_limit(None)
    prompts = [reader._fitted_ids(q, [p], limit) for q, p in items]
    looped = reader._generated_tokens(prompts)
    reader.decode_with_generate = True
    assert reader._generated_tokens(prompts) == looped
    # the loop with the answer stop off (the same loaded model: the spec is read per call)
    options = dataclasses.replace(reader.spec.options, stop_at_line_end=False)
    reader.spec = dataclasses.replace(reader.spec, options=options)
    reader.decode_with_generate = False
    assert reader.answer(items) == with_generate


def test_smallest_gap_per_row_over_its_decided_steps() -> None:
    decoded = Decoded([[5, 6, 7], [8]], [None, 1], [[0.5, 0.1, 0.3], [2.0]])
    assert decoded.smallest([3, 1]) == [0.1, 2.0]
    assert decoded.smallest([1, 0]) == [0.5, math.inf]  # no step decided: nothing near a tie
    assert Decoded([[1]], [None]).smallest([1]) == [math.inf]  # gaps not recorded


def test_a_row_ending_at_eos_keeps_it_and_nothing_after() -> None:
    """A two-row batch where one row's greedy choice is EOS at once: it leaves the batch with
    the EOS token, the other decodes on alone (the real SmolLM2 model)."""
    from erag_dagster.readers.greedy_decode import greedy_decode
    from erag_dagster.readers.loading import eos_ids

    reader = reader_from_config("smollm2-135m", FP32).load()
    loaded = reader._ensure()
    eos = eos_ids(loaded)
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        first = greedy_decode(
            loaded.model, ids, mask, None, max_new_tokens=1, eos=[], final=None,
            decode=loaded.tokenizer.batch_decode, record_gaps=False,
        )  # fmt: skip
        # declare row 0's first token an end of sequence: it must stop there
        out = greedy_decode(
            loaded.model, ids, mask, None, max_new_tokens=5, eos=[first.tokens[0][0], *eos],
            final=None, decode=loaded.tokenizer.batch_decode, record_gaps=True,
        )  # fmt: skip
    assert out.tokens[0] == first.tokens[0]
    ends = [first.tokens[0][0], *eos]
    assert len(out.tokens[1]) == 5 or out.tokens[1][-1] in ends
    assert not any(t in ends for t in out.tokens[1][:-1])
    assert len(out.gaps[0]) == 1 and len(out.gaps[1]) == len(out.tokens[1])
    assert out.stopped == [None, None]
