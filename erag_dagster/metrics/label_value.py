"""The one rule for a relevance label's value: a real number, not NaN, within [0, 1].

Signed labels (a document's utility minus the closed-book utility, in ``[-1, 1]``) follow the
same rule with the lower bound ``low=-1.0``.

Every producer and consumer of labels (the labeller's metric scores, the label store, the list
metrics and the labels tables they read) checks values with :func:`checked_label`, so they
accept and refuse exactly the same values. ``bool`` counts as a number (``True`` is 1), as in
Python; an integer too large for a float is outside [0, 1]. The reference-compatible scorer
(:mod:`erag_dagster.metrics.erag_compat`) keeps its own rule on purpose: it reproduces what
``erag`` 0.0.1 accepts, not what this project accepts.
"""

from __future__ import annotations

import math
import numbers

import polars as pl

from erag_dagster.core.errors import InputError

__all__ = ["bad_label_rows", "checked_label"]


def checked_label(value: object, where: str, low: float = 0.0) -> float:
    """``value`` as a float in ``[low, 1]`` (``low`` is 0, or -1 for signed labels), else
    :class:`InputError` ``"<where>: label ..."``.

    Messages: ``label X is not a number``, ``label is NaN``, ``label X is outside [0, 1]``.
    """
    span = f"[{low:g}, 1]"
    if not isinstance(value, numbers.Real):
        raise InputError(f"{where}: label {value!r} is not a number")
    try:
        number = float(value)
    except OverflowError:
        raise InputError(f"{where}: label {value!r} is outside {span}") from None
    if math.isnan(number):
        raise InputError(f"{where}: label is NaN")
    if not low <= number <= 1.0:
        raise InputError(f"{where}: label {number!r} is outside {span}")
    return number


def bad_label_rows(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    """Rows of ``frame`` whose float ``column`` breaks the rule (null, NaN, infinite or outside
    [0, 1]); pass the first one's value to :func:`checked_label` for the message."""
    value = pl.col(column)
    return frame.filter(value.is_null() | value.is_nan() | (value < 0.0) | (value > 1.0))
