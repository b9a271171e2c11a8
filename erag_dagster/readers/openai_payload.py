"""One request to an OpenAI-compatible server, as data: the body sent, the endpoint, what is
read back (the answer, P("yes") from ``top_logprobs``), and the one line a failure becomes.

Stateless functions over a :class:`~erag_dagster.readers.spec.ReaderSpec`; the reader
(:mod:`.openai_reader`) owns the client, the pool and the counts.

* **Requests**: ``chat`` (``/chat/completions``: the server applies its chat template) or
  ``completion`` (``/completions`` with :func:`~erag_dagster.readers.prompts.plain_prompt`,
  which ends with the ``answer_prefix``). In chat the ``answer_prefix`` goes as a partial
  assistant turn the server continues (``continued``: vLLM's ``continue_final_message``) or,
  where the server does not continue one, as an instruction to begin the reply with it
  (:data:`PREFIX_INSTRUCTION`, added to the system turn); which one, the reader's probe decided
  (:mod:`.openai_probe`). Greedy: ``temperature: 0`` and ``seed``; ``max_tokens`` =
  ``max_new_tokens``; answers read by
  :func:`~erag_dagster.readers.extraction.extract_answer` like the in-process reader's, after a
  leading copy of an instructed prefix is removed (:func:`answer_of`).
* **P("yes")** needs the server's ``logprobs``; where a response carries none,
  :class:`LogprobsUnavailable` says so in one line. A response that carries ``logprobs`` but no
  first token (the model ended its answer at once: llama.cpp's server then lists no
  alternatives, seen with SmolLM2 through ``api: completion``) is its own one line naming the
  pair (:class:`NoFirstToken`), never a made-up 0.5.
* **A failed request** (:func:`request_fault`) is one line: unreachable, timed out, refused
  key, or the HTTP status with the first line of the server's message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from erag_dagster.core.errors import EnvironmentFault, InputError
from erag_dagster.core.input_numbers import format_given
from erag_dagster.readers.extraction import extract_answer
from erag_dagster.readers.prompts import plain_prompt
from erag_dagster.readers.spec import ReaderSpec

#: Top log-probabilities asked for P("yes") (the chat API allows up to 20, completions 5).
TOP_LOGPROBS_CHAT = 20
TOP_LOGPROBS_COMPLETION = 5


class LogprobsUnavailable(EnvironmentFault):
    """P("yes") cannot be read from the server's log-probabilities: it returns none."""


class NoFirstToken(LogprobsUnavailable):
    """The response has ``logprobs`` but no first token: generation ended at once (end of
    sequence first), and the server lists no alternatives for a token it did not emit."""


PREFIX_INSTRUCTION = 'Begin your reply with "{prefix}".'
"""The instruction that carries ``answer_prefix`` where a chat server continues no assistant
turn (``{prefix}``: the prefix)."""


def with_prefix_instruction(messages: list[dict[str, str]], prefix: str) -> list[dict[str, str]]:
    """``messages`` with :data:`PREFIX_INSTRUCTION` for ``prefix`` added to the system turn (a
    system turn made for it when there is none); unchanged when ``prefix`` is empty."""
    if not prefix:
        return list(messages)
    line = PREFIX_INSTRUCTION.format(prefix=prefix)
    if messages and messages[0]["role"] == "system":
        first = {"role": "system", "content": f"{messages[0]['content']} {line}".strip()}
        return [first, *messages[1:]]
    return [{"role": "system", "content": line}, *messages]


def prompt_text(messages: list[dict[str, str]], prefix: str) -> str:
    """The text a completion request sends (and, for chat, what the token estimate counts)."""
    return plain_prompt(messages, prefix)


def request_payload(
    spec: ReaderSpec,
    messages: list[dict[str, str]],
    prefix: str,
    max_tokens: int,
    logprobs: bool = False,
    continued: bool = False,
) -> dict[str, Any]:
    """The request body for ``spec.api``: greedy, ``max_tokens`` new tokens, ``prefix`` sent
    (completion: at the end of the prompt; chat: as a partial assistant turn the server
    continues when ``continued``, else as :data:`PREFIX_INSTRUCTION`), and with ``logprobs``
    the top alternatives of each token."""
    body: dict[str, Any] = {
        "model": spec.model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": spec.seed,
    }
    if spec.api == "completion":
        body["prompt"] = prompt_text(messages, prefix)
        if logprobs:
            body["logprobs"] = TOP_LOGPROBS_COMPLETION
        return body
    turns = list(messages)
    if continued and prefix:
        turns.append({"role": "assistant", "content": prefix})
        body["extra_body"] = {"continue_final_message": True, "add_generation_prompt": False}
    elif prefix:
        turns = with_prefix_instruction(turns, prefix)
    body["messages"] = turns
    if logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = TOP_LOGPROBS_CHAT
    return body


def create_request(client: Any, api: str, payload: Mapping[str, Any]) -> Any:
    """Send ``payload`` once to the endpoint of ``api`` (no retries: the caller's)."""
    if api == "completion":
        return client.completions.create(**payload)
    return client.chat.completions.create(**payload)


def answer_of(response: Any, api: str, instructed: str = "") -> str:
    """The answer (:func:`extract_answer`) of a response's first choice; ``instructed``: the
    prefix the reply was told to begin with (:data:`PREFIX_INSTRUCTION`), removed first
    (case and surrounding white space ignored) when the reply does begin with it."""
    choice = response.choices[0]
    text = (choice.text if api == "completion" else choice.message.content) or ""
    head, prefix = text.lstrip(), instructed.strip()
    if prefix and head[: len(prefix)].casefold() == prefix.casefold():
        text = head[len(prefix) :]
    return extract_answer(text)


def p_yes_of(response: Any, spec: ReaderSpec, question: str) -> float:
    """P(yes) from the first answer token's top log-probabilities: the mass of "yes" spellings
    over that of "yes" + "no" spellings (case and spaces ignored); 0.5 when neither is among
    the top tokens. :class:`LogprobsUnavailable` when the response has no ``logprobs``,
    :class:`NoFirstToken` when it has no first token to read them from."""
    top = _top_logprobs(response.choices[0], spec.api)
    if top is None:
        raise LogprobsUnavailable(
            f"reader {spec.name!r}: the server at {spec.base_url} returns no "
            "logprobs, so P(yes) (LLM annotation, reranking) cannot be computed"
        )
    if not top:
        raise NoFirstToken(
            f"reader {spec.name!r}: {describe_pair(question, 'P(yes)')}: the model ended its "
            f"answer at once (finish_reason {response.choices[0].finish_reason!r}), so the "
            f"server at {spec.base_url} lists no first-token log-probabilities to "
            "read yes/no from (api: chat asks through the model's chat template)"
        )
    yes = sum(math.exp(lp) for tok, lp in top if tok.strip().lower() == "yes")
    no = sum(math.exp(lp) for tok, lp in top if tok.strip().lower() == "no")
    return yes / (yes + no) if yes + no > 0 else 0.5


def _top_logprobs(choice: Any, api: str) -> list[tuple[str, float]] | None:
    """``(token, logprob)`` of the first generated token's top alternatives: ``None`` when the
    response has no ``logprobs``, ``[]`` when it has them but no first token."""
    logprobs = getattr(choice, "logprobs", None)
    if logprobs is None:
        return None
    if api == "completion":
        tops = getattr(logprobs, "top_logprobs", None) or []
        return [(str(t), float(v)) for t, v in (tops[0] or {}).items()] if tops else []
    content = getattr(logprobs, "content", None) or []
    if not content:
        return []
    return [(str(t.token), float(t.logprob)) for t in (content[0].top_logprobs or [])]


def request_fault(spec: ReaderSpec, exc: BaseException, what: str) -> Exception:
    """One line for a failed request: unreachable, refused key, or an HTTP status."""
    import openai

    where = f"reader {spec.name!r}"
    if isinstance(exc, openai.APITimeoutError):
        return EnvironmentFault(
            f"{where}: {what} timed out after {format_given(spec.timeout_seconds)} s (server "
            f"{spec.base_url})"
        )
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        reason = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        return EnvironmentFault(
            f"{where}: cannot reach the OpenAI-compatible server at {spec.base_url} "
            f"({reason}); start it or fix base_url"
        )
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        key = f"${spec.api_key_env}" if spec.api_key_env else "no key"
        return EnvironmentFault(
            f"{where}: the server at {spec.base_url} refused the API key ({key}): "
            f"HTTP {exc.status_code}"
        )
    if isinstance(exc, openai.APIStatusError):
        detail = _first_line(getattr(exc, "message", "") or str(exc))
        return EnvironmentFault(
            f"{where}: {what}: server {spec.base_url} answered HTTP {exc.status_code} ({detail})"
        )
    if isinstance(exc, EnvironmentFault | InputError):
        return exc
    return EnvironmentFault(f"{where}: {what} failed: {type(exc).__name__}: {exc}")


def describe_pair(question: str, what: str) -> str:
    """``<what> for question '<question, cut to 60 characters>'``: a pair in an error line."""
    short_q = question if len(question) <= 60 else question[:57] + "..."
    return f"{what} for question {short_q!r}"


def _first_line(text: str) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line[:200]
