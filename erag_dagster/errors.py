"""Errors raised for bad user input.

Every error the package raises for malformed data or configuration is an
:class:`InputError`: its message is one line that names *what* is wrong and
*where* (file and line, or the offending id), so a CLI can print it as-is.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input (file, id, label, metric name, config): one-line message."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def where(path: object, line: int | None = None) -> str:
    """Format a location as ``path:line`` (line is 1-based) or ``path``."""
    return f"{path}:{line}" if line is not None else f"{path}"
