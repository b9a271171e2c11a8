"""Prompt building and answer post-processing for the reader (pure functions, no model).

Prompt layout (chat models): system turn, then each few-shot example as a user turn plus an
assistant turn ``f"{answer_prefix} {answer}"``, then the user turn rendered from
``prompt_template``; the assistant turn is opened by the chat template and started with
``answer_prefix`` so the model continues with the answer itself. Models without a chat template
get the same parts as plain text separated by blank lines (see :func:`plain_prompt`).

Which text of a document the reader sees: :func:`reader_passage`.

Versions (:mod:`erag_dagster.core.code_versions`): :data:`PROMPT_BUILDER`, declared here, covers
every rule above and below that shapes what the reader is sent (:func:`reader_passage`,
:func:`render_template`, :func:`build_messages`, :func:`plain_prompt`,
:func:`build_context_prompt`); :data:`POSTPROCESS` (re-exported from
:mod:`erag_dagster.readers.extraction`, where it is declared) covers what is read from the
generation (:func:`~erag_dagster.readers.extraction.extract_answer`). Raise one when its rules
change. Both are part of the reader fingerprint: the extraction's version always was
(``postprocess_version``); the prompt builder's enters the ``prompt`` part only from version 2
on (:func:`prompt_builder_part`), so the answers stored before it had a version keep their keys.

End-to-end context (:func:`build_context_prompt`): passages are joined in rank order with
:data:`CONTEXT_SEPARATOR`; when they exceed the token budget, whole passages are dropped from the
END (lowest ranked first) until the rest fits; if even the top-ranked passage alone does not fit,
it is cut at token level to the budget. Nothing is ever dropped from the question.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.readers.extraction import EXTRACTION
from erag_dagster.readers.spec import FewShotExample, ReaderSpec

#: The prompt builder's version (module docstring): what the reader is sent.
PROMPT_BUILDER = CodeVersion("prompt_builder", "1")
#: The answer extraction's version (:mod:`erag_dagster.readers.extraction`): what is kept of
#: a generation.
POSTPROCESS = EXTRACTION
POSTPROCESS_VERSION = POSTPROCESS.version
CONTEXT_SEPARATOR = "\n\n"
_PLACEHOLDER = re.compile(r"\{(question|passage)\}")

#: Relevance judgement prompt of :meth:`TransformersReader.yes_probability` (LLM annotation).
RELEVANCE_SYSTEM_PROMPT = (
    "You judge whether a passage answers a question. Reply with yes or no only."
)
RELEVANCE_TEMPLATE = (
    "Passage: {passage}\n\nQuestion: {question}\n\n"
    "Is this passage relevant to the question, i.e. does it contain the answer? Answer yes or no."
)

Message = dict[str, str]


def reader_passage(title: str | None, text: str | None) -> str:
    """The document text shown to the reader: ``title`` + newline + ``text``.

    The title is left out when it is empty or when ``text`` already starts with it (passages
    made by :func:`erag_dagster.data.chunking.split_passages` are title-prefixed). Nulls count as
    empty. The label store hashes exactly this string.
    """
    title = (title or "").strip()
    text = text or ""
    if not title or text.startswith(title):
        return text
    return f"{title}\n{text}"


def render_template(template: str, question: str, passage: str) -> str:
    """Fill ``{question}`` and ``{passage}`` in one pass (braces inside the values are kept)."""
    values = {"question": question, "passage": passage}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def build_messages(
    spec: ReaderSpec,
    question: str,
    passage: str,
    *,
    system_prompt: str | None = None,
    template: str | None = None,
    few_shot: Sequence[FewShotExample] | None = None,
) -> list[Message]:
    """Chat messages: system, few-shot (user, assistant) pairs, then the user turn."""
    system = spec.system_prompt if system_prompt is None else system_prompt
    template = spec.prompt_template if template is None else template
    examples = spec.few_shot if few_shot is None else few_shot
    messages: list[Message] = []
    if system:
        messages.append({"role": "system", "content": system})
    for ex in examples:
        messages.append(
            {"role": "user", "content": render_template(template, ex.question, ex.passage)}
        )
        messages.append(
            {"role": "assistant", "content": f"{spec.answer_prefix} {ex.answer}".strip()}
        )
    messages.append({"role": "user", "content": render_template(template, question, passage)})
    return messages


def plain_prompt(messages: Sequence[Message], answer_prefix: str) -> str:
    """Prompt text for models without a chat template: turns separated by blank lines,
    ending with ``answer_prefix`` (no prefix when it is empty)."""
    parts = [m["content"] for m in messages]
    if answer_prefix:
        parts.append(answer_prefix)
    return "\n\n".join(parts)


@dataclass(frozen=True)
class ContextPrompt:
    """The context of an end-to-end prompt.

    ``context``: the passages as shown; ``kept``: how many passages (in rank order) it holds,
    the last possibly cut; ``truncated``: whether the last kept passage was cut at token level;
    ``tokens``: its length as measured by the ``count_tokens`` given.
    """

    context: str
    kept: int
    truncated: bool
    tokens: int


def truncate_words(text: str, max_tokens: int) -> str:
    """Default token-level cut for :func:`build_context_prompt`: the first ``max_tokens``
    whitespace-separated words (the reader passes a tokenizer-based cut instead)."""
    return " ".join(text.split()[: max(0, max_tokens)])


def build_context_prompt(
    passages: Sequence[str],
    budget: int | None,
    count_tokens: Callable[[str], int] = lambda s: len(s.split()),
    truncate: Callable[[str, int], str] = truncate_words,
    separator: str = CONTEXT_SEPARATOR,
) -> ContextPrompt:
    """Join ``passages`` (rank order) into a context of at most ``budget`` tokens.

    Policy: keep the longest prefix of the ranking whose joined text fits (lower-ranked
    passages are dropped whole); if not even the first passage fits, cut it with
    ``truncate(first, budget)`` (shrinking the cut until ``count_tokens`` agrees, since
    tokenisers do not always round-trip). ``budget=None`` keeps everything; an empty list or a
    budget ≤ 0 gives an empty context with ``kept=0``.
    """
    if not passages or (budget is not None and budget <= 0):
        return ContextPrompt("", 0, False, 0)
    if budget is None:
        text = separator.join(passages)
        return ContextPrompt(text, len(passages), False, count_tokens(text))
    kept: list[str] = []
    tokens = 0
    for passage in passages:
        candidate = separator.join([*kept, passage])
        n = count_tokens(candidate)
        if n > budget:
            break
        kept.append(passage)
        tokens = n
    if kept:
        return ContextPrompt(separator.join(kept), len(kept), False, tokens)
    limit = budget
    cut = truncate(passages[0], limit)
    while limit > 0 and count_tokens(cut) > budget:
        limit -= max(1, (count_tokens(cut) - budget))
        cut = truncate(passages[0], limit)
    return ContextPrompt(cut, 1, True, count_tokens(cut))


def prompt_builder_part() -> dict[str, str]:
    """What the prompt builder's version adds to a prompt identity: nothing at version 1,
    ``{"builder_version": N}`` from version 2 on (rule: module docstring)."""
    return {} if PROMPT_BUILDER.initial else {"builder_version": PROMPT_BUILDER.version}


def prompt_identity(spec: ReaderSpec, answer_prefix: str | None) -> dict[str, object]:
    """The prompt part of every backend's reader identity (what of the prompt shapes an
    answer): system prompt, template, the answer prefix actually sent (``None`` when the
    backend cannot send it), few-shot examples, the input-token budget and, from version 2
    on, the prompt builder's version (:func:`prompt_builder_part`)."""
    return {
        **prompt_builder_part(),
        "system_prompt": spec.system_prompt,
        "prompt_template": spec.prompt_template,
        "answer_prefix": answer_prefix,
        "few_shot": [
            {"question": ex.question, "passage": ex.passage, "answer": ex.answer}
            for ex in spec.few_shot
        ],
        "max_input_tokens": spec.max_input_tokens,
    }
