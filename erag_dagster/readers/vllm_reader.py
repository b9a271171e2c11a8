"""VLLMReader: the reader on vLLM's offline engine, in-process, for a GPU node (``backend: vllm``).

**Unmeasured**: written against vLLM's documented offline API (``vllm.LLM``, ``SamplingParams``,
``LLM.generate``) but not run here — no machine with a GPU and vLLM was available while it
was written. Treat the first run on a GPU node as its test.

* The model comes from the same sources as the transformers backend
  (:func:`~erag_dagster.readers.models.resolve_model`; a GGUF is first converted to a safetensors
  folder) and the prompts are built the same way: the tokenizer's chat template plus
  ``answer_prefix``, or :func:`~erag_dagster.readers.prompts.plain_prompt` without one.
* ``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``, ``dtype`` and
  ``seed`` go to ``vllm.LLM``; decoding is greedy (``temperature=0``), ``max_tokens`` =
  ``max_new_tokens``.
* Each ``answer`` call hands all its prompts to one ``LLM.generate`` (vLLM batches them
  continuously); the labeller passes up to ``batch_size`` unseen pairs per call
  (:attr:`VLLMReader.generation_step`) and stores them under the usual commit policy when the
  call returns. Set ``batch_size`` high (e.g. 1024) for throughput.
* vLLM is imported only when the engine starts. Without the package, or without a CUDA GPU,
  the error is one line (:class:`~erag_dagster.core.errors.EnvironmentFault`).
* The fingerprint is the transformers backend's identity (weights' content hash, prompt,
  decoding, post-processing, resolved dtype) with ``backend: vllm`` and vLLM's version.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from functools import cached_property
from importlib.metadata import version
from typing import Any

from erag_dagster.core.callbacks import OnBatch
from erag_dagster.core.errors import EnvironmentFault
from erag_dagster.readers.extraction import extract_answer
from erag_dagster.readers.fingerprint import fingerprint_of, reader_identity, short
from erag_dagster.readers.models import ModelSource, load_folder_kwargs, resolve_model
from erag_dagster.readers.prompts import (
    RELEVANCE_SYSTEM_PROMPT,
    RELEVANCE_TEMPLATE,
    build_context_prompt,
    build_messages,
    plain_prompt,
)
from erag_dagster.readers.spec import ReaderSpec

__all__ = ["VLLMReader", "require_vllm"]

TOP_LOGPROBS = 20


def require_vllm(name: str) -> None:
    """One-line :class:`EnvironmentFault` unless vLLM is installed and a CUDA GPU is visible."""
    if importlib.util.find_spec("vllm") is None:
        raise EnvironmentFault(
            f"reader {name!r}: backend vllm needs the vllm package on a CUDA GPU machine "
            "(pip install vllm); it is not installed here"
        )
    import torch

    if not torch.cuda.is_available():
        raise EnvironmentFault(f"reader {name!r}: backend vllm needs a CUDA GPU; none is visible")


class VLLMReader:
    """A reader on vLLM's offline engine (see the module docstring; unmeasured)."""

    def __init__(self, spec: ReaderSpec) -> None:
        self.spec = spec
        self._llm: Any = None
        self._usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "retries": 0}

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"VLLMReader({self.spec.name!r}, {self.spec.model!r})"

    @cached_property
    def source(self) -> ModelSource:
        return resolve_model(self.spec)

    @cached_property
    def _identity(self) -> dict[str, Any]:
        require_vllm(self.spec.name)
        import torch

        dtype = {"float32": torch.float32, "float16": torch.float16}.get(
            self.spec.dtype, torch.bfloat16
        )
        identity = reader_identity(self.spec, self.source, dtype, torch.device("cuda"))
        identity["libraries"]["vllm"] = version("vllm")
        return identity

    def identity(self) -> dict[str, Any]:
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self._identity.items()}

    @cached_property
    def fingerprint(self) -> str:
        return fingerprint_of(self._identity)

    @property
    def short_fingerprint(self) -> str:
        return short(self.fingerprint)

    @property
    def generation_step(self) -> int:
        """Pairs per engine call: ``batch_size``."""
        return self.spec.batch_size

    # -- the engine ----------------------------------------------------------------------------

    def load(self) -> VLLMReader:
        """Start the engine now (otherwise the first call does); returns ``self``."""
        self._engine()
        return self

    def _engine(self) -> Any:
        if self._llm is not None:
            return self._llm
        require_vllm(self.spec.name)
        from vllm import LLM

        path, kwargs = load_folder_kwargs(self.source, self.spec)
        spec = self.spec
        self._llm = LLM(
            model=path,
            tokenizer=path,
            revision=kwargs.get("revision"),
            trust_remote_code=False,
            dtype=self._identity["dtype"],
            seed=spec.seed,
            tensor_parallel_size=spec.tensor_parallel_size,
            gpu_memory_utilization=spec.gpu_memory_utilization,
            max_model_len=spec.max_model_len,
        )
        return self._llm

    def close(self) -> None:
        """Drop the engine (frees GPU memory once collected)."""
        self._llm = None

    def _prompt(self, messages: list[dict[str, str]], prefix: str) -> str:
        tokenizer = self._engine().get_tokenizer()
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            return text + prefix
        return plain_prompt(messages, prefix)

    def count_tokens(self, text: str) -> int:
        return len(self._engine().get_tokenizer()(text, add_special_tokens=False)["input_ids"])

    def _cut(self, text: str, max_tokens: int) -> str:
        tokenizer = self._engine().get_tokenizer()
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][: max(0, max_tokens)]
        return tokenizer.decode(ids, skip_special_tokens=True)

    def _context(self, question: str, passages: Sequence[str], limit: int | None) -> str:
        limit = limit or self.spec.max_input_tokens
        if not limit:
            return build_context_prompt(passages, None, count_tokens=lambda _: 0).context
        empty = self._prompt(build_messages(self.spec, question, ""), self.spec.answer_prefix)
        budget = max(1, limit - self.count_tokens(empty))
        return build_context_prompt(
            passages, budget, count_tokens=self.count_tokens, truncate=self._cut
        ).context

    def _generate(self, prompts: list[str], max_tokens: int, logprobs: int | None = None) -> list:
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=0.0, max_tokens=max_tokens, seed=self.spec.seed, logprobs=logprobs
        )
        outputs = self._engine().generate(prompts, params, use_tqdm=False)
        for out in outputs:
            self._usage["requests"] += 1
            self._usage["prompt_tokens"] += len(out.prompt_token_ids or [])
            self._usage["completion_tokens"] += len(out.outputs[0].token_ids)
        return outputs

    # -- the reader calls ----------------------------------------------------------------------

    def answer(
        self, items: Sequence[tuple[str, str]], on_batch: OnBatch | None = None
    ) -> list[str]:
        return self.answer_with_contexts([(q, [p]) for q, p in items], on_batch=on_batch)

    def answer_with_context(
        self, question: str, passages: Sequence[str], max_input_tokens: int | None = None
    ) -> str:
        return self.answer_with_contexts([(question, passages)], max_input_tokens)[0]

    def answer_with_contexts(
        self,
        items: Sequence[tuple[str, Sequence[str]]],
        max_input_tokens: int | None = None,
        on_batch: OnBatch | None = None,
    ) -> list[str]:
        """All prompts in one engine call (vLLM's continuous batching); input order kept."""
        if not items:
            return []
        spec = self.spec
        prompts = [
            self._prompt(
                build_messages(spec, q, self._context(q, list(ps), max_input_tokens)),
                spec.answer_prefix,
            )
            for q, ps in items
        ]
        outputs = self._generate(prompts, spec.max_new_tokens)
        answers = [extract_answer(out.outputs[0].text) for out in outputs]
        if on_batch is not None:
            on_batch(list(range(len(answers))), answers)
        return answers

    def yes_probability(self, items: Sequence[tuple[str, str]]) -> list[float]:
        """P(yes) from the first token's top-20 log-probabilities (as the openai backend)."""
        if not items:
            return []
        prompts = [
            self._prompt(
                build_messages(
                    self.spec,
                    q,
                    self._context(q, [p], None),
                    system_prompt=RELEVANCE_SYSTEM_PROMPT,
                    template=RELEVANCE_TEMPLATE,
                    few_shot=(),
                ),
                "",
            )
            for q, p in items
        ]
        values = []
        for out in self._generate(prompts, 1, logprobs=TOP_LOGPROBS):
            top = (out.outputs[0].logprobs or [{}])[0]
            words = [(lp.decoded_token or "", lp.logprob) for lp in top.values()]
            yes = sum(math.exp(v) for t, v in words if t.strip().lower() == "yes")
            no = sum(math.exp(v) for t, v in words if t.strip().lower() == "no")
            values.append(yes / (yes + no) if yes + no > 0 else 0.5)
        return values

    def estimate_prompt_tokens(self, items: Sequence[tuple[str, str]]) -> list[int]:
        return [
            len(
                self._engine().get_tokenizer()(
                    self._prompt(
                        build_messages(self.spec, q, self._context(q, [p], None)),
                        self.spec.answer_prefix,
                    )
                )["input_ids"]
            )
            for q, p in items
        ]

    def usage(self) -> dict[str, int]:
        return dict(self._usage)
