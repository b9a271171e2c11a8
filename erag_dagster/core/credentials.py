"""Credentials: recognise them, refuse them where they do not belong, mask them where printed.

Secrets come from environment variables only (an API key from ``$<api_key_env>``, a database
password from ``PGPASSWORD`` / ``~/.pgpass``); they never belong in the registry, a URL, a
store, a fingerprint, metadata or a message. This module is the ONE place that says what a
credential looks like:

* in a URL: a user-info part (``scheme://user:password@host``; the password is the secret) and
  query parameters whose name says secret (:data:`SECRET_PARAMETERS`, case-insensitive, ``-``
  and ``_`` alike: ``api_key``, ``token``, ``password``, ``sig`` …);
* in a libpq keyword DSN (``host=db password=hunter2``): the ``password`` keyword;
* in free text: ``Bearer <token>`` and the well-known key prefixes (:data:`KEY_PREFIXES`, e.g.
  ``sk-…``, ``hf_…``, ``ghp_…``, ``AKIA…``).

:func:`mask_credentials` replaces every secret it recognises in any text with ``***`` (the
user name and host stay, so a message still says *where*); it is applied to URLs before they
are printed, to reader specs before they are stored, to rows copied between stores and, as a
last line of defence, to every error line the command line prints. :func:`url_credentials`
says what a URL carries, for the places that refuse it (a reader ``base_url``, a store URL).
:func:`looks_like_key` tells a key typed where a variable NAME was expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "KEY_PREFIXES",
    "MASK",
    "SECRET_PARAMETERS",
    "has_credentials",
    "looks_like_key",
    "mask_credentials",
    "mask_in",
    "url_credentials",
]

MASK = "***"

SECRET_PARAMETERS = frozenset(
    {"apikey", "api_key", "key", "token", "access_token", "auth", "auth_token", "authorization",
     "password", "passwd", "pwd", "secret", "client_secret", "sig", "signature", "x_api_key",
     "session", "sessionid", "credential", "credentials"}
)  # fmt: skip
"""Query-parameter (and DSN keyword) names whose value is a secret, normalised: lower case,
``-`` read as ``_``."""

KEY_PREFIXES = (
    "sk-", "sk_", "pk_live_", "rk_live_", "hf_", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_",
    "glpat-", "xoxb-", "xoxp-", "AKIA", "ASIA", "AIza", "eyJ",
)  # fmt: skip
"""Prefixes of well-known API keys and tokens (OpenAI and Stripe ``sk-``/``sk_``, Hugging Face
``hf_``, GitHub ``ghp_``…, GitLab ``glpat-``, Slack ``xox*-``, AWS ``AKIA``/``ASIA``, Google
``AIza``, a JWT's ``eyJ``)."""

# scheme://user:password@ — the password runs to the LAST '@' before the path
_URL_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/?#\s]*)@")
_PARAM = re.compile(r"(?P<name>[A-Za-z][A-Za-z0-9_-]*)=(?P<value>[^&\s#'\"]*)")
_DSN_PASSWORD = re.compile(
    r"(?P<name>\bpassword\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|[^\s'\"]+)", re.IGNORECASE
)
_BEARER = re.compile(r"(?P<name>\bBearer\s+)(?P<value>[A-Za-z0-9._~+/=-]+)", re.IGNORECASE)
_FREE_TEXT_PREFIXES = [p for p in KEY_PREFIXES if p not in ("AKIA", "ASIA", "eyJ")]
_KEY_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_-])(?:(?:" + "|".join(re.escape(p) for p in _FREE_TEXT_PREFIXES) + r")"
    r"[A-Za-z0-9_\-.]{8,}|A[KS]IA[A-Z0-9]{16}\b|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_.-]+)"
)


def _secret_name(name: str) -> bool:
    return name.lower().replace("-", "_") in SECRET_PARAMETERS


def mask_credentials(text: str) -> str:
    """``text`` with every credential this module recognises replaced by ``***``.

    URL user info keeps the user name (``http://bob:***@host``; a lone user name is kept
    unless it looks like a key, :func:`looks_like_key`: ``http://***@host``); a secret query
    parameter or DSN ``password`` keeps its name (``api_key=***``); ``Bearer`` tokens and keys
    with a known prefix are masked whole. Anything else is left as it is (idempotent: masking
    twice changes nothing more).
    """
    if not text:
        return text

    def userinfo(match: re.Match[str]) -> str:
        info = match.group("info")
        if info == MASK or info.endswith(":" + MASK):
            return match.group(0)
        user, sep, _ = info.partition(":")
        if not sep:  # a lone user name: kept (a database user), unless it is a key
            user = MASK if looks_like_key(user) else user
            return f"{match.group('head')}{user}@"
        return f"{match.group('head')}{user}:{MASK}@"

    def param(match: re.Match[str]) -> str:
        if _secret_name(match.group("name")) and match.group("value"):
            return f"{match.group('name')}={MASK}"
        return match.group(0)

    text = _URL_USERINFO.sub(userinfo, text)
    text = _DSN_PASSWORD.sub(lambda m: m.group("name") + MASK, text)
    text = _PARAM.sub(param, text)
    text = _BEARER.sub(lambda m: m.group("name") + MASK, text)
    return _KEY_TOKEN.sub(MASK, text)


def has_credentials(text: str) -> bool:
    """Whether ``text`` holds something :func:`mask_credentials` would mask: the one test of a
    literal secret where only a reference belongs (a component attribute, a resource's
    config), so what is refused and what is masked are the same thing."""
    return isinstance(text, str) and mask_credentials(text) != text


def mask_in(value: Any) -> Any:
    """:func:`mask_credentials` applied to every string inside ``value`` (mappings, lists and
    tuples walked; mapping keys kept; other values returned as they are)."""
    if isinstance(value, str):
        return mask_credentials(value)
    if isinstance(value, Mapping):
        return {k: mask_in(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(mask_in(v) for v in value)
    return value


def url_credentials(url: str) -> list[str]:
    """What secrets ``url`` carries, in words (``"a password"``, ``"a user name"``,
    ``"the query parameter 'api_key'"``, ``"the fragment parameter 'token'"``); empty when
    none. A fragment (``#token=…``) is never sent to a server, but it is a place a token gets
    pasted into and printed from, so its secret parameters count as the query's do. An
    unparsable URL carries none (its parser's error is reported elsewhere)."""
    try:
        parts = urlsplit(url.strip())
        password, user = parts.password, parts.username
    except ValueError:
        return []
    found = []
    if password is not None:
        found.append("a password")
    elif user:
        found.append("a user name")
    for where, text in (("query", parts.query), ("fragment", parts.fragment)):
        for piece in text.split("&"):
            name, eq, value = piece.partition("=")
            if eq and value and _secret_name(name):
                found.append(f"the {where} parameter {name!r}")
    return found


def looks_like_key(value: str) -> bool:
    """True when ``value``, given where a variable NAME belongs, looks like a key itself.

    A key: it starts with a known prefix (:data:`KEY_PREFIXES`), or it holds a run of 20 or
    more letters and digits without ``_`` that mixes digits with letters (random key material;
    variable names such as ``OPENAI_API_KEY`` or ``my_server_key_2`` are words between
    underscores), or it is 32+ characters with no ``_`` at all.
    """
    text = value.strip()
    if text.startswith(KEY_PREFIXES):
        return True
    for run in re.findall(r"[A-Za-z0-9]{20,}", text):
        if re.search(r"[0-9]", run) and re.search(r"[A-Za-z]", run):
            return True
    return len(text) >= 32 and "_" not in text
