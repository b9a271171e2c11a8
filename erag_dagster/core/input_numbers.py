"""Numbers written in text input (qrels grades, run scores): one reading, ASCII digits only.

trec_eval reads a qrels relevance with C's ``atol`` and a run score with ``atof``: both read the
longest numeric *prefix* and ignore the rest, so ``1_000`` is 1, ``+-1`` and ``¹`` are 0, and
``1e20`` is 1 as a relevance. Python's ``int``/``float`` differ again (``int("١")`` is 1 for an
Arabic-Indic digit, ``float("1_000")`` is 1000). Here a field must be a number **as a whole**,
written in ASCII, in the subset on which trec_eval, Python and a reader of the file agree; any
other text is refused at ``file:line`` rather than read as a different number:

* **grade** (a relevance judgment): ``[+-]?[0-9]+`` — ``1``, ``+1``, ``-1``, ``007``;
  refused: ``+-1``, ``1.0``, ``1e20``, ``1_000``, ``¹``, ``١``, ``0x1``.
* **score** (a run score): ``[+-]?(digits[.digits]|.digits)([eE][+-]?digits)?`` —
  ``1``, ``-0.5``, ``.5``, ``1e-3``; refused: ``1_000``, ``inf``, ``nan``, ``0x1p3``, ``١``.
  A score that overflows a double (``1e400``) is refused as not finite.
"""

from __future__ import annotations

import math
import re

from erag_dagster.core.errors import InputError

_GRADE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_SCORE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def is_grade(text: str) -> bool:
    """Whether ``text`` (surrounding whitespace ignored) is a grade as defined above."""
    return _GRADE.fullmatch(text.strip()) is not None


def parse_grade(text: str, at: str, what: str = "relevance") -> int:
    """The integer a grade field holds, or :class:`InputError` at ``at`` naming ``what``."""
    if not is_grade(text):
        raise InputError(
            f"{at}: {what} {text!r} is not an integer (ASCII digits with an optional sign, "
            "e.g. 0, 1, 2)"
        )
    value = int(text.strip())
    if not -(2**63) <= value < 2**63:
        raise InputError(f"{at}: {what} {text.strip()} is out of range (a 64-bit integer)")
    return value


def parse_score(text: str, at: str, what: str = "score") -> float:
    """The finite float a score field holds, or :class:`InputError` at ``at``."""
    if _SCORE.fullmatch(text.strip()) is None:
        raise InputError(
            f"{at}: {what} {text!r} is not a number (ASCII decimal, e.g. 12.5 or 1e-3)"
        )
    value = float(text)
    if not math.isfinite(value):
        raise InputError(f"{at}: {what} {text!r} is not finite")
    return value


def format_given(value: float) -> str:
    """A number a user gave (a margin, an alpha, a timeout), written so that it says what was
    given: the shortest text that reads back as the same float (``0.9999999``, ``1e-07``; never
    ``:g``'s six digits, which print ``--margin 0.9999999`` as ``1``), an integral value without
    ``.0`` (``1``, ``60``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    number = float(value)
    if number.is_integer() and abs(number) < 1e16:
        return str(int(number))
    return repr(number)
