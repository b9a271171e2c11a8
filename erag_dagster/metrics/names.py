"""Metric names: the ir_measures grammar and trec_eval / pytrec_eval spellings.

Two spellings are accepted and mean the same measures:

=====================  ==========================  ===========================================
ir_measures            trec_eval / pytrec_eval     measure
=====================  ==========================  ===========================================
``P@k``                ``P_k``                     precision at cut-off ``k``
``Success@k``          ``success_k``               1 if a relevant document is in the top ``k``
``RR`` / ``RR@k``      ``recip_rank``              reciprocal rank of the first relevant doc
``AP`` / ``AP@k``      ``map`` / ``map_cut_k``     average precision (trec_eval ``map_cut``)
``nDCG`` / ``nDCG@k``  ``ndcg`` / ``ndcg_cut_k``   normalised DCG, linear gain, log2 discount
``R@k``                ``recall_k``                recall at cut-off ``k``
=====================  ==========================  ===========================================

The ir_measures names may carry a relevance level for the binary measures, as in
``P(rel=2)@10`` (a document counts as relevant when its judgment is ``>= 2``; trec_eval ``-l2``).
On label lists, ``nDCG`` may name its ideal: ``nDCG(ideal=list)@k`` (the list's own labels
sorted, = trec_eval ``ndcg_cut_k`` with the labels as qrels) or ``nDCG(ideal=max)@k`` (every
label at its maximum 1); plain ``nDCG@k`` uses
:data:`erag_dagster.metrics.list_metrics.DEFAULT_NDCG_IDEAL` (``max``), while the trec_eval
spellings ``ndcg``/``ndcg_cut_k`` name trec_eval's list ideal (formulas:
:func:`erag_dagster.metrics.list_metrics.ndcg_at`). Signed label lists (labels in ``[-1, 1]``,
:func:`erag_dagster.metrics.list_metrics.evaluate_signed_labels`) also take ``UDCG@k``.
``P``, ``Success`` and ``R`` need a cut-off; cut-offs are integers in ``[1, 2**31 - 1]``
(trec_eval aborts on a cut-off of 0). ``RR@k`` has no trec_eval counterpart: it is
``recip_rank`` over the top ``k`` only (as ir_measures defines it).

For runs judged by humans (:mod:`erag_dagster.metrics.human`) the other numeric trec_eval measures
that pytrec_eval computes are accepted under their trec_eval output names, exactly as trec_eval
prints them: ``bpref``, ``Rprec``, ``infAP``, ``gm_map``, ``num_rel_ret``, ``relative_P_5``,
``iprec_at_recall_0.10``, ``Rprec_mult_0.20``, ... (see :data:`TREC_SCALAR_MEASURES`,
:data:`TREC_CUTOFF_MEASURES`, :data:`TREC_FLOAT_PARAM_MEASURES`). Only the six measure families
above can be computed on per-rank label lists.

Anything else is an :class:`~erag_dagster.core.errors.InputError` whose message lists the grammar.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from erag_dagster.core.errors import InputError

#: The measure families computed on eRAG label lists (and on human qrels).
LIST_FAMILIES: tuple[str, ...] = ("P", "Success", "RR", "AP", "nDCG", "R")

#: The families defined on signed label lists only (utility minus closed-book utility).
SIGNED_FAMILIES: tuple[str, ...] = ("UDCG",)

#: The ideals ``nDCG(ideal=...)`` names: the list's own labels sorted, or every label at 1.
NDCG_IDEALS: tuple[str, ...] = ("list", "max")

#: trec_eval measures without parameters that pytrec_eval returns as one numeric value under
#: their own name (``runid`` and ``relstring`` are left out: trec_eval prints strings for them).
TREC_SCALAR_MEASURES: frozenset[str] = frozenset(
    {
        "11pt_avg", "G", "Rndcg", "Rprec", "binG", "bpref", "gm_bpref", "gm_map", "infAP",
        "map", "ndcg", "ndcg_rel", "num_nonrel_judged_ret", "num_q", "num_rel", "num_rel_ret",
        "num_ret", "recip_rank", "set_F", "set_P", "set_map", "set_recall", "set_relative_P",
        "utility",
    }
)  # fmt: skip

#: trec_eval measures with an integer cut-off parameter, printed ``<measure>_<k>``.
TREC_CUTOFF_MEASURES: frozenset[str] = frozenset(
    {"P", "recall", "success", "map_cut", "ndcg_cut", "relative_P"}
)

#: trec_eval measures with a real parameter, printed ``<measure>_<x:.2f>`` (e.g. ``_0.10``).
TREC_FLOAT_PARAM_MEASURES: frozenset[str] = frozenset({"Rprec_mult", "iprec_at_recall"})

#: The largest cut-off accepted (pytrec_eval stores cut-offs as C ``long``; 2**31 - 1 is plenty).
MAX_CUTOFF = 2**31 - 1
#: The largest relevance level accepted (pytrec_eval takes it as a C ``int``; a larger one is a
#: TypeError inside it). Judgments above it are refused by the qrels reader anyway.
MAX_RELEVANCE_LEVEL = 2**31 - 1

# used with fullmatch (a trailing newline must not slip through as `$` would let it)
_IR_MEASURES = re.compile(
    r"(?P<family>P|Success|RR|AP|nDCG|R|UDCG)"
    r"(?:\((?:rel=(?P<rel>[0-9]+)|ideal=(?P<ideal>[a-z]+))\))?(?:@(?P<cutoff>[0-9]+))?"
)
_TREC_CUTOFF = re.compile(r"(?P<base>P|recall|success|map_cut|ndcg_cut|relative_P)_(?P<k>[0-9]+)")
_TREC_FLOAT = re.compile(r"(?P<base>Rprec_mult|iprec_at_recall)_(?P<x>[0-9]+\.[0-9]+)")

_TREC_TO_FAMILY = {
    "P": "P",
    "success": "Success",
    "recip_rank": "RR",
    "map": "AP",
    "map_cut": "AP",
    "ndcg": "nDCG",
    "ndcg_cut": "nDCG",
    "recall": "R",
}
_FAMILY_TO_TREC = {
    # family: (measure without cut-off, measure with cut-off k)
    "P": (None, "P"),
    "Success": (None, "success"),
    "RR": ("recip_rank", "recip_rank"),
    "AP": ("map", "map_cut"),
    "nDCG": ("ndcg", "ndcg_cut"),
    "R": (None, "recall"),
    "UDCG": (None, "udcg"),  # no trec_eval measure: computed by list_metrics.udcg_at only
}
_BINARY_FAMILIES = frozenset({"P", "Success", "RR", "AP", "R"})

GRAMMAR = (
    "ir_measures names P@k, Success@k, RR, RR@k, AP, AP@k, nDCG, nDCG@k, R@k "
    "(binary ones may name a relevance level, e.g. P(rel=2)@10; on label lists nDCG may name "
    "its ideal, nDCG(ideal=list)@k or nDCG(ideal=max)@k; signed labels also take UDCG@k), "
    "or trec_eval names P_k, "
    "success_k, recip_rank, map, map_cut_k, ndcg, ndcg_cut_k, recall_k; for human qrels also "
    "the other numeric trec_eval measures pytrec_eval computes (bpref, Rprec, infAP, gm_map, "
    "num_rel_ret, relative_P_k, iprec_at_recall_0.10, Rprec_mult_0.20, ...); k is an integer >= 1"
)


@dataclass(frozen=True)
class MetricName:
    """A parsed metric name.

    * ``name`` — exactly as given (report keys use it);
    * ``family`` — ``P``, ``Success``, ``RR``, ``AP``, ``nDCG``, ``R``, or, for the other trec_eval
      measures, the trec_eval base name (``bpref``, ``relative_P``, ``iprec_at_recall``, ...);
    * ``cutoff`` — the rank cut-off ``k`` or ``None``;
    * ``rel`` — the relevance level from ``(rel=N)``, or ``None`` (use the caller's default);
    * ``pytrec_measure`` — the measure to request from pytrec_eval, which is also the key of its
      result (``P_10``, ``ndcg_cut_10``, ``recip_rank``, ``iprec_at_recall_0.10``). For ``RR@k``
      it is ``recip_rank``, computed on the ranking truncated to its top ``k``;
    * ``ideal`` — for ``nDCG(ideal=list|max)``, the ideal it names; ``"list"`` for the
      trec_eval spellings ``ndcg``/``ndcg_cut_k`` (trec_eval's computation); else ``None``
      (plain ``nDCG``: the label-list default, trec_eval's list ideal on human qrels).
    """

    name: str
    family: str
    cutoff: int | None
    rel: int | None
    pytrec_measure: str
    ideal: str | None = None

    @property
    def is_list_metric(self) -> bool:
        """True for the six families that are defined on per-rank label lists."""
        return self.family in LIST_FAMILIES

    @property
    def is_signed_metric(self) -> bool:
        """True for the families defined on signed label lists only (``UDCG``)."""
        return self.family in SIGNED_FAMILIES

    @property
    def truncate_at(self) -> int | None:
        """Rank to cut the ranking at before asking pytrec_eval (``RR@k`` only), else ``None``."""
        return self.cutoff if self.family == "RR" else None

    @property
    def aggregation(self) -> str:
        """How trec_eval aggregates over queries: ``"sum"`` (``num_*``), ``"geometric"``
        (``gm_*``) or ``"mean"`` (everything else)."""
        if self.family.startswith("num_"):
            return "sum"
        if self.family.startswith("gm_"):
            return "geometric"
        return "mean"


def _unknown(name: object, why: str = "") -> InputError:
    detail = f" ({why})" if why else ""
    return InputError(f"unknown metric name {name!r}{detail}; use {GRAMMAR}")


def _check_cutoff(name: str, digits: str) -> int:
    cutoff = int(digits)
    if not 1 <= cutoff <= MAX_CUTOFF:
        raise _unknown(name, f"cut-off must be between 1 and {MAX_CUTOFF}")
    return cutoff


def trec_measure_key(name: str) -> str | None:
    """``name`` if it is a canonical trec_eval output name that pytrec_eval computes, else ``None``.

    Canonical means pytrec_eval, asked for ``name``, returns exactly one value under the key
    ``name``: a scalar measure (``map``), a cut-off measure with ``k >= 1`` written without
    leading zeros (``P_5``, not ``P_05``), or a real-parameter measure written with two
    decimals (``iprec_at_recall_0.10``, not ``_0.1``). Non-canonical spellings are refused
    because pytrec_eval would report them under another key (or abort, for a cut-off of 0).
    """
    if name in TREC_SCALAR_MEASURES:
        return name
    match = _TREC_CUTOFF.fullmatch(name)
    if match:
        digits = match["k"]
        ok = digits == str(int(digits)) and 1 <= int(digits) <= MAX_CUTOFF
        return name if ok else None
    match = _TREC_FLOAT.fullmatch(name)
    if match:
        text = match["x"]
        ok = f"{float(text):.2f}" == text and len(text) <= 8  # pytrec_eval cuts longer keys
        return name if ok else None
    return None


def _trec_ideal(family: str) -> str | None:
    """A trec_eval spelling means trec_eval's computation: nDCG with the list ideal."""
    return "list" if family == "nDCG" else None


def parse_metric_name(name: str) -> MetricName:
    """Parse one metric name (see the module docstring); :class:`InputError` if unknown."""
    if not isinstance(name, str):
        raise _unknown(name, "not a string")
    match = _IR_MEASURES.fullmatch(name)
    if match:
        family = match["family"]
        rel = int(match["rel"]) if match["rel"] is not None else None
        cutoff = _check_cutoff(name, match["cutoff"]) if match["cutoff"] is not None else None
        if rel is not None and not 1 <= rel <= MAX_RELEVANCE_LEVEL:
            raise _unknown(name, f"the relevance level must be between 1 and {MAX_RELEVANCE_LEVEL}")
        if rel is not None and family not in _BINARY_FAMILIES:
            raise _unknown(name, f"{family} takes no relevance level: it uses graded gains")
        ideal = match["ideal"]
        if ideal is not None and family != "nDCG":
            raise _unknown(name, "only nDCG names an ideal")
        if ideal is not None and ideal not in NDCG_IDEALS:
            raise _unknown(name, f"the ideal is one of {', '.join(NDCG_IDEALS)}")
        plain, with_cutoff = _FAMILY_TO_TREC[family]
        if cutoff is None and plain is None:
            raise _unknown(name, f"{family} needs a cut-off, e.g. {family}@10")
        # RR@k has no trec_eval measure: recip_rank on the top k (see MetricName.truncate_at)
        measure = plain if cutoff is None or family == "RR" else f"{with_cutoff}_{cutoff}"
        return MetricName(name, family, cutoff, rel, str(measure), ideal)

    match = _TREC_CUTOFF.fullmatch(name)
    if match:
        base = match["base"]
        cutoff = _check_cutoff(name, match["k"])
        if trec_measure_key(name) is None:
            raise _unknown(name, f"write the cut-off without leading zeros: {base}_{cutoff}")
        family = _TREC_TO_FAMILY.get(base, base)
        return MetricName(name, family, cutoff, None, name, _trec_ideal(family))
    if name in TREC_SCALAR_MEASURES:
        family = _TREC_TO_FAMILY.get(name, name)
        return MetricName(name, family, None, None, name, _trec_ideal(family))
    match = _TREC_FLOAT.fullmatch(name)
    if match:
        if trec_measure_key(name) is None:
            canonical = f"{match['base']}_{float(match['x']):.2f}"
            raise _unknown(name, f"trec_eval prints it as {canonical}")
        return MetricName(name, match["base"], None, None, name)
    raise _unknown(name)


def parse_metric_names(names: Sequence[str]) -> list[MetricName]:
    """Parse a sequence of names, dropping exact duplicates (first occurrence kept).

    A bare string is refused (it would otherwise be read character by character), and so is
    an empty sequence.
    """
    if isinstance(names, str):
        raise InputError(f"metrics must be a list of names, got the string {names!r}")
    parsed: dict[str, MetricName] = {}
    for name in names:
        if not isinstance(name, str):
            raise _unknown(name, "not a string")
        if name not in parsed:
            parsed[name] = parse_metric_name(name)
    if not parsed:
        raise InputError(f"no metrics requested; use {GRAMMAR}")
    return list(parsed.values())
