"""Greedy answers of the transformers reader: prompts in, extracted answers out.

:class:`GenerationMixin` is the generation half of
:class:`~erag_dagster.readers.transformers_reader.TransformersReader` (which owns the loaded
model, the prompt fitting and the one batch loop, ``_run_batches``): the shared prefix is
prefilled once (:mod:`.prefix_sharing`, per ``share_prefix``), each row stops once its answer
is final (:func:`~.extraction.answer_final`, unless ``stop_at_line_end`` is false) and a
decoder-only model's batch drops it at once (:mod:`.greedy_decode`; an encoder-decoder's goes
through ``generate`` with :mod:`.stopping`'s criterion), and in float32 every
answer goes through the margin guard (:mod:`.exact_greedy`): a row whose greedy choice came
within :data:`~.exact_greedy.MARGIN_FLOOR` of a tie is decoded again alone by the model's
float64 twin, so answers do not depend on the batch layout. Answers are read from the
generation by :func:`~erag_dagster.readers.extraction.extract_answer`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from erag_dagster.core.callbacks import OnBatch
from erag_dagster.readers.batching import until_eos
from erag_dagster.readers.exact_greedy import (
    MARGIN_FLOOR,
    GapRecorder,
    decided_steps,
    reference_model,
)
from erag_dagster.readers.extraction import answer_final, extract_answer
from erag_dagster.readers.greedy_decode import greedy_decode
from erag_dagster.readers.loading import LoadedModel, eos_ids, generation_config
from erag_dagster.readers.prefix_sharing import cache_kwarg

__all__ = ["GenerationMixin"]


class GenerationMixin:
    """Greedy generation for a reader that provides ``spec``, ``dtype``, ``guard``,
    ``guard_counts``, ``_ensure()`` (the loaded model), ``_shared(prompts)`` and
    ``_run_batches(...)`` (:class:`~erag_dagster.readers.transformers_reader.TransformersReader`).

    ``decode_with_generate``: decode a decoder-only model's batches with transformers'
    ``generate`` (every row kept to the batch's end) instead of :func:`.greedy_decode.greedy_decode`
    (each row dropped once it has ended) — the same answers; kept for the side-by-side test and
    ``bench/decode.py``. An encoder-decoder always uses ``generate``.
    """

    decode_with_generate: bool = False

    def _generate(self, prompts: list[list[int]], on_batch: OnBatch | None = None) -> list[str]:
        """Greedy answers to ``prompts``: the shared prefix prefilled once
        (:mod:`.prefix_sharing`, per ``share_prefix``), each row stopped once its answer is
        final (:mod:`.stopping`, unless ``stop_at_line_end`` is false), the answer read by
        :func:`extract_answer`."""
        return self._generate_rows(prompts, on_batch)

    def _generated_tokens(
        self, prompts: list[list[int]], final: Callable[[str], bool] = answer_final
    ) -> list[list[int]]:
        """The generated token ids of each prompt (EOS and what follows it dropped), each row
        stopped once ``final`` holds for its text (:class:`~.stopping.AnswerStop`) or at
        ``max_new_tokens``. The margin guard applies as to answers."""
        return self._generate_rows(prompts, None, final, tokens=True)

    def _generate_rows(
        self,
        prompts: list[list[int]],
        on_batch: OnBatch | None = None,
        final: Callable[[str], bool] = answer_final,
        tokens: bool = False,
    ) -> list[Any]:
        """The one generation loop of :meth:`_generate` and :meth:`_generated_tokens`: answers,
        or with ``tokens`` the token ids that made them."""
        from transformers import LogitsProcessorList, StoppingCriteriaList

        from erag_dagster.readers.stopping import AnswerStop

        loaded = self._ensure()
        eos = eos_ids(loaded)
        config = generation_config(self.spec.max_new_tokens, loaded.tokenizer.pad_token_id, eos)

        def forward(
            loaded: LoadedModel, ids: torch.Tensor, mask: torch.Tensor, cache: Any
        ) -> tuple[list[list[int]], list[int | None], Any, torch.Tensor]:
            if not (loaded.is_seq2seq or self.decode_with_generate):
                decoded = greedy_decode(
                    loaded.model, ids, mask, cache,
                    max_new_tokens=config.max_new_tokens, eos=eos,
                    final=final if self.spec.stop_at_line_end else None,
                    decode=lambda rows: loaded.tokenizer.batch_decode(
                        rows, skip_special_tokens=True
                    ),
                    record_gaps=guarded,
                )  # fmt: skip
                if loaded.device.type == "cuda":
                    torch.cuda.synchronize(loaded.device)
                return decoded.tokens, decoded.stopped, decoded if guarded else None, mask
            start = 1 if loaded.is_seq2seq else ids.shape[1]
            stop = AnswerStop(loaded.tokenizer, start, ids.shape[0], final)
            kwargs = {} if cache is None else {cache_kwarg(loaded.model): cache}
            gaps = GapRecorder() if guarded else None
            out = loaded.model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=config,
                stopping_criteria=StoppingCriteriaList(
                    [stop] if self.spec.stop_at_line_end else []
                ),
                logits_processor=LogitsProcessorList([gaps] if gaps is not None else []),
                **kwargs,
            )
            if loaded.device.type == "cuda":
                torch.cuda.synchronize(loaded.device)
            return out[:, start:].tolist(), stop.stopped, gaps, mask

        def collect(
            loaded: LoadedModel, raw: tuple[Any, ...], ids: torch.Tensor
        ) -> tuple[list[str], int]:
            generated, stopped, gaps, mask = raw
            if gaps is not None:
                steps = [
                    decided_steps(row, at, eos) for row, at in zip(generated, stopped, strict=True)
                ]
                for r, gap in enumerate(gaps.smallest(steps)):
                    if gap < MARGIN_FLOOR:  # near a tie: float32 may not decide it the same
                        prompt = ids[r][mask[r].bool()].tolist()
                        generated[r], stopped[r] = self._reference_tokens(prompt, config, final)
                        self.guard_counts["reference"] += 1
                self.guard_counts["rows"] += len(generated)
            rows = [
                until_eos(row if at is None else row[:at], eos)
                for row, at in zip(generated, stopped, strict=True)
            ]
            if tokens:
                return rows, sum(len(row) for row in rows)
            decode = loaded.tokenizer.decode
            answers = [extract_answer(decode(row, skip_special_tokens=True)) for row in rows]
            return answers, sum(len(row) for row in rows)

        guarded = self.guarded
        shared = self._shared(prompts)
        return self._run_batches(prompts, "generate", forward, collect, on_batch, shared)

    @property
    def guarded(self) -> bool:
        """Whether answers go through the margin guard (:mod:`.exact_greedy`): float32 readers."""
        return self.guard and self.dtype == torch.float32

    def _reference_tokens(
        self, prompt: list[int], config: Any, final: Callable[[str], bool] = answer_final
    ) -> tuple[list[int], int | None]:
        """The greedy tokens of ``prompt`` decoded alone by the float64 twin of the model
        (:func:`.exact_greedy.reference_model`, made on first need), and where the answer stop
        (``final``) ended them (``None``: not stopped)."""
        from transformers import StoppingCriteriaList

        from erag_dagster.readers.stopping import AnswerStop

        loaded = self._ensure()
        if loaded.reference is None:
            loaded.reference = reference_model(loaded.model)
        ids = torch.tensor([prompt], dtype=torch.long, device=loaded.device)
        start = 1 if loaded.is_seq2seq else ids.shape[1]
        stop = AnswerStop(loaded.tokenizer, start, 1, final)
        out = loaded.reference.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            generation_config=config,
            stopping_criteria=StoppingCriteriaList([stop] if self.spec.stop_at_line_end else []),
        )
        new = out[0, 1:] if loaded.is_seq2seq else out[0, start:]
        return new.tolist(), stop.stopped[0]
