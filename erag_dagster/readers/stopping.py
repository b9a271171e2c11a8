"""Stop generating a row once its answer can no longer change.

Answers are what :func:`~erag_dagster.readers.extraction.extract_answer` reads from the
generation (the answer line's first clause, without markup or lead-ins), so every token after
the answer's cut is decoded and then thrown away. :class:`AnswerStop` ends a row as soon as
:func:`~erag_dagster.readers.extraction.answer_final` holds for its text so far; the answer is
then exactly the one full decoding gives (the extracted part is already all generated, and
greedy decoding of a row does not depend on when the others stop: finished rows are padded and
the batch keeps its shape). A batch ends when all its rows have stopped, at EOS or at
``max_new_tokens``; that saves the decode steps after the longest answer.

Decoder-only readers decode with :func:`~erag_dagster.readers.greedy_decode.greedy_decode`
instead, which applies the same ``final`` rule and also drops each stopped row from the batch;
this criterion serves ``generate`` (encoder-decoder readers, and the side-by-side comparison).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import StoppingCriteria

from erag_dagster.readers.extraction import answer_final

__all__ = ["AnswerStop"]


class AnswerStop(StoppingCriteria):
    """A transformers ``StoppingCriteria`` for one ``generate`` call.

    ``start``: the column where generated tokens begin in the ``input_ids`` that ``generate``
    passes (the padded prompt width; 1 for an encoder-decoder's decoder ids). ``final``: when a
    row's text so far holds its whole answer (default :func:`answer_final`). ``stopped[i]`` is
    the count of generated tokens of row ``i`` when it stopped (``None``: not stopped here), so
    the caller can count the tokens that carry the answer.
    """

    def __init__(
        self,
        tokenizer: Any,
        start: int,
        rows: int,
        final: Callable[[str], bool] = answer_final,
    ) -> None:
        self.tokenizer = tokenizer
        self.start = start
        self.final = final
        self.stopped: list[int | None] = [None] * rows

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        live = [i for i, at in enumerate(self.stopped) if at is None]
        generated = input_ids[live, self.start :].tolist() if live else []
        texts = self.tokenizer.batch_decode(generated, skip_special_tokens=True)
        for i, row, text in zip(live, generated, texts, strict=True):
            if self.final(text):
                self.stopped[i] = len(row)
        done = [at is not None for at in self.stopped]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
