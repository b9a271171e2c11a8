"""Prefill-only scores of the transformers reader: P(yes) and teacher-forced log-probabilities.

:class:`ScoringMixin` is the scoring half of
:class:`~erag_dagster.readers.transformers_reader.TransformersReader`: one forward pass per
prompt, no decoding, through the reader's batch loop (``_run_batches``, kind ``score``) and
its shared-prefix cache (:mod:`.prefix_sharing`).

* :meth:`ScoringMixin.yes_probability` — LLM relevance annotation and the reranker's score.
* :meth:`ScoringMixin.continuation_log_probs` — likelihood labels
  (:mod:`erag_dagster.labels.likelihood`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from erag_dagster.core.errors import InputError
from erag_dagster.readers.batching import word_ids
from erag_dagster.readers.loading import LoadedModel
from erag_dagster.readers.prefix_sharing import decoder_inputs

__all__ = ["NO_WORDS", "YES_WORDS", "ScoringMixin"]

#: The spellings whose first-token probabilities make P("yes") and P("no").
YES_WORDS = ("yes", "Yes", " yes", " Yes", "YES")
NO_WORDS = ("no", "No", " no", " No", "NO")


class ScoringMixin:
    """Scores for a reader that provides ``spec``, ``_ensure()`` (the loaded model),
    ``_input_limit``, ``_fitted_ids``, ``_shared``, ``_sharing`` and ``_run_batches``
    (:class:`~erag_dagster.readers.transformers_reader.TransformersReader`)."""

    def yes_probability(self, items: Sequence[tuple[str, str]]) -> list[float]:
        """P(yes) for "is this passage relevant to / does it answer the question?" per pair.

        From the logits of the first answer token: the probability mass of the "yes" spellings
        (``yes``, ``Yes``, …) divided by that of "yes" + "no" spellings, so each value is in
        [0, 1] and ignores other tokens. Input order kept; ``[]`` for no items.
        """
        if not items:
            return []
        loaded = self._ensure()
        yes_ids = word_ids(loaded.tokenizer, YES_WORDS)
        no_ids = word_ids(loaded.tokenizer, NO_WORDS)
        if not yes_ids or not no_ids:
            raise InputError(f"reader {self.spec.name!r}: tokenizer has no single 'yes'/'no' token")
        limit = self._input_limit(None, new_tokens=0)  # scores one forward pass
        prompts = [self._fitted_ids(q, [p], limit, relevance=True) for q, p in items]
        accepts = inspect.signature(loaded.model.forward).parameters
        shared = self._shared(prompts)

        def forward(
            loaded: LoadedModel, ids: torch.Tensor, mask: torch.Tensor, cache: Any
        ) -> list[float]:
            kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
            if loaded.is_seq2seq:
                start_id = loaded.model.config.decoder_start_token_id
                kwargs["decoder_input_ids"] = torch.full(
                    (ids.shape[0], 1), start_id, dtype=torch.long, device=loaded.device
                )
            else:
                kwargs.update(decoder_inputs(loaded, ids, mask, cache, accepts))
                if "logits_to_keep" in accepts:
                    kwargs["logits_to_keep"] = 1
            logits = loaded.model(**kwargs).logits[:, -1, :].float()
            probs = torch.softmax(logits, dim=-1)
            p_yes = probs[:, yes_ids].sum(-1)
            p_no = probs[:, no_ids].sum(-1)
            return (p_yes / (p_yes + p_no).clamp(min=1e-30)).tolist()

        def collect(
            loaded: LoadedModel, ratio: list[float], ids: torch.Tensor
        ) -> tuple[list[float], int]:
            return [float(value) for value in ratio], 0

        return self._run_batches(prompts, "score", forward, collect, shared=shared)

    def continuation_log_probs(self, items: Sequence[tuple[str, str, str]]) -> list[list[float]]:
        """Teacher-forced ``log p(c_t | prompt, c_<t)`` (natural log) of each continuation token,
        per ``(question, passage, continuation)``: the prompt is exactly :meth:`answer`'s (so
        the continuation follows the answer prefix; pass it with its leading space, e.g.
        ``" Denver Broncos"``), the passage cut so prompt + continuation fit the context.
        Prefill only, no decoding: the
        prompt is read once per distinct prompt (its KV cache shared by that pair's
        continuations, :mod:`.prefix_sharing`); a continuation whose tokens start a longer one
        of the same pair is read off that longer pass (the same causal values; the passage
        budget is then the longer one's). Input order kept; ``[]`` for no items.
        Decoder-only models only (an encoder-decoder reader is an :class:`InputError`).
        """
        if not items:
            return []
        loaded = self._ensure()
        if loaded.is_seq2seq:
            raise InputError(
                f"reader {self.spec.name!r}: continuation likelihoods need a decoder-only model"
            )
        conts = [loaded.tokenizer(c, add_special_tokens=False)["input_ids"] for _, _, c in items]
        # A continuation whose tokens start another one's of the same (question, passage) reads
        # its log-probs off that longer sequence (causal: the same values), so it costs nothing.
        longest: dict[tuple[str, str], list[int]] = {}
        for i, (question, passage, _) in enumerate(items):
            longest.setdefault((question, passage), []).append(i)
        source: list[int] = list(range(len(items)))
        for group in longest.values():
            for i in group:
                for j in group:
                    if (
                        len(conts[j]) > len(conts[source[i]])
                        and conts[j][: len(conts[i])] == conts[i]
                    ):
                        source[i] = j
        scored = sorted(set(source))
        rows, ends = [], []
        for j in scored:
            question, passage, _ = items[j]
            limit = self._input_limit(None, new_tokens=len(conts[j]))
            prompt = self._fitted_ids(question, [passage], limit)
            rows.append(prompt + conts[j])
            ends.append(len(prompt))
        accepts = inspect.signature(loaded.model.forward).parameters

        def forward(
            loaded: LoadedModel, ids: torch.Tensor, mask: torch.Tensor, cache: Any
        ) -> torch.Tensor:
            kwargs: dict[str, Any] = {"attention_mask": mask}
            kwargs.update(decoder_inputs(loaded, ids, mask, cache, accepts))
            logits = loaded.model(**kwargs).logits[:, :-1, :].float()
            # log p(ids[t+1] | ids[<=t]) at every position fed (after a cached prefix: from
            # its end on); left padding keeps the ends aligned
            fed = ids[:, ids.shape[1] - kwargs["input_ids"].shape[1] :]
            return torch.log_softmax(logits, dim=-1).gather(-1, fed[:, 1:, None])[..., 0].cpu()

        def collect(
            loaded: LoadedModel, logp: torch.Tensor, ids: torch.Tensor
        ) -> tuple[list[list[float]], int]:
            return [row.tolist() for row in logp], 0

        # Rows with the same prompt (a pair's several golds, a label set's labels) read it once:
        # one call per such group, its prompt the shared prefix; the other rows share the
        # template's head. A prefix ends before every prompt's last token, whose logits score
        # the first continuation token.
        by_prompt: dict[tuple[int, ...], list[int]] = {}
        for k, (row, end) in enumerate(zip(rows, ends, strict=True)):
            by_prompt.setdefault(tuple(row[:end]), []).append(k)
        singles = [group[0] for group in by_prompt.values() if len(group) == 1]
        calls = [singles] if singles else []
        calls += [group for group in by_prompt.values() if len(group) > 1]
        if not self._sharing():  # one call: nothing to share, batches as full as they can be
            calls = [list(range(len(rows)))]
        values: list[list[float]] = [[] for _ in rows]
        for call in calls:
            sub = [rows[k] for k in call]
            shared = self._shared(sub, [ends[k] for k in call])
            got = self._run_batches(sub, "score", forward, collect, shared=shared)
            for k, value in zip(call, got, strict=True):
                values[k] = value
        every = dict(zip(scored, values, strict=True))
        out = []
        for i, cont in enumerate(conts):
            j = source[i]
            tail = every[j][len(every[j]) - len(conts[j]) :]
            out.append(tail[: len(cont)])
        return out
