"""The answer a reader means, from what it generated: one function, and when it is final.

Small readers rarely stop at the answer. They restate it ("The Broncos. The AFC won Super…"),
wrap it in markup ("* <strong><em>computational complexity</em></strong>"), open a list
("1. Iran") or announce it ("The answer is yes. …", "Answer:" on a line of its own). Scored as
written, a right span followed by a restatement gets a low token F1 and markup counts as words.
:func:`extract_answer` is the one rule every backend applies to a generation (the transformers,
openai and vllm readers, eRAG, end-to-end and closed-book answers alike), version
:data:`EXTRACTION` (part of every reader fingerprint, so answers of another version are never
served for this one):

1. **The answer line**: the first line (``str.splitlines``) whose answer, by steps 2–4, is not
   empty. A line holding only a lead-in, a bullet or markup (``Answer:``, ``**``) is skipped.
2. **The first sentence** of that line, cut in the *generated* text: at the first ``.``, ``!``
   or ``?`` (closing quotes, brackets and emphasis marks may follow it) that is followed by
   white space, unless the word it ends is an initial or an abbreviation (one letter, a word
   holding a ``.`` such as ``U.S``, or one of :data:`ABBREVIATIONS`); a ``.`` inside a number
   (``6,100.43``) is not followed by white space and never cuts. With ``clause=True`` (the
   policy's choice, :data:`CUT_CLAUSES`) the cut is also made at the first ``,`` or ``;``
   followed by white space, or a dash between spaces (`` - ``, `` – ``, `` — ``): the first
   clause.
3. **Cleaning**, repeated until nothing changes: HTML tags removed (``<strong>``, ``<br/>``);
   markdown emphasis and code marks (``*``, `` ` ``, ``_`` at a word's edge) and heading marks
   (``#``) removed; list bullets (``*``, ``-``, ``+``, ``•``) and enumerators (``1.``,
   ``2)``, ``A.``, ``b)``) at the start removed; a lead-in at the start removed — ``The answer
   is``, ``The answer is:``, ``Answer:``, ``The correct answer is`` and the like
   (:data:`LEAD_IN`), and one leading ``:``; wrapping quotes removed; white space collapsed to
   single spaces.
4. **Trailing punctuation** ``.``, ``,``, ``;`` and ``:`` removed.

An empty generation, or one whose every line is empty by these steps, gives ``""``.
Label-set answers (``metric: accuracy``: yes/no/maybe, options) come out as their label word:
"The answer is yes. The passage…" → "yes", "Yes, because…" → "Yes" — ``accuracy`` then reads
the first normalised word(s) (:mod:`erag_dagster.metrics.downstream`).

**Finality** (:func:`answer_final`): once a text's answer line has its cut (the cut mark and
the white space after it are generated) or its end of line, no continuation can change
``extract_answer``'s result, so generation stops there (:mod:`.stopping`): a reader decodes
the answer and one token more, not the restatement after it. Property tested on random texts
and on the stored answers of the default run (``tests/test_extraction.py``).

Raise :data:`EXTRACTION`'s version whenever a rule above changes: the answers of every reader
are then computed again (their fingerprints change), and the assets that hold them are stale
(:mod:`erag_dagster.core.code_versions`).
"""

from __future__ import annotations

import re

from erag_dagster.core.code_versions import CodeVersion

__all__ = [
    "ABBREVIATIONS",
    "CUT_CLAUSES",
    "EXTRACTION",
    "LEAD_IN",
    "answer_final",
    "extract_answer",
    "line_final",
]

#: The extraction's version (module docstring). Version 1 was the first-line rule (strip, one
#: leading ``:``, the first non-empty line, one final ``.``); version 2 is this module.
EXTRACTION = CodeVersion("postprocess", "2")

CUT_CLAUSES = True
"""Whether the answer is cut at its first clause (step 2), not only its first sentence.
Chosen on the tuning split of the embedded sample (docs/label-methods.md, "Prompts chosen on
data")."""

ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "mt", "vs", "ca", "approx", "fig", "op"}
)
"""Words whose ``.`` does not end a sentence (lower case, without the ``.``). Not ``no``: "No."
is the commonest answer to a yes/no question ("No. The study…")."""

LEAD_IN = re.compile(
    r"^(?:(?:the|my|a)\s+)?(?:correct\s+|final\s+|short\s+|right\s+)?answer"
    r"(?:\s+to\s+(?:the|this|your)\s+question)?\s*(?:is\b\s*:?|:)\s*",
    re.IGNORECASE,
)
"""A lead-in the reader writes before its answer: ``The answer is``, ``Answer:``, …"""

_CLOSERS = r"(?:[*_`\"'\u201d\u2019)\]]|</[A-Za-z][A-Za-z0-9]*\s*>)*"
_SENTENCE_END = re.compile(r"[.!?]" + _CLOSERS + r"(?=\s)")
_CLAUSE_END = re.compile(r"[,;]" + _CLOSERS + r"(?=\s)|\s[-\u2013\u2014]" + r"(?=\s)")
_WORD_BEFORE = re.compile(r"([^\s*_`\"'(\[<>]*)$")
_ENUMERATOR = re.compile(r"^\s*(?:[*\-+\u2022#]+\s*)*\(?(?:1|[A-Za-z])$")
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
_BULLET = re.compile(r"^(?:[*\-+\u2022\u2023\u25e6#]+|\(?(?:1|[A-Za-z])[.)])\s+")
_EMPHASIS = re.compile(r"[*`]+|(?:(?<=\s)|^)_+|_+(?=\s|$)")
_QUOTES = "\"'\u201c\u201d\u2018\u2019\u00ab\u00bb"
_TRAILING = ".,;: \t"


def _ends_abbreviation(line: str, at: int) -> bool:
    """Whether the ``.`` at ``line[at]`` closes an initial, an abbreviation or the
    enumerator that opens the line (step 2)."""
    if line[at] != ".":
        return False
    if _ENUMERATOR.match(line[:at]):  # "1. Iran", "A. Iran": a list's first mark
        return True
    word = _WORD_BEFORE.search(line[:at]).group(1)  # type: ignore[union-attr]
    return len(word) == 1 or "." in word or word.lower() in ABBREVIATIONS


def _in_brackets(line: str, at: int) -> bool:
    """Whether ``line[at]`` lies inside a bracket opened before it and not yet closed
    (``Goldreich (2008, Chapter 1.2)``: that comma is not a clause's end)."""
    before = line[:at]
    return before.count("(") > before.count(")") or before.count("[") > before.count("]")


def _cut(line: str, clause: bool) -> tuple[str, bool]:
    """``(the line up to its first cut, whether a cut was found)`` (step 2). A cut found in a
    prefix of a line is the cut of every longer line: each test reads only the characters
    before the mark and the one white-space character after it."""
    cuts = [
        m.start() for m in _SENTENCE_END.finditer(line) if not _ends_abbreviation(line, m.start())
    ]
    if clause:
        cuts += [m.start() for m in _CLAUSE_END.finditer(line) if not _in_brackets(line, m.start())]
    if not cuts:
        return line, False
    return line[: min(cuts)], True


def _clean(text: str) -> str:
    """Step 3 and 4 on one cut piece of a line, repeated to a fixed point."""
    previous = None
    while text != previous:
        previous = text
        text = _TAG.sub("", text)
        text = " ".join(text.split())
        text = _BULLET.sub("", text)
        text = _EMPHASIS.sub("", text).strip()
        text = LEAD_IN.sub("", text)
        if text.startswith(":"):
            text = text[1:]
        text = text.strip().strip(_QUOTES).rstrip(_TRAILING).strip()
    return text


def _line_answer(line: str, clause: bool) -> tuple[str, bool]:
    """The answer a line gives (``""``: none) and whether its cut was found."""
    piece, found = _cut(line, clause)
    return _clean(piece), found


def extract_answer(text: str, clause: bool = CUT_CLAUSES) -> str:
    """The answer a reader means in ``text`` (policy: module docstring; ``clause`` as
    :data:`CUT_CLAUSES`). ``"The Broncos. The AFC won"`` → ``"The Broncos"``;
    ``"* <strong><em>computational complexity</em></strong>"`` → ``"computational
    complexity"``; ``"Answer:\\n1. Iran"`` → ``"Iran"``; ``""`` → ``""``."""
    for line in text.splitlines():
        answer, _ = _line_answer(line, clause)
        if answer:
            return answer
    return ""


def _final(text: str, clause: bool, line_end: bool) -> bool:
    """Whether the answer line of ``text`` (under ``clause``) is found and settled: by its cut
    or its end of line, or with ``line_end`` by its end of line only."""
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029")
        complete = body != line
        answer, found = _line_answer(body, clause)
        if answer:
            return complete or (found and not line_end)
        if not complete:
            return False
    return False


def answer_final(text: str, clause: bool = CUT_CLAUSES) -> bool:
    """Whether ``extract_answer(text + more) == extract_answer(text)`` for every ``more``: the
    answer line has been found and either its cut or its end of line was generated.
    ``"Denver Broncos. The"`` → True; ``"Denver Broncos."`` → False (a number such as
    ``"Broncos.5"`` could follow); ``"Answer:\n"`` → False (the answer has not begun)."""
    return _final(text, clause, line_end=False)


def line_final(text: str) -> bool:
    """Whether the answer line is complete under both cut policies (sentence and clause): a
    later stop than :func:`answer_final`, after which neither policy's answer can change. A
    measurement that records generations up to it can read the answer under either policy and
    at any smaller ``max_new_tokens`` (``scripts/tune_prompts.py``)."""
    return all(_final(text, clause, line_end=True) for clause in (False, True))
