"""OpenAIOptions: the keys only ``backend: openai`` reads (a reader behind an OpenAI-compatible
HTTP server, :mod:`.openai_reader`), and the one rule for secrets in a reader entry.

=========================== ====================================================================
``base_url``                the server's OpenAI API root, e.g. ``http://127.0.0.1:8000/v1``
                            (required; no credentials in it: a user name, password or
                            ``api_key=``/``token=`` parameter is refused, the key belongs in
                            ``api_key_env``)
``api_key_env``             the NAME of the environment variable holding the API key (``null``:
                            no key); the key itself is never in the registry, fingerprint or
                            logs, and a value that looks like a key is refused without being
                            printed (:func:`~erag_dagster.core.credentials.looks_like_key`)
``allow_link_local``        ``true`` lets ``base_url`` name a link-local or cloud metadata
                            address (:mod:`.addresses`; ``false``, the default, refuses it)
``api``                     ``chat`` (``/v1/chat/completions``, the server's chat template) or
                            ``completion`` (``/v1/completions`` with the plain prompt)
``continue_final_message``  chat only: how ``answer_prefix`` reaches the model. ``auto``
                            (default): the reader's probe asks the server once to continue a
                            partial assistant turn that holds the prefix (vLLM's
                            ``continue_final_message``); a server that accepts it gets the
                            prefix so, one that refuses the request gets an instruction to begin
                            the reply with the prefix instead
                            (:data:`~.openai_payload.PREFIX_INSTRUCTION`), and either way the
                            answer is read by the one extraction
                            (:func:`~erag_dagster.readers.extraction.extract_answer`, a leading
                            copy of the prefix removed). ``true``: the continued turn or a
                            one-line error; ``false``: always the instruction
``concurrency``             requests in flight (4, >= 1)
``timeout_seconds``         per-request timeout, seconds (120, > 0)
``max_retries``             retries of a request on 429 / 5xx / connection errors (8, >= 0)
=========================== ====================================================================

Only ``api`` and ``continue_final_message`` change what is sent, and so enter the reader's
identity (:meth:`OpenAIReader.identity <.openai_reader.OpenAIReader.identity>`); the others are
operational. ``model`` must name what the server serves (the packaged default is refused).
Light: imports neither torch nor the ``openai`` package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from erag_dagster.core.credentials import looks_like_key, mask_credentials, url_credentials
from erag_dagster.core.errors import InputError
from erag_dagster.readers.addresses import link_local_reason
from erag_dagster.readers.options import BackendOptions, check_int

__all__ = ["API_MODES", "CONTINUE_MODES", "OpenAIOptions", "refuse_secrets"]

API_MODES = ("chat", "completion")
CONTINUE_MODES = (True, False, "auto")
"""Values of ``continue_final_message`` (module docstring)."""
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: ``model`` values that name a model of this package, never one a server serves.
_PACKAGED_PREFIX = "packaged:"


@dataclass(frozen=True)
class OpenAIOptions(BackendOptions):
    """Options of the OpenAI-compatible server reader (see the module docstring)."""

    base_url: str | None = None
    api_key_env: str | None = None
    allow_link_local: bool = False
    api: str = "chat"
    continue_final_message: bool | str = "auto"
    concurrency: int = 4
    timeout_seconds: float = 120.0
    max_retries: int = 8

    def validate(self, where: str, model: str) -> None:
        self._validate_base_url(where)
        if model.startswith(_PACKAGED_PREFIX):
            raise InputError(f"{where}: backend openai needs 'model': the id the server serves")
        if self.api not in API_MODES:
            raise InputError(f"{where}: api {self.api!r} unknown; use {', '.join(API_MODES)}")
        mode = self.continue_final_message
        if not (isinstance(mode, bool) or mode == "auto"):
            raise InputError(
                f"{where}: continue_final_message must be auto, true or false, got "
                f"{self.continue_final_message!r}"
            )
        refuse_secrets(None, self.api_key_env, where)
        if self.api_key_env is not None and not _ENV_NAME_RE.match(self.api_key_env):
            raise InputError(
                f"{where}: api_key_env must be the NAME of an environment variable "
                "(letters, digits, '_'), not the key itself"
            )
        check_int(where, "concurrency", self.concurrency, 1)
        check_int(where, "max_retries", self.max_retries, 0)
        if not self.timeout_seconds > 0:
            raise InputError(f"{where}: timeout_seconds must be > 0, got {self.timeout_seconds!r}")

    def _validate_base_url(self, where: str) -> None:
        """``base_url``: http(s), parsable, no credentials, no link-local or metadata address
        unless ``allow_link_local`` (:mod:`.addresses`). Messages show it masked."""
        url = str(self.base_url or "")
        shown = mask_credentials(url)
        if not url.startswith(("http://", "https://")):
            raise InputError(
                f"{where}: backend openai needs base_url: http(s)://HOST:PORT/v1, got {shown!r}"
            )
        try:
            parts = urlsplit(url)
            host = parts.hostname
            parts.port  # noqa: B018  (parses the port: ValueError if it is not a number)
        except ValueError as exc:
            raise InputError(f"{where}: base_url {shown!r} is not a valid URL ({exc})") from None
        if not host:
            raise InputError(f"{where}: base_url {shown!r} names no host")
        refuse_secrets(url, None, where)
        if (reason := link_local_reason(host)) and not self.allow_link_local:
            raise InputError(
                f"{where}: base_url {shown!r}: {reason}; set allow_link_local: true in the "
                "reader entry if this really is your inference server"
            )


def refuse_secrets(base_url: Any, api_key_env: Any, where: str) -> None:
    """The one rule for secrets in a reader entry: a ``base_url`` carrying credentials
    (:func:`~erag_dagster.core.credentials.url_credentials`) or an ``api_key_env`` that looks like a
    key (:func:`~erag_dagster.core.credentials.looks_like_key`) is an :class:`InputError` that names
    ``where`` and never shows the secret. Applied when a registry loads (to every reader entry,
    whatever its backend) and when a spec is built (a reader config file)."""
    if isinstance(base_url, str) and (found := url_credentials(base_url)):
        raise InputError(
            f"{where}: base_url {mask_credentials(base_url)!r} carries {' and '.join(found)}; "
            "credentials do not belong in the registry: put the key in an environment variable "
            "and name it with api_key_env (e.g. OPENAI_API_KEY)"
        )
    if isinstance(api_key_env, str) and looks_like_key(api_key_env):
        raise InputError(
            f"{where}: api_key_env looks like an API key itself (not shown); put the key in "
            "the environment and give the NAME of an environment variable, e.g. "
            "api_key_env: OPENAI_API_KEY"
        )
