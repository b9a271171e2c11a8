"""OpenAIReader: the RAG reader behind an OpenAI-compatible HTTP server (``backend: openai``).

Serves the same calls as :class:`~erag_dagster.readers.transformers_reader.TransformersReader`
(``answer``, ``answer_with_context(s)``, ``yes_probability``) so the labeller, end-to-end RAG,
LLM annotation and reranking work unchanged; ``generate_stored`` keeps the one store commit
policy (answers are reported one by one through ``on_batch`` as requests finish). This module
is the reader object: its client, thread pool, identity, token estimate and usage; what the
server serves is learned by :mod:`.openai_probe`, and one request's body, endpoint, parsing and
failure line are :mod:`.openai_payload`'s.

* **Before any labelling** (:meth:`OpenAIReader.load`, also on first use of ``fingerprint``):
  the probe (:func:`~erag_dagster.readers.openai_probe.probe_server`): the ``/models`` entry,
  then one 1-token generation.
* **Concurrency**: at most ``concurrency`` requests in flight (a thread pool); each has
  ``timeout_seconds``; 429 / 5xx / connection errors are retried with jittered exponential
  backoff honouring ``Retry-After`` (:mod:`.retry`). A request that still fails, or any other
  HTTP error, is one line naming the pair; answers finished before it are kept by the store.
* **Identity** (:meth:`OpenAIReader.identity`): a remote model's weights cannot be hashed, so
  the fingerprint covers what the server *says* it serves — the ``/models`` entry (id, and
  ``root``/``parent``/``max_model_len``/``created``/``owned_by`` where given), the model id and
  ``system_fingerprint`` of a response — plus the prompt, decoding and post-processing. A
  server upgrade that changes any of these is a new fingerprint (``audit`` shows both); one
  that changes none of them cannot be seen from the client. The ``system_fingerprint`` of every
  response is compared with the probed one: a change mid-run stops the run (answers so far
  kept). ``base_url``, the key and the operational keys are not part of the identity.
* **Accounting**: :meth:`usage` sums the server's ``usage`` (prompt and completion tokens) and
  counts requests and retries; :meth:`estimate_prompt_tokens` estimates prompt tokens from the
  server's count for the probe prompt (tokens per character × characters), since no tokenizer
  is at hand on the client.
* **Token budget**: with ``max_input_tokens`` set, passages are cut by that same
  characters-per-token estimate (approximate); without it nothing is cut and a prompt the server
  finds too long is its one-line HTTP 400 error.
* **P("yes")** needs the server's ``logprobs``; where a response carries none,
  :meth:`p_yes_unavailable` says so in one line and :meth:`yes_probability` raises it
  (:class:`~erag_dagster.readers.openai_payload.LogprobsUnavailable`, or its subclass
  :class:`~erag_dagster.readers.openai_payload.NoFirstToken` for a response without a first
  token; both importable from here).

The API key is read from the environment variable named by ``api_key_env`` when the client is
built and is never stored, logged, hashed or put in metadata.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import cached_property
from typing import Any

from erag_dagster.core.callbacks import OnBatch
from erag_dagster.core.errors import EnvironmentFault, InputError
from erag_dagster.readers.fingerprint import fingerprint_of, short
from erag_dagster.readers.openai_payload import (
    PREFIX_INSTRUCTION,
    LogprobsUnavailable,
    NoFirstToken,
    answer_of,
    create_request,
    describe_pair,
    p_yes_of,
    prompt_text,
    request_fault,
    request_payload,
)
from erag_dagster.readers.openai_probe import (
    PROBE_PASSAGE,
    PROBE_QUESTION,
    ServerInfo,
    probe_server,
)
from erag_dagster.readers.prompts import (
    POSTPROCESS_VERSION,
    RELEVANCE_SYSTEM_PROMPT,
    RELEVANCE_TEMPLATE,
    build_context_prompt,
    build_messages,
    prompt_identity,
)
from erag_dagster.readers.retry import call_with_retries
from erag_dagster.readers.spec import ReaderSpec

__all__ = ["LogprobsUnavailable", "NoFirstToken", "OpenAIReader"]

log = logging.getLogger(__name__)

IDENTITY_VERSION = 1


class OpenAIReader:
    """A reader served by an OpenAI-compatible server, described by a :class:`ReaderSpec`."""

    def __init__(self, spec: ReaderSpec) -> None:
        if spec.backend != "openai":
            raise InputError(f"reader {spec.name!r}: OpenAIReader needs backend: openai")
        self.spec = spec
        self._info: ServerInfo | None = None
        self._lock = threading.Lock()
        self._usage = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "retries": 0}
        self._p_yes_reason: str | None = None
        self._p_yes_checked = False

    # -- identity ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"OpenAIReader({self.spec.name!r}, {self.spec.model!r} at {self.spec.base_url})"

    def identity(self) -> dict[str, Any]:
        """Everything the fingerprint hashes (see the module docstring); probes the server."""
        info = self._probe()
        spec = self.spec
        prefix_sent = spec.api == "completion" or info.continues
        instructed = self._instructed_prefix()
        prompt = prompt_identity(spec, spec.answer_prefix if prefix_sent else None)
        if instructed:
            prompt["prefix_instruction"] = PREFIX_INSTRUCTION.format(prefix=instructed)
        return {
            "fingerprint_version": IDENTITY_VERSION,
            "backend": "openai",
            "api": spec.api,
            "model": {
                "kind": "remote",
                "requested": spec.model,
                "served": dict(info.entry),
                "response_model": info.response_model,
                "system_fingerprint": info.system_fingerprint,
            },
            "prompt": prompt,
            "decoding": {
                "greedy": True,
                "temperature": 0,
                "seed": spec.seed,
                "max_new_tokens": spec.max_new_tokens,
            },
            "postprocess_version": POSTPROCESS_VERSION,
        }

    def _instructed_prefix(self) -> str:
        """The answer prefix the chat reply is told to begin with (``""``: none — the prefix
        is in the prompt, continued by the server, or empty); probes the server."""
        spec = self.spec
        if spec.api != "chat" or not spec.answer_prefix or self._probe().continues:
            return ""
        return spec.answer_prefix

    @cached_property
    def fingerprint(self) -> str:
        """sha256 hex of :meth:`identity` (probes the server once)."""
        return fingerprint_of(self.identity())

    @property
    def short_fingerprint(self) -> str:
        return short(self.fingerprint)

    @property
    def generation_step(self) -> int:
        """Pairs per ``answer`` call the labeller should use: 16 x ``concurrency``, so the
        pool rarely drains between calls (answers stream out one by one regardless)."""
        return 16 * self.spec.concurrency

    # -- the server ----------------------------------------------------------------------------

    @cached_property
    def _client(self) -> Any:
        import openai

        return openai.OpenAI(
            base_url=self.spec.base_url,
            api_key=self._api_key(),
            max_retries=0,  # retries are ours (Retry-After, jitter, counted)
            timeout=self.spec.timeout_seconds,
        )

    def _api_key(self) -> str:
        """The key from ``$<api_key_env>``; a placeholder when no key is configured (the
        ``openai`` client insists on a non-empty string; servers without auth ignore it)."""
        env = self.spec.api_key_env
        if env is None:
            return "unused"
        value = os.environ.get(env, "")
        if not value:
            raise InputError(
                f"reader {self.spec.name!r}: environment variable {env} (api_key_env) is not set"
            )
        return value

    def load(self) -> OpenAIReader:
        """Probe the server now (otherwise the first call does); returns ``self``."""
        self._probe()
        return self

    def close(self) -> None:
        """Close the HTTP connections (a later call reopens them)."""
        client = self.__dict__.pop("_client", None)
        if client is not None:
            client.close()

    def _probe(self) -> ServerInfo:
        if self._info is not None:
            return self._info
        with self._lock:
            if self._info is None:
                self._info = probe_server(self.spec, self._client)
        return self._info

    # -- requests ------------------------------------------------------------------------------

    def _send(self, payload: Mapping[str, Any]) -> Any:
        """One request with retries; checks the server's identity and counts usage."""
        response = call_with_retries(
            lambda: create_request(self._client, self.spec.api, payload),
            self.spec.max_retries,
            on_retry=self._note_retry,
        )
        info = self._probe()
        fp = getattr(response, "system_fingerprint", None)
        if info.system_fingerprint is not None and fp != info.system_fingerprint:
            raise EnvironmentFault(
                f"reader {self.spec.name!r}: the server's system_fingerprint changed from "
                f"{info.system_fingerprint!r} to {fp!r} during the run (server upgraded?); the "
                "answers before it are stored; run again to label under the new identity"
            )
        usage = getattr(response, "usage", None)
        with self._lock:
            self._usage["requests"] += 1
            self._usage["prompt_tokens"] += int(getattr(usage, "prompt_tokens", 0) or 0)
            self._usage["completion_tokens"] += int(getattr(usage, "completion_tokens", 0) or 0)
        return response

    def _note_retry(self, attempt: int, exc: BaseException, wait: float) -> None:
        with self._lock:
            self._usage["retries"] += 1
        status = getattr(exc, "status_code", None)
        reason = f"HTTP {status}" if status else type(exc).__name__
        log.warning(
            "reader %s: %s from %s; retry %d/%d in %.1f s",
            self.spec.name, reason, self.spec.base_url, attempt + 1, self.spec.max_retries, wait,
        )  # fmt: skip

    def _run(
        self,
        payloads: list[dict[str, Any]],
        parse: Callable[[Any], Any],
        describe: Callable[[int], str],
        on_batch: OnBatch | None = None,
    ) -> list[Any]:
        """Send ``payloads`` with at most ``concurrency`` in flight; values in input order.
        ``on_batch([i], [value])`` runs in the calling thread as each request finishes."""
        if not payloads:
            return []
        self._probe()
        values: list[Any] = [None] * len(payloads)
        workers = min(self.spec.concurrency, len(payloads))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="erag-openai")
        futures = {pool.submit(self._send, p): i for i, p in enumerate(payloads)}
        try:
            for future in as_completed(futures):
                i = futures[future]
                try:
                    value = parse(future.result())
                except LogprobsUnavailable:
                    raise
                except Exception as exc:
                    raise request_fault(self.spec, exc, describe(i)) from None
                values[i] = value
                if on_batch is not None:
                    on_batch([i], [value])
        except BaseException:
            # fail fast: queued requests are dropped; the ones in flight finish unobserved
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return values

    # -- prompts and the token estimate ----------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        """Estimated tokens of ``text``: characters x the probe's tokens per character."""
        return math.ceil(len(text) * self._probe().tokens_per_char)

    def _cut(self, text: str, max_tokens: int) -> str:
        return text[: max(0, int(max_tokens / self._probe().tokens_per_char))]

    def _context(
        self, question: str, passages: Sequence[str], max_input_tokens: int | None = None
    ) -> str:
        """Passages joined in rank order, cut to ``max_input_tokens`` (else the spec's) by the
        token estimate when a budget is set; nothing is cut without one."""
        limit = max_input_tokens or self.spec.max_input_tokens
        budget = None
        if limit:
            empty = build_messages(self.spec, question, "")
            overhead = self.count_tokens(prompt_text(empty, self.spec.answer_prefix))
            budget = max(1, limit - overhead)
        count = self.count_tokens if budget else (lambda _text: 0)
        return build_context_prompt(
            passages, budget, count_tokens=count, truncate=self._cut
        ).context

    def estimate_prompt_tokens(self, items: Sequence[tuple[str, str]]) -> list[int]:
        """Estimated prompt tokens per ``(question, passage)`` (see :meth:`count_tokens`)."""
        spec = self.spec
        return [
            self.count_tokens(
                prompt_text(build_messages(spec, q, self._context(q, [p])), spec.answer_prefix)
            )
            for q, p in items
        ]

    def usage(self) -> dict[str, int]:
        """Totals since this reader was made: requests, prompt/completion tokens (as the server
        reported them in ``usage``), retries."""
        with self._lock:
            return dict(self._usage)

    # -- the reader calls ----------------------------------------------------------------------

    def answer(
        self, items: Sequence[tuple[str, str]], on_batch: OnBatch | None = None
    ) -> list[str]:
        """One answer per ``(question, passage)``, input order kept (see the module docstring)."""
        return self.answer_with_contexts([(q, [p]) for q, p in items], on_batch=on_batch)

    def answer_with_context(
        self, question: str, passages: Sequence[str], max_input_tokens: int | None = None
    ) -> str:
        """End-to-end answer from ``passages`` in rank order, cut to ``max_input_tokens`` (else
        the spec's; estimated tokens) when a budget is set."""
        return self.answer_with_contexts([(question, passages)], max_input_tokens)[0]

    def answer_with_contexts(
        self,
        items: Sequence[tuple[str, Sequence[str]]],
        max_input_tokens: int | None = None,
        on_batch: OnBatch | None = None,
    ) -> list[str]:
        """Answers for ``(question, passages)`` items; ``on_batch`` as in generate_stored."""
        if not items:
            return []
        spec = self.spec
        continued = self._probe().continues
        payloads = [
            request_payload(
                spec,
                build_messages(spec, q, self._context(q, list(ps), max_input_tokens)),
                spec.answer_prefix,
                spec.max_new_tokens,
                continued=continued,
            )
            for q, ps in items
        ]
        instructed = self._instructed_prefix()
        return self._run(
            payloads,
            lambda r: answer_of(r, spec.api, instructed),
            lambda i: describe_pair(items[i][0], "answer"),
            on_batch,
        )

    def p_yes_unavailable(self) -> str | None:
        """``None`` when the server returns log-probabilities (P("yes") works), else one line
        saying why not (asks the server once)."""
        if not self._p_yes_checked:
            try:
                self.yes_probability([(PROBE_QUESTION, PROBE_PASSAGE)])
            except LogprobsUnavailable as exc:
                self._p_yes_reason = str(exc)
            self._p_yes_checked = True
        return self._p_yes_reason

    def yes_probability(self, items: Sequence[tuple[str, str]]) -> list[float]:
        """P(yes) per pair from the first answer token's top log-probabilities: the mass of
        "yes" spellings over that of "yes" + "no" spellings (case and spaces ignored); 0.5 when
        neither is among the top tokens. :class:`LogprobsUnavailable` when the server returns
        none; :class:`NoFirstToken` (a subclass, naming the pair) when a response has no first
        token to read them from. Requests first, then P(yes) per response."""
        if not items:
            return []
        payloads = [
            request_payload(
                self.spec,
                build_messages(
                    self.spec,
                    q,
                    self._context(q, [p]),
                    system_prompt=RELEVANCE_SYSTEM_PROMPT,
                    template=RELEVANCE_TEMPLATE,
                    few_shot=(),
                ),
                "",
                1,
                logprobs=True,
            )
            for q, p in items
        ]
        responses = self._run(payloads, lambda r: r, lambda i: describe_pair(items[i][0], "P(yes)"))
        return [p_yes_of(r, self.spec, q) for r, (q, _) in zip(responses, items, strict=True)]
