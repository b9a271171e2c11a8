"""Retrying one HTTP request to an OpenAI-compatible server: which errors, and how long to wait.

Policy (:func:`call_with_retries`):

* retried: HTTP 429 and 5xx, connection errors and timeouts (``openai.APIConnectionError``
  covers both), up to ``max_retries`` times after the first attempt;
* the wait before retry ``n`` (0-based) is "full jitter" exponential backoff
  (Brooker, *Exponential Backoff And Jitter*, AWS Architecture Blog 2015):
  ``uniform(0, min(cap, base * 2**n))`` with ``base`` = 0.5 s and ``cap`` = 30 s;
* a ``Retry-After`` header (seconds, or an HTTP date; RFC 9110 §10.2.3) replaces that wait
  when it is longer, capped at :data:`RETRY_AFTER_CAP` seconds;
* anything else (400, 401, 404, 422 …) is not retried: the caller turns it into one line.

Nothing here reads or logs the API key.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

BACKOFF_BASE = 0.5  # seconds
BACKOFF_CAP = 30.0  # seconds
RETRY_AFTER_CAP = 300.0  # seconds


def backoff_seconds(attempt: int, rng: random.Random | None = None) -> float:
    """Full-jitter wait before retry ``attempt`` (0-based), seconds."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2.0**attempt)
    return (rng or random).uniform(0.0, ceiling)


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds asked by a ``Retry-After`` header (delta-seconds or HTTP date); ``None`` when
    absent or unreadable. Negative values become 0; capped at :data:`RETRY_AFTER_CAP`."""
    if headers is None:
        return None
    raw = headers.get("retry-after") if hasattr(headers, "get") else None
    if raw is None:
        return None
    raw = str(raw).strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), RETRY_AFTER_CAP)


def is_retryable(exc: BaseException) -> bool:
    """429, 5xx, connection errors and timeouts (``openai`` exception types)."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return False


def call_with_retries(
    call: Callable[[], T],
    max_retries: int,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, retried on :func:`is_retryable` errors (policy: module docstring).

    ``on_retry(attempt, error, wait_seconds)`` runs before each wait. The last error is
    raised once ``max_retries`` retries are spent.
    """
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not is_retryable(exc) or attempt >= max_retries:
                raise
            wait = backoff_seconds(attempt)
            response = getattr(exc, "response", None)
            asked = retry_after_seconds(getattr(response, "headers", None))
            if asked is not None:
                wait = max(wait, asked)
            if on_retry is not None:
                on_retry(attempt, exc, wait)
            sleep(wait)
            attempt += 1
