"""Downstream metrics: score one reader answer against the gold answers of its query.

In eRAG (Salemi & Zamani, SIGIR 2024, §2) the reader answers the question from *one* retrieved
document at a time; the score of that answer against the gold answers is the document's relevance
label. Every function here has the signature ``(prediction: str, golds: Sequence[str]) -> float``,
returns a value in ``[0, 1]`` and takes the **maximum over the gold answers** (as the SQuAD v1.1
and KILT evaluation scripts do). Each formula lives here and nowhere else.

Normalisation (:func:`normalize_answer`) is the one of the official SQuAD v1.1 script, copied by
KILT's ``eval_downstream.py``: lower-case, drop ASCII punctuation (``string.punctuation``), drop the
articles ``a``/``an``/``the`` as whole words, collapse whitespace.

================  =======================================================================
name              formula
================  =======================================================================
``em``            ``1`` if ``normalize(pred) == normalize(gold)`` else ``0``
``f1``            token F1 of the normalised token multisets (SQuAD v1.1)
``rougel``        ROUGE-L F-measure as the ``rouge`` package computes it (KILT's rouge-l "f")
``accuracy``      ``1`` if the prediction's leading normalised tokens are the gold label
``contains``      ``1`` if the normalised gold occurs as a contiguous token run in the prediction
================  =======================================================================

Each metric is declared once, with its version, in :data:`DOWNSTREAM_METRICS` (a
:class:`DownstreamMeasure`); a change to a formula or to :func:`normalize_answer` raises the
version of every metric it changes (rules: :mod:`erag_dagster.core.code_versions`).

Edge-case policy: an empty ``golds`` (or a bare ``str`` passed for ``golds``) is an
:class:`InputError` — a label cannot be computed without gold answers. Empty or whitespace-only
predictions are allowed and follow each formula (``em`` is 1 only if a gold also normalises to
the empty string; ``f1``, ``rougel``, ``accuracy`` and ``contains`` give 0).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from erag_dagster.core.code_versions import CodeVersion
from erag_dagster.core.errors import InputError

DownstreamMetric = Callable[[str, Sequence[str]], float]

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 answer normalisation: lower, strip punctuation, articles and extra whitespace.

    The steps run in the official order — ``lower`` → remove punctuation → replace ``a|an|the``
    (whole words) by a space → join on single spaces — so results equal the SQuAD/KILT script's.
    """
    lowered = text.lower()
    no_punct = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punct)
    return " ".join(no_articles.split())


def _check_golds(golds: Sequence[str]) -> Sequence[str]:
    if isinstance(golds, str):
        raise InputError("gold answers must be a list of strings, got a single string")
    if len(golds) == 0:
        raise InputError("no gold answers: a downstream metric needs at least one gold answer")
    return golds


def _max_over_golds(
    score: Callable[[str, str], float], prediction: str, golds: Sequence[str]
) -> float:
    return float(max(score(prediction, gold) for gold in _check_golds(golds)))


# --- exact match ------------------------------------------------------------------------------


def _em_one(prediction: str, gold: str) -> float:
    return 1.0 if normalize_answer(prediction) == normalize_answer(gold) else 0.0


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """``max_g [normalize(prediction) == normalize(g)]`` — SQuAD v1.1 / KILT normalised EM."""
    return _max_over_golds(_em_one, prediction, golds)


# --- token F1 ---------------------------------------------------------------------------------


def _f1_one(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    overlap = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """SQuAD v1.1 token F1, max over golds.

    With ``c`` = size of the multiset intersection of the normalised tokens,
    ``P = c / |pred|``, ``R = c / |gold|`` and ``F1 = 2PR / (P + R)``; ``F1 = 0`` when ``c = 0``
    (also when either side normalises to no tokens).
    """
    return _max_over_golds(_f1_one, prediction, golds)


# --- ROUGE-L (as the `rouge` package that KILT uses) ----------------------------------------


def _rouge_sentences(text: str) -> list[list[str]]:
    """Split like ``rouge.Rouge.get_scores``: sentences on ``.``, words on single spaces.

    Pieces of ``text.split(".")`` that are empty are dropped; each kept piece has its whitespace
    collapsed and is then split on ``" "`` (so a whitespace-only piece yields the one word ``""``,
    exactly as in the package).
    """
    pieces = [" ".join(piece.split()) for piece in text.split(".") if len(piece) > 0]
    return [piece.split(" ") for piece in pieces]


def _lcs_words(reference: list[str], candidate: list[str]) -> set[str]:
    """Words of the LCS of two word lists, reconstructed along the ``rouge`` package's path.

    The package rebuilds one LCS from the DP table starting at the end, taking a match when the
    words are equal, else stepping up (``table[i-1][j] > table[i][j-1]``) or left; it then keeps
    the LCS as a *set of words*. The same path is followed here (iteratively).
    """
    n, m = len(reference), len(candidate)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        ref_word = reference[i - 1]
        row, prev = table[i], table[i - 1]
        for j in range(1, m + 1):
            if ref_word == candidate[j - 1]:
                row[j] = prev[j - 1] + 1
            else:
                row[j] = max(prev[j], row[j - 1])
    words: set[str] = set()
    i, j = n, m
    while i > 0 and j > 0:
        if reference[i - 1] == candidate[j - 1]:
            words.add(reference[i - 1])
            i, j = i - 1, j - 1
        elif table[i - 1][j] > table[i][j - 1]:
            i -= 1
        else:
            j -= 1
    return words


def _rouge_l_one(prediction: str, gold: str) -> float:
    hyp = _rouge_sentences(prediction)
    ref = _rouge_sentences(gold)
    if not hyp or not ref:
        return 0.0  # the package raises "Collections must contain at least 1 sentence"
    hyp_words = {w for sentence in hyp for w in sentence}
    ref_words = {w for sentence in ref for w in sentence}
    union: set[str] = set()
    for ref_sentence in ref:
        for hyp_sentence in hyp:
            union |= _lcs_words(ref_sentence, hyp_sentence)
    recall = len(union) / len(ref_words)
    precision = len(union) / len(hyp_words)
    return 2.0 * ((precision * recall) / (precision + recall + 1e-8))


def rouge_l(prediction: str, golds: Sequence[str]) -> float:
    """ROUGE-L F-measure, max over golds — numerically the ``rouge`` package's ``rouge-l`` ``f``.

    KILT (``kilt/eval_downstream.py``) scores ``Rouge().get_scores(pred, gold, avg=True)
    ["rouge-l"]["f"]`` on the raw (not normalised, case-sensitive) strings. That is the
    summary-level ROUGE-L of Lin (2004) as the package implements it (``exclusive`` sets):

    * texts are split into sentences on ``.`` and into words on spaces (:func:`_rouge_sentences`);
    * ``U`` = union over reference sentences ``r`` and candidate sentences ``c`` of the *set of
      words* of the reconstructed ``LCS(r, c)``;
    * ``R = |U| / |distinct reference words|``, ``P = |U| / |distinct candidate words|``,
      ``F = 2PR / (P + R + 1e-8)``.

    The ``1e-8`` is the package's, so a perfect answer scores ``0.999999995``, as KILT reports.
    A side with no sentence (e.g. ``""`` or ``"."``) scores 0 here; the package raises there.
    """
    return _max_over_golds(_rouge_l_one, prediction, golds)


# --- label accuracy ---------------------------------------------------------------------------


def _accuracy_one(prediction: str, gold: str) -> float:
    gold_tokens = normalize_answer(gold).split()
    if not gold_tokens:
        return 0.0
    pred_tokens = normalize_answer(prediction).split()
    return 1.0 if pred_tokens[: len(gold_tokens)] == gold_tokens else 0.0


def accuracy(prediction: str, golds: Sequence[str]) -> float:
    """Label accuracy for classification outputs (``yes/no/maybe``, ``SUPPORTS/REFUTES``).

    The label of the prediction is its first normalised token(s): the answer is correct when its
    first ``len(gold)`` normalised tokens equal the normalised gold label (for the usual one-word
    labels: the first token). So ``"Yes, because ..."`` matches ``"yes"`` and ``"SUPPORTS."``
    matches ``"supports"``, while ``"I think yes"`` does not (its label-like first token is
    ``"i"``). A gold that normalises to nothing never matches. Max over golds.
    """
    return _max_over_golds(_accuracy_one, prediction, golds)


# --- answer containment ----------------------------------------------------------------------


def _contains_one(text: str, gold: str) -> float:
    gold_tokens = normalize_answer(gold).split()
    if not gold_tokens:
        return 0.0
    tokens = normalize_answer(text).split()
    width = len(gold_tokens)
    for start in range(len(tokens) - width + 1):
        if tokens[start : start + width] == gold_tokens:
            return 1.0
    return 0.0


def answer_containment(prediction: str, golds: Sequence[str]) -> float:
    """``1`` if some normalised gold answer occurs as a contiguous token sequence in the text.

    Token-level (not substring) matching: gold ``"art"`` is not contained in ``"martial arts"``.
    A gold that normalises to no tokens is never contained. Max over golds.
    """
    return _max_over_golds(_contains_one, prediction, golds)


@dataclass(frozen=True)
class DownstreamMeasure(CodeVersion):
    """A downstream metric declared once: ``name``, ``version`` and its ``function``
    (``(prediction, golds) -> float`` in ``[0, 1]``); calling the measure calls the function.

    The version is part of the key of every score it computes (the label store's score key,
    :func:`erag_dagster.labels.keys.score_key`) and of the ``code_version`` of the assets that
    use it (rules: :mod:`erag_dagster.core.code_versions`): raise it when the formula or the
    normalisation changes, and exactly its scores are computed again, from the stored answers.
    """

    function: DownstreamMetric | None = None

    def __call__(self, prediction: str, golds: Sequence[str]) -> float:
        assert self.function is not None, f"measure {self.name!r} declared without a function"
        return self.function(prediction, golds)


#: Every downstream metric, each with its version: edit a version here, nowhere else.
DOWNSTREAM_METRICS: dict[str, DownstreamMeasure] = {
    m.name: m
    for m in (
        DownstreamMeasure("em", "1", exact_match),
        DownstreamMeasure("f1", "1", token_f1),
        DownstreamMeasure("rougel", "1", rouge_l),
        DownstreamMeasure("accuracy", "1", accuracy),
        DownstreamMeasure("contains", "1", answer_containment),
    )
}


def get_downstream_metric(name: str) -> DownstreamMeasure:
    """The downstream metric called ``name`` (a callable :class:`DownstreamMeasure`, read from
    :data:`DOWNSTREAM_METRICS` at each call); :class:`InputError` listing the known names."""
    try:
        return DOWNSTREAM_METRICS[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(DOWNSTREAM_METRICS))
        raise InputError(f"unknown downstream metric {name!r}; known: {known}") from None
