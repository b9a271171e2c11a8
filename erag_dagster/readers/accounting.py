"""Token accounting for a reader: the estimate before a run, and what a run used.

* :func:`run_estimate` — before generating: ``pairs_to_generate`` × the mean prompt tokens of
  those pairs (the reader's :meth:`estimate_prompt_tokens`: exact with a local tokenizer,
  estimated from the server's count of a probe prompt for ``backend: openai``), measured on an
  evenly spaced sample of at most :data:`ESTIMATE_SAMPLE` pairs; plus the most output tokens
  the run can take (pairs × ``max_new_tokens``).
* :func:`usage_delta` — tokens in/out (and requests, retries) between two :meth:`usage`
  readings of a reader, i.e. what one labelling call used.

A reader without these methods gives an empty estimate / usage (``{}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ESTIMATE_SAMPLE = 256
USAGE_KEYS = ("requests", "prompt_tokens", "completion_tokens", "retries")


def run_estimate(reader: Any, items: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """``pairs_to_generate``, ``mean_prompt_tokens``, ``estimated_prompt_tokens`` and
    ``max_completion_tokens`` for generating ``items`` (``{}`` if the reader cannot count)."""
    count = getattr(reader, "estimate_prompt_tokens", None)
    if count is None or not items:
        return {}
    n = len(items)
    step = max(1, n // ESTIMATE_SAMPLE)
    sample = [items[i] for i in range(0, n, step)][:ESTIMATE_SAMPLE]
    tokens = count(sample)
    mean = sum(tokens) / len(tokens)
    return {
        "pairs_to_generate": n,
        "mean_prompt_tokens": round(mean, 1),
        "estimated_prompt_tokens": round(mean * n),
        "max_completion_tokens": n * int(reader.spec.max_new_tokens),
    }


def estimate_line(reader_name: str, estimate: Mapping[str, Any]) -> str:
    """One human line for :func:`run_estimate`'s result."""
    return (
        f"{reader_name}: estimate before generating: {estimate['pairs_to_generate']} pairs x "
        f"{estimate['mean_prompt_tokens']:.0f} mean prompt tokens = "
        f"{estimate['estimated_prompt_tokens']} prompt tokens "
        f"(+ at most {estimate['max_completion_tokens']} output tokens)"
    )


def estimate_summary(estimate: Mapping[str, Any]) -> str:
    """:func:`run_estimate`'s result in one short line, without the reader's name (the main
    job's terminal note: ``90 pairs to generate, ~20,970 prompt tokens (233 per pair), at most
    1,440 output tokens (estimate)``)."""
    return (
        f"{estimate['pairs_to_generate']:,} pairs to generate, "
        f"~{estimate['estimated_prompt_tokens']:,} prompt tokens "
        f"({estimate['mean_prompt_tokens']:.0f} per pair), "
        f"at most {estimate['max_completion_tokens']:,} output tokens (estimate)"
    )


def usage_of(reader: Any) -> dict[str, int]:
    """The reader's :meth:`usage` totals (``{}`` when it has none)."""
    usage = getattr(reader, "usage", None)
    return dict(usage()) if callable(usage) else {}


def usage_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """``after - before`` per :data:`USAGE_KEYS` (``{}`` when either is empty)."""
    if not before and not after:
        return {}
    return {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in USAGE_KEYS}
