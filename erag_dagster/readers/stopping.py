"""Stop generating a row once its answer can no longer change: the first line is complete.

Answers are post-processed to their first non-empty line
(:func:`~erag_dagster.readers.prompts.postprocess_answer`), so every token after that line's
end is decoded and then thrown away. :class:`FirstLineStop` ends a row as soon as
:func:`~erag_dagster.readers.prompts.first_line_complete` holds for its text so far; the answer
is then exactly the one full decoding gives (the kept line is already all generated, and greedy
decoding of a row does not depend on when the others stop: finished rows are padded and the
batch keeps its shape). A batch ends when all its rows have stopped, at EOS or at
``max_new_tokens``; that saves the decode steps after the longest first line.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import StoppingCriteria

from erag_dagster.readers.prompts import first_line_complete

__all__ = ["FirstLineStop"]


class FirstLineStop(StoppingCriteria):
    """A transformers ``StoppingCriteria`` for one ``generate`` call.

    ``start``: the column where generated tokens begin in the ``input_ids`` that ``generate``
    passes (the padded prompt width; 1 for an encoder-decoder's decoder ids). ``stopped[i]`` is
    the count of generated tokens of row ``i`` when it stopped (``None``: not stopped here), so
    the caller can count the tokens that carry the answer.
    """

    def __init__(self, tokenizer: Any, start: int, rows: int) -> None:
        self.tokenizer = tokenizer
        self.start = start
        self.stopped: list[int | None] = [None] * rows

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        live = [i for i, at in enumerate(self.stopped) if at is None]
        generated = input_ids[live, self.start :].tolist() if live else []
        texts = self.tokenizer.batch_decode(generated, skip_special_tokens=True)
        for i, row, text in zip(live, generated, texts, strict=True):
            if first_line_complete(text):
                self.stopped[i] = len(row)
        done = [at is not None for at in self.stopped]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
