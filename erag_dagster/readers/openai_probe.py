"""Probing an OpenAI-compatible server before any labelling: what it says it serves.

:func:`probe_server` (called once per reader by :meth:`OpenAIReader.load
<erag_dagster.readers.openai_reader.OpenAIReader.load>`, also on first use of its
``fingerprint``): ``GET {base_url}/models`` — an unreachable server is a one-line
:class:`~erag_dagster.core.errors.EnvironmentFault`, a model the server does not list a one-line
:class:`~erag_dagster.core.errors.InputError` naming what it does serve — then one 1-token
generation that reads the model id and ``system_fingerprint`` the server reports and its token
count of a probe prompt (for the cost estimate). The result, :class:`ServerInfo`, is what the
reader's identity holds of the remote model, since its weights cannot be hashed.

Through ``api: chat`` with an ``answer_prefix``, that generation also settles how the prefix is
sent (``continue_final_message``, :mod:`.openai_options`): with ``auto`` it asks the server to
continue a partial assistant turn holding the prefix; a server that answers continues it from
then on (:attr:`ServerInfo.continues`), one that refuses the request with an HTTP error
(``transformers serve`` answers 422: the field is unknown to it) gets the prefix as an
instruction instead (:data:`~.openai_payload.PREFIX_INSTRUCTION`), said once in the log. With
``true`` a refusal is the one-line error; with ``false`` nothing is asked.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from erag_dagster.core.errors import InputError
from erag_dagster.readers.openai_payload import (
    create_request,
    prompt_text,
    request_fault,
    request_payload,
)
from erag_dagster.readers.prompts import build_messages
from erag_dagster.readers.retry import call_with_retries
from erag_dagster.readers.spec import ReaderSpec

#: ``/models`` entry fields that describe the served model (others, e.g. ``status``, vary).
MODEL_ENTRY_KEYS = ("id", "root", "parent", "max_model_len", "created", "owned_by")
#: Probe passage for the server's token count (ordinary English, ~90 words).
PROBE_PASSAGE = (
    "The river rises in the northern hills and flows south for about two hundred kilometres "
    "before it reaches the sea. Its valley was settled early, and the old market town on its "
    "banks grew rich on the wool trade in the fourteenth century. A stone bridge of nine arches, "
    "built in 1410, still carries the main road across the water. Floods in 1953 damaged the "
    "lower town, and a new embankment was finished six years later."
)
PROBE_QUESTION = "When was the stone bridge built?"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerInfo:
    """What the probe learned: the ``/models`` entry, a response's model id and
    ``system_fingerprint``, and tokens per character of the probe prompt."""

    entry: dict[str, Any]
    response_model: str | None
    system_fingerprint: str | None
    tokens_per_char: float
    continues: bool = False
    """Whether chat requests send the answer prefix as a partial assistant turn the server
    continues (module docstring); ``False`` for completions and without a prefix."""


def probe_server(spec: ReaderSpec, client: Any) -> ServerInfo:
    """List the server's models (10 s at most per try), check ``spec.model`` is one of them,
    then generate one token of the probe prompt through ``client``."""
    where = f"reader {spec.name!r}"
    probe_client = client.with_options(timeout=min(10.0, spec.timeout_seconds))
    try:
        listing = call_with_retries(
            lambda: list(probe_client.models.list()), min(2, spec.max_retries)
        )
    except Exception as exc:
        raise request_fault(spec, exc, f"GET {spec.base_url}/models") from None
    served = {getattr(m, "id", None): m for m in listing}
    if spec.model not in served:
        names = ", ".join(repr(s) for s in list(served)[:10]) or "nothing"
        raise InputError(
            f"{where}: the server at {spec.base_url} does not serve model {spec.model!r}; "
            f"it serves {names}"
        )
    raw = served[spec.model].model_dump()
    entry = {k: raw[k] for k in MODEL_ENTRY_KEYS if raw.get(k) is not None}
    messages = build_messages(spec, PROBE_QUESTION, PROBE_PASSAGE)
    mode = spec.continue_final_message if spec.api == "chat" and spec.answer_prefix else False
    what = f"a 1-token probe generation of {spec.model!r}"

    def probe(continued: bool) -> Any:
        payload = request_payload(spec, messages, spec.answer_prefix, 1, continued=continued)
        return call_with_retries(
            lambda: create_request(client, spec.api, payload), min(2, spec.max_retries)
        )

    continues = mode is not False
    try:
        response = probe(continues)
    except Exception as exc:
        if not (continues and _refused(exc)):
            raise request_fault(spec, exc, what) from None
        fault = request_fault(spec, exc, what)
        if mode is True:
            raise InputError(
                f"{where}: continue_final_message is true but the server at {spec.base_url} "
                f"refuses to continue a partial assistant turn ({fault}); set "
                "continue_final_message: auto (the prefix then goes as an instruction)"
            ) from None
        log.info(
            "reader %s: the server at %s does not continue a partial assistant turn (%s); the "
            "answer prefix goes as an instruction",
            spec.name, spec.base_url, fault,
        )  # fmt: skip
        continues = False
        try:
            response = probe(False)
        except Exception as again:
            raise request_fault(spec, again, what) from None
    prompt_tokens = getattr(getattr(response, "usage", None), "prompt_tokens", None) or 0
    chars = len(prompt_text(messages, spec.answer_prefix))
    ratio = prompt_tokens / chars if prompt_tokens and chars else 0.25
    return ServerInfo(
        entry, getattr(response, "model", None), response.system_fingerprint, ratio, continues
    )


def _refused(exc: BaseException) -> bool:
    """Whether a request failed because the server refused it (an HTTP 4xx or 5xx status
    other than a refused key or a rate limit), not because it could not be reached."""
    import openai

    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return False
    return isinstance(exc, openai.APIStatusError) and exc.status_code != 429
