"""The one escaping rule for what the gate prints from files (ref names, a stored baseline's
``retriever.name``, ``reader``, ``dataset``, query and document ids, metric names).

A gate summary is pasted into a pull request; whoever writes the candidate's file name or edits
a baseline file must not be able to forge a line of it. :func:`shown` is used for every such
value, in the text report, the markdown summary, the gate's notes and its error lines:

* **always** (text and markdown): every character that could end a line or change how the
  terminal draws one — C0 and C1 controls (``\\n``, ``\\r``, ``\\t``, ESC…), DEL, the line and
  paragraph separators U+2028/U+2029, the bidirectional overrides and isolates (U+202A–U+202E,
  U+2066–U+2069) and U+FEFF — is written as a visible escape (``\\n``, ``\\x1b``, ``\\u2028``),
  so a value is always exactly one line;
* **markdown**: every ASCII punctuation character is backslash-escaped (CommonMark renders
  ``\\#`` as ``#``): the value cannot open a heading, a table cell (``|``), HTML (``<``), a link
  or image (``[``, ``!``), emphasis (``*``, ``_``), a code span (`````), and an autolink
  (``http://``, ``www.``, ``a@b``) is broken at its punctuation.

JSON output needs none of this (``json.dumps`` escapes); its values stay as stored.
"""

from __future__ import annotations

import string

_INVISIBLE = {
    *range(0x00, 0x20),
    0x7F,
    *range(0x80, 0xA0),
    0x2028,
    0x2029,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0xFEFF,
}
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_PUNCTUATION = frozenset(string.punctuation)


def _visible(char: str) -> str:
    code = ord(char)
    if code not in _INVISIBLE:
        return char
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def shown(value: object, markdown: bool = False) -> str:
    """``value`` as text that stays one line and, with ``markdown``, plain text in GitHub
    markdown (module docstring). The empty string stays empty."""
    out = []
    for char in str(value):
        char = _visible(char)
        if markdown:
            char = "".join(f"\\{c}" if c in _PUNCTUATION else c for c in char)
        out.append(char)
    return "".join(out)
