"""Exact reproduction of the list-scoring step of the reference ``erag`` 0.0.1 ``eval()``.

The reference (``erag/eval.py`` on PyPI, Salemi & Zamani) first generates an output per
(query, document) pair and scores it — that part is our labeller's job. What follows, given the
per-document labels, is reproduced here step by step so that ``evaluate_labels(labels, metrics,
compat="erag")`` returns exactly ``erag.eval(...)``'s ``per_input`` and ``aggregated`` values:

1. qrels: ``qrel[q][str(j)] = label_j`` (``j`` 0-based); a label equal to 0 or 1 (also ``1.0``,
   ``True``) becomes the ``int``; a label outside ``[0, 1]`` is refused.
2. If *every* label of *every* query is 0 or 1 ("binary"): ``pytrec_eval.RelevanceEvaluator(qrel,
   metrics).evaluate(run)`` with the run ``run[q][str(j)] = n_q - j`` (int scores). Otherwise
   ("graded") only ``P``, ``P_k``, ``success``, ``success_k`` are computed by hand: ``success_k =
   max(0, l_0, ..., l_{k-1})``, ``P_k = (l_0 + ... + l_{k-1}) / k``, and without ``_k`` the cut-off
   is the list length.
3. ``aggregated[m] = sum(results[q][m] for q in results) / len(results)``.

Quirks of the reference, reproduced (what it returns is returned here, what it fails on is an
:class:`InputError` saying that the reference refuses the input):

* binary mode goes through pytrec_eval, which silently drops queries whose list is empty (their
  qrels are empty): they vanish from ``per_query`` and from the mean; a query whose labels are
  all 0 stays and scores 0. If every list is empty the mean divides by zero (refused).
* binary mode looks each metric name up verbatim in pytrec_eval's result: only names that are
  pytrec_eval output keys work (``P_5``, ``ndcg_cut_10``, ``map``, ``recip_rank``,
  ``iprec_at_recall_0.10``, also ``num_q`` and ``gm_map`` — per query the *log* of
  max(AP, 1e-5), averaged as is). ``runid`` and ``relstring`` come back as uninitialised
  memory (garbage numbers): refused. ``P``, ``success``, ``P_05``, ``P.5`` raise
  ``KeyError`` there; a cut-off of 0 (``P_0``) or a parameter on ``ndcg``/``G``/``Rndcg``/
  ``ndcg_rel`` makes trec_eval abort the whole Python process — all refused here.
* graded mode parses the cut-off with Python's ``int()`` after the first ``_`` (``"P_1_0"`` is
  ``P_10``, ``"P_ 2"`` is ``P_2``, ``"P_-1"`` gives ``-0.0``, ``"success_0"`` gives 0); a cut-off
  past a list raises ``KeyError`` in the reference (refused), ``P`` on an empty list divides by
  zero (refused), any other metric name raises ``RuntimeError`` (refused).
* the binary/graded switch is global: one graded label anywhere sends every query to graded
  mode, where e.g. ``map`` is refused even for the binary queries.
* an empty labels mapping (``max()`` of an empty sequence) is refused.

One deliberate difference: a NaN label is refused. The reference accepts it (NaN is neither in
``[0, 1]`` nor outside it), ignores it in ``success`` and returns NaN for ``P``.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence

import pytrec_eval

from erag_dagster.core.errors import InputError
from erag_dagster.metrics.names import trec_measure_key
from erag_dagster.metrics.report import ListMetricReport

REFERENCE = "erag 0.0.1"
_GRADED_FAMILIES = frozenset({"success", "P"})


def _refuse(reason: str) -> InputError:
    return InputError(f"{REFERENCE} (compat='erag') refuses this input: {reason}")


def _build_qrels(
    labels: Mapping[str, Sequence[float]],
) -> tuple[dict[str, dict[str, float | int]], bool]:
    """Step 1: the reference's qrels and its global binary flag."""
    if not isinstance(labels, Mapping):
        raise _refuse("labels must map each query to its list of labels")
    if not labels:
        raise _refuse("no queries (max() of an empty sequence)")
    qrel: dict[str, dict[str, float | int]] = {}
    binary = True
    for query, seq in labels.items():
        if isinstance(seq, str | bytes | Mapping) or not isinstance(seq, Iterable):
            raise _refuse(f"query {query!r}: labels must be a list of numbers")
        qrel[query] = {}
        for j, label in enumerate(seq):
            if not isinstance(label, numbers.Real):
                raise _refuse(f"query {query!r} rank {j + 1}: label {label!r} is not a number")
            if label != label:  # NaN (no float() conversion: huge ints must not overflow)
                raise _refuse(f"query {query!r} rank {j + 1}: NaN label (it would return NaN)")
            value: float | int = label
            if value in [0, 1]:
                value = int(value)
            if value not in [0, 1]:
                binary = False
            if value > 1 or value < 0:
                raise _refuse(f"query {query!r} rank {j + 1}: label {label!r} outside [0, 1]")
            qrel[query][str(j)] = value
    return qrel, binary


def _binary_results(
    qrel: dict[str, dict[str, float | int]], metrics: list[str]
) -> dict[str, dict[str, float]]:
    """Step 2, binary mode: pytrec_eval with the reference's run, unknown keys refused first."""
    for metric in metrics:
        if metric in ("runid", "relstring"):
            raise _refuse(
                f"metric {metric!r} is a string in trec_eval; pytrec_eval returns an "
                "uninitialised number for it"
            )
        if trec_measure_key(metric) is None:
            raise _refuse(
                f"metric {metric!r} is not a pytrec_eval result key with 0/1 labels "
                "(KeyError in the reference, or trec_eval aborts the process)"
            )
    run = {query: {str(j): len(docs) - j for j in range(len(docs))} for query, docs in qrel.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(qrel, set(metrics))
    return evaluator.evaluate(run)


def _graded_results(
    qrel: dict[str, dict[str, float | int]], metrics: list[str]
) -> dict[str, dict[str, float]]:
    """Step 2, graded mode: the reference's hand-written success / P loop, line for line."""
    results: dict[str, dict[str, float]] = {}
    for query, labels in qrel.items():
        results[query] = {}
        for metric in metrics:
            if "_" in metric:
                family = metric[: metric.find("_")]
                if family not in _GRADED_FAMILIES:
                    raise _refuse(f"metric {metric!r} with graded labels (only success, P)")
                try:
                    cut_value = int(metric[metric.find("_") + 1 :])
                except ValueError:
                    raise _refuse(f"metric {metric!r}: its cut-off is not an integer") from None
            else:
                family = metric
                cut_value = len(labels)
            if family == "success":
                max_value: float | int = 0
                for i in range(cut_value):
                    if str(i) not in labels:
                        raise _refuse(f"{metric!r} cuts past the {len(labels)} docs of {query!r}")
                    max_value = max(max_value, labels[str(i)])
                results[query][metric] = max_value
            elif family == "P":
                mean_value: float | int = 0
                for i in range(cut_value):
                    if str(i) not in labels:
                        raise _refuse(f"{metric!r} cuts past the {len(labels)} docs of {query!r}")
                    mean_value += labels[str(i)]
                if cut_value == 0:
                    raise _refuse(f"{metric!r} on the empty list of {query!r} divides by zero")
                results[query][metric] = mean_value / cut_value
            else:
                raise _refuse(f"metric {metric!r} with graded labels (only success, P)")
    return results


def erag_eval_labels(
    labels: Mapping[str, Sequence[float]], metrics: Sequence[str]
) -> ListMetricReport:
    """What ``erag.eval`` 0.0.1 returns for these per-document labels, as a report.

    ``labels[q]`` are the downstream scores of ``q``'s documents in rank order; ``metrics`` are
    pytrec_eval names (the reference takes a set: duplicates collapse). ``per_query`` is the
    reference's ``per_input`` and ``aggregate`` its ``aggregated``, values as floats (the
    reference returns int 0/1 for some graded ``success`` values; they compare equal).
    """
    if isinstance(metrics, str):
        raise _refuse(f"metrics must be a collection of names, got the string {metrics!r}")
    names = list(dict.fromkeys(metrics))
    for metric in names:
        if not isinstance(metric, str):
            raise _refuse(f"metric {metric!r} is not a string")
    qrel, binary = _build_qrels(labels)
    results = _binary_results(qrel, names) if binary else _graded_results(qrel, names)

    aggregate: dict[str, float] = {}
    for metric in names:
        values = [value[metric] for value in results.values()]
        if not values:
            raise _refuse("no query is left to average over (every list is empty)")
        aggregate[metric] = float(sum(values) / len(values))
    per_query = {
        query: {metric: float(value[metric]) for metric in names}
        for query, value in results.items()
    }
    return ListMetricReport(per_query=per_query, aggregate=aggregate)
