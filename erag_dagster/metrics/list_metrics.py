"""Ranking metrics on eRAG label lists: one relevance label per retrieved document, in rank order.

eRAG (Salemi & Zamani, SIGIR 2024, §2) turns each retrieved document's downstream score into a
relevance label and aggregates a query's labels with a set or ranking metric. ``labels[qid]`` is
that query's list of labels in rank order (rank 1 first), each a real number in ``[0, 1]``.

How a query is scored
---------------------
Each query is scored on its own (a query's values never depend on the other queries):

* **Binary lists** (every label is 0 or 1) are evaluated with pytrec_eval exactly as trec_eval
  would: the qrels are the list's own labels (as ``int``), the run gives position ``i`` (1-based)
  the score ``n - i + 1`` under a doc id unique to that position, so trec_eval's order is the rank
  order. ``P@k → P_k``, ``Success@k → success_k``, ``RR → recip_rank``, ``AP → map``,
  ``AP@k → map_cut_k``, ``nDCG(ideal=list) → ndcg``, ``nDCG(ideal=list)@k → ndcg_cut_k``
  (the trec_eval spellings ``ndcg``/``ndcg_cut_k`` name that list ideal too), ``R@k →
  recall_k``; ``RR@k`` is ``recip_rank`` on the top ``k`` positions. ``nDCG(ideal=max)`` —
  and so plain ``nDCG``/``nDCG@k``, whose default ideal is ``max`` — has no trec_eval
  counterpart and is computed by :func:`ndcg_at` on every list.
* **Graded lists** (some label strictly between 0 and 1) use the formulas below (the kernels
  :func:`precision_at`, ...), with ``l_i`` the label at rank ``i``, ``n`` the list length and
  ``k`` the cut-off (``k = n`` when absent). Each reduces to the trec_eval value above on a binary
  list (the tests check this against pytrec_eval):

  - ``P@k       = (Σ_{i≤k} l_i) / k`` — the mean label of the top k (paper §2 and the reference
    code; trec_eval P_k divides by k too);
  - ``Success@k = max_{i≤k} l_i``;
  - ``RR@k      = max_{i≤k} l_i / i`` (for 0/1 labels: 1 / rank of the first relevant document);
  - ``AP@k      = Σ_{i≤k} l_i · (Σ_{j≤i} l_j / i) / Σ_{i≤n} l_i`` (trec_eval ``map``/``map_cut``
    with the list's labels as qrels: the normaliser counts the whole list);
  - ``nDCG@k    = DCG@k / IDCG@k`` with ``DCG@k = Σ_{i≤k} l_i / log2(i + 1)`` (Järvelin &
    Kekäläinen, "Cumulated gain-based evaluation of IR techniques", ACM TOIS 20(4), 2002;
    linear gain and the ``log2(i + 1)`` discount, as trec_eval's ``ndcg_cut``). Two ideals
    (:func:`ndcg_at`): ``nDCG(ideal=list)@k`` takes ``IDCG@k`` = the DCG@k of the same labels
    sorted descending — what trec_eval computes when the list's labels are the qrels, blind to
    magnitude (a list whose best label is 0.1 scores 1.0 once sorted); ``nDCG(ideal=max)@k``
    takes ``IDCG@k = Σ_{i≤k} 1 / log2(i + 1)``, the best DCG@k any list can reach (every
    label at its maximum 1). Plain ``nDCG@k`` uses :data:`DEFAULT_NDCG_IDEAL` (``max``); the
    trec_eval spellings ``ndcg``/``ndcg_cut_k`` always the list ideal. On a binary list with at
    least ``k`` ones the two agree;
  - ``R@k       = Σ_{i≤k} l_i / Σ_{i≤n} l_i``.

Signed labels (``signed=True``)
-------------------------------
Signed utility labels (a document's score minus the closed-book score, in ``[-1, 1]``: negative
when the document distracts the reader; :mod:`erag_dagster.labels.signed`) take:

* ``UDCG@k = Σ_{i≤k} l_i / log2(i + 1)  /  Σ_{i≤k} 1 / log2(i + 1)`` in ``[-1, 1]``
  (:func:`udcg_at`), a UDCG-style discounted sum (Trappolini et al., "Redefining Retrieval
  Evaluation in the Era of LLMs", EACL 2026, arXiv 2510.21440: utility and distraction-aware
  cumulative gain; they fit an LLM-specific position discount, we keep ``log2(i + 1)`` so that
  on labels ``>= 0`` UDCG@k equals ``nDCG(ideal=max)@k``);
* every other family on the **positive part** ``max(l_i, 0)`` (P@k, Success@k, RR, AP, nDCG,
  R: "how much of the list helps"), so on labels ``>= 0`` each equals its unsigned value.

Edge-case policy (the reference ``erag`` crashes or drops queries here; we never do)
-----------------------------------------------------------------------------------
* cut-off past the end of the list: missing positions are non-relevant (label 0) — ``P@k``
  still divides by ``k``, as trec_eval does;
* empty list: every metric is 0.0 and the query stays in the mean;
* no relevant document (all labels 0): every metric is 0.0 (``R``/``AP``/``nDCG``: 0/0 := 0),
  as trec_eval reports;
* a label that is not a real number, NaN, or outside ``[0, 1]`` (``[-1, 1]`` when signed):
  :class:`InputError` naming the query id and the 1-based rank;
* ``aggregate`` is the arithmetic mean over all queries of ``labels``; no queries, no metrics,
  or a metric outside the six families (or with a relevance level other than 1): InputError.

``compat="erag"`` instead reproduces the reference implementation ``erag`` 0.0.1 bit for bit,
quirks included (see :mod:`erag_dagster.metrics.erag_compat`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import polars as pl
import pytrec_eval

from erag_dagster.core.errors import InputError
from erag_dagster.metrics.erag_compat import erag_eval_labels
from erag_dagster.metrics.label_value import checked_label
from erag_dagster.metrics.names import (
    LIST_FAMILIES,
    NDCG_IDEALS,
    SIGNED_FAMILIES,
    MetricName,
    parse_metric_names,
)
from erag_dagster.metrics.report import ListMetricReport

CompatProvider = Callable[[Mapping[str, Sequence[float]], Sequence[str]], ListMetricReport]

COMPAT_PROVIDERS: dict[str, CompatProvider] = {"erag": erag_eval_labels}
"""``compat=`` mode → the evaluator that reproduces that reference implementation."""

COMPAT_MODES: tuple[str, ...] = tuple(COMPAT_PROVIDERS)

DEFAULT_NDCG_IDEAL = "max"
"""The ideal of plain ``nDCG``/``nDCG@k`` on label lists (``"list"`` or ``"max"``): ``max``,
the magnitude-aware ideal, because its nDCG@3 tracked end-to-end quality better (Kendall tau)
on both measured sets, the embedded sample and SQuAD dev (docs/label-methods.md).
``nDCG(ideal=list)@k`` and the trec_eval spellings keep trec_eval's list ideal; human
judgments (:mod:`erag_dagster.metrics.human`) are always scored by trec_eval."""


# --- graded kernels (pure functions over labels in rank order) --------------------------------


def _top(labels: Sequence[float], k: int | None) -> Sequence[float]:
    return labels if k is None else labels[:k]


def precision_at(labels: Sequence[float], k: int) -> float:
    """``P@k = (Σ_{i≤k} l_i) / k``; positions past the list count as 0."""
    return sum(labels[:k]) / k


def success_at(labels: Sequence[float], k: int) -> float:
    """``Success@k = max_{i≤k} l_i`` (0 for an empty list)."""
    return float(max(labels[:k], default=0.0))


def reciprocal_rank(labels: Sequence[float], k: int | None = None) -> float:
    """``RR@k = max_{i≤k} l_i / i`` (ranks 1-based); 1/first-relevant-rank on binary labels."""
    return max((label / rank for rank, label in enumerate(_top(labels, k), 1)), default=0.0)


def average_precision(labels: Sequence[float], k: int | None = None) -> float:
    """``AP@k = Σ_{i≤k} l_i · (Σ_{j≤i} l_j / i) / Σ_{i≤n} l_i``; 0 when ``Σ l = 0``."""
    total = sum(labels)
    if total <= 0:
        return 0.0
    running = 0.0
    acc = 0.0
    for rank, label in enumerate(_top(labels, k), 1):
        running += label
        if label > 0:
            acc += label * running / rank
    return acc / total


def _dcg(gains: Sequence[float]) -> float:
    """``Σ_i g_i / log2(i + 1)`` over ranks ``i = 1..`` (signed gains allowed)."""
    return sum(g / math.log2(rank + 1) for rank, g in enumerate(gains, 1) if g != 0)


def max_dcg(positions: int) -> float:
    """``Σ_{i=1..m} 1 / log2(i + 1)``: the DCG of ``m`` positions all labelled 1 (0 for m = 0)."""
    return _dcg([1.0] * positions)


def ndcg_at(labels: Sequence[float], k: int | None = None, ideal: str | None = None) -> float:
    """``nDCG@k = DCG@k / IDCG@k`` with ``DCG@k = Σ_{i≤k} l_i / log2(i+1)`` (Järvelin &
    Kekäläinen 2002) and, by ``ideal`` (default :data:`DEFAULT_NDCG_IDEAL`):

    * ``"list"`` — ``IDCG@k`` = DCG@k of the same labels sorted descending (trec_eval
      ``ndcg_cut_k`` with the list's labels as qrels); a sorted list scores 1 whatever its
      labels' size;
    * ``"max"`` — ``IDCG@k = max_dcg(m)``, ``m = k`` (``n`` without a cut-off): every one of
      the top ``m`` positions at the maximal label 1, so the value also says how useful the
      best documents are (a list of 0.1 labels scores 0.1).

    In ``[0, 1]``; 0 when ``IDCG = 0`` (an empty or all-zero list)."""
    ideal = DEFAULT_NDCG_IDEAL if ideal is None else ideal
    if ideal == "list":
        best = _dcg(_top(sorted(labels, reverse=True), k))
    elif ideal == "max":
        best = max_dcg(len(labels) if k is None else k)
    else:
        raise InputError(f"unknown nDCG ideal {ideal!r}; use one of {', '.join(NDCG_IDEALS)}")
    if best <= 0:
        return 0.0
    return _dcg(_top(labels, k)) / best


def udcg_at(labels: Sequence[float], k: int) -> float:
    """``UDCG@k = Σ_{i≤k} l_i / log2(i+1) / Σ_{i≤k} 1 / log2(i+1)`` for signed labels
    ``l_i ∈ [-1, 1]`` (UDCG-style, Trappolini et al., EACL 2026, with the log2 discount): in
    ``[-1, 1]``, negative when the top documents distract more than they help; missing positions
    count 0; equals ``ndcg_at(labels, k, "max")`` on labels ``>= 0``."""
    return _dcg(labels[:k]) / max_dcg(k)


def recall_at(labels: Sequence[float], k: int) -> float:
    """``R@k = Σ_{i≤k} l_i / Σ_{i≤n} l_i``; 0 when ``Σ l = 0``."""
    total = sum(labels)
    if total <= 0:
        return 0.0
    return sum(labels[:k]) / total


def graded_value(metric: MetricName, labels: Sequence[float]) -> float:
    """The value of one list metric on one label list, by the formulas above."""
    k = metric.cutoff
    if metric.family == "P":
        return precision_at(labels, k)  # type: ignore[arg-type]  # parser ensures a cut-off
    if metric.family == "Success":
        return success_at(labels, k)  # type: ignore[arg-type]
    if metric.family == "RR":
        return reciprocal_rank(labels, k)
    if metric.family == "AP":
        return average_precision(labels, k)
    if metric.family == "nDCG":
        return ndcg_at(labels, k, metric.ideal)
    if metric.family == "R":
        return recall_at(labels, k)  # type: ignore[arg-type]
    if metric.family == "UDCG":
        return udcg_at(labels, k)  # type: ignore[arg-type]
    raise InputError(f"metric {metric.name!r} is not defined on label lists")


# --- binary lists through pytrec_eval -----------------------------------------------------------


def _doc_id(position: int) -> str:
    return f"d{position:06d}"


def _pytrec_binary(
    lists: Mapping[str, Sequence[float]], metrics: Sequence[MetricName]
) -> dict[str, dict[str, float]]:
    """trec_eval values of ``metrics`` for non-empty 0/1 label lists (qrels = the labels)."""
    qrels = {
        qid: {_doc_id(i): int(label) for i, label in enumerate(labels)}
        for qid, labels in lists.items()
    }
    out: dict[str, dict[str, float]] = {qid: {} for qid in lists}
    by_depth: dict[int | None, list[MetricName]] = {}
    for metric in metrics:
        by_depth.setdefault(metric.truncate_at, []).append(metric)
    for depth, group in by_depth.items():
        run = {
            qid: {_doc_id(i): float(len(labels) - i) for i in range(len(labels))[:depth]}
            for qid, labels in lists.items()
        }
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {m.pytrec_measure for m in group})
        results = evaluator.evaluate(run)
        for qid in lists:
            for metric in group:
                out[qid][metric.name] = float(results[qid][metric.pytrec_measure])
    return out


# --- validation and the public entry points ------------------------------------------------------


def check_label(query_id: str, rank: int, label: object, signed: bool = False) -> float:
    """``label`` as a float in ``[0, 1]`` (``[-1, 1]`` when ``signed``), or :class:`InputError`
    naming the query and rank (the rule: :func:`erag_dagster.metrics.label_value.checked_label`)."""
    return checked_label(label, f"query {query_id!r} rank {rank}", low=-1.0 if signed else 0.0)


def _check_lists(labels: Mapping[str, Sequence[float]], signed: bool) -> dict[str, list[float]]:
    if not isinstance(labels, Mapping):
        raise InputError("labels must map each query id to its list of labels in rank order")
    if not labels:
        raise InputError("no queries: the labels mapping is empty")
    checked: dict[str, list[float]] = {}
    for qid, seq in labels.items():
        if not isinstance(qid, str):
            raise InputError(f"query id {qid!r} is not a string")
        if isinstance(seq, str | bytes | Mapping) or not isinstance(seq, Iterable):
            raise InputError(f"query {qid!r}: labels must be a list of numbers in rank order")
        checked[qid] = [check_label(qid, rank, x, signed) for rank, x in enumerate(seq, 1)]
    return checked


def _trec_equivalent(metric: MetricName) -> bool:
    """True when trec_eval computes ``metric`` on a 0/1 list with the labels as qrels (every
    list family except ``nDCG`` with the ``max`` ideal, and except ``UDCG``)."""
    if metric.family == "nDCG":
        return (metric.ideal or DEFAULT_NDCG_IDEAL) == "list"
    return metric.family in LIST_FAMILIES


def evaluate_labels(
    labels: Mapping[str, Sequence[float]],
    metrics: Sequence[str],
    compat: str | None = None,
    signed: bool = False,
) -> ListMetricReport:
    """Score each query's label list with ``metrics`` and average over queries.

    ``metrics`` use the grammar of :mod:`erag_dagster.metrics.names` (``P@5``, ``nDCG@10``,
    ``nDCG(ideal=max)@10``, ``ndcg_cut_10``, ``UDCG@10``, ...) restricted to the families P,
    Success, RR, AP, nDCG, R and UDCG. Keys of the report are the names as given;
    ``aggregate`` is the arithmetic mean over every query in ``labels``. ``signed=True`` accepts
    labels in ``[-1, 1]`` and scores every family but UDCG on their positive part. See the module
    docstring for the formulas and the edge-case policy.

    ``compat="erag"`` returns exactly what ``erag.eval`` 0.0.1 returns for these labels (metric
    names then in pytrec_eval spelling only) or raises :class:`InputError` where it fails.
    """
    if compat is not None:
        provider = COMPAT_PROVIDERS.get(compat)
        if provider is None:
            raise InputError(f"unknown compat mode {compat!r}; known: {', '.join(COMPAT_MODES)}")
        return provider(labels, metrics)

    parsed = parse_metric_names(metrics)
    for metric in parsed:
        if not (metric.is_list_metric or metric.is_signed_metric):
            families = ", ".join((*LIST_FAMILIES, *SIGNED_FAMILIES))
            raise InputError(
                f"metric {metric.name!r} is not defined on label lists; use one of {families}"
            )
        if metric.rel not in (None, 1):
            raise InputError(
                f"metric {metric.name!r}: labels lie in [0, 1], only rel=1 is meaningful"
            )
    lists = _check_lists(labels, signed)
    # signed lists: every family but UDCG reads the positive part (module docstring)
    positive = {q: [max(x, 0.0) for x in ls] for q, ls in lists.items()} if signed else lists

    trec = [m for m in parsed if _trec_equivalent(m)]
    binary = {q: ls for q, ls in positive.items() if ls and all(x in (0.0, 1.0) for x in ls)}
    binary_values = _pytrec_binary(binary, trec) if binary and trec else {}
    per_query: dict[str, dict[str, float]] = {}
    for qid, ls in positive.items():
        values: dict[str, float] = {}
        for m in parsed:
            if not ls:
                values[m.name] = 0.0
            elif qid in binary_values and m.name in binary_values[qid]:
                values[m.name] = binary_values[qid][m.name]
            else:
                values[m.name] = graded_value(m, lists[qid] if m.is_signed_metric else ls)
        per_query[qid] = values
    aggregate = {
        m.name: sum(values[m.name] for values in per_query.values()) / len(per_query)
        for m in parsed
    }
    return ListMetricReport(per_query=per_query, aggregate=aggregate)


def labels_from_frame(
    df: pl.DataFrame, label_col: str = "label", signed: bool = False, source: str | None = None
) -> dict[str, list[float]]:
    """Per-query label lists (rank order) from a labels table.

    ``df`` needs ``query_id``, ``rank`` (1-based) and ``label_col``. Rows are sorted by
    ``query_id`` then ``rank``; each query's ranks must be exactly ``1..n`` (a gap or a repeat
    would shift every later label to a wrong rank), and every label must be a number in
    ``[0, 1]`` (``[-1, 1]`` when ``signed``) — otherwise :class:`InputError` naming the query
    and rank, and with ``source`` (a labels file, ``labels frame``) the table and the row
    (1-based, in the table's own order): ``labels.parquet (row 3): query 'q1' rank 2: label is
    NaN``.
    """
    missing = [c for c in ("query_id", "rank", label_col) if c not in df.columns]
    if missing:
        where = f"{source}: " if source else ""
        raise InputError(f"{where}labels table lacks column(s) {', '.join(missing)}")
    ordered = (
        df.select(
            pl.col("query_id").cast(pl.String),
            pl.col("rank").cast(pl.Int64, strict=False),
            pl.col(label_col).cast(pl.Float64, strict=False).alias("label"),
        )
        .with_row_index("row", offset=1)
        .sort("query_id", "rank")
    )
    out: dict[str, list[float]] = {}
    for row, qid, rank, label in ordered.iter_rows():
        at = f"{source} (row {row}): " if source else ""
        try:
            if qid is None:
                raise InputError("labels table: a row has no query_id")
            ranks = out.setdefault(qid, [])
            expected = len(ranks) + 1
            if rank != expected:
                raise InputError(f"query {qid!r}: expected rank {expected}, found rank {rank}")
            if label is None:
                raise InputError(f"query {qid!r} rank {rank}: label is missing or not a number")
            ranks.append(check_label(qid, rank, label, signed))
        except InputError as exc:
            if not at:
                raise
            raise InputError(f"{at}{exc}") from None
    return out
