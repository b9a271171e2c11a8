"""Evaluate a run against human relevance judgments (qrels) with pytrec_eval, as trec_eval does.

Tables: run ``query_id, doc_id, rank, score``; qrels ``query_id, doc_id, relevance`` (int).
Metric names follow :mod:`erag_dagster.metrics.names` (``nDCG@10``, ``P(rel=2)@10``, ``map``,
``bpref``, ``iprec_at_recall_0.10``, ...).

trec_eval's conventions, kept here (so values equal ``trec_eval`` output, which the conformance
tests check against trec_eval's own expected files):

* **Order**: the ``rank`` column is ignored; documents are ranked by ``score`` descending, ties
  broken by ``doc_id`` descending (string comparison).
* **Relevance level**: binary measures (P, Success, RR, AP, R, bpref, ...) count a document as
  relevant when its judgment is ``>= relevance_level`` (trec_eval ``-l``; e.g. 2 for the TREC DL
  passage judgments, where 1 means "related"). A name may carry its own level,
  ``P(rel=2)@10``. Graded measures (nDCG, ``ndcg_cut``) use the judgment itself as the gain.
* **Unjudged documents** count as non-relevant.
* **Queries**: a run query without any judgment is dropped (trec_eval does this silently; here
  the dropped ids are listed in ``ListMetricReport.dropped_queries``). With
  ``judged_only=False`` such a query is scored instead, as a query with no relevant document
  (0 on every rate measure; ``num_ret`` still counts its documents). Judged queries absent from
  the run are skipped, as trec_eval does without ``-c``.
* **Aggregation** over the scored queries: arithmetic mean, except ``num_*`` (sum) and ``gm_*``
  (geometric mean, ``exp(mean(log(max(x, 1e-5))))``; the per-query value reported is
  ``max(x, 1e-5)``).
* ``RR@k`` is ``recip_rank`` on each query's top ``k`` (trec_eval has no cut-off for it).
* ``iprec_at_recall_x`` and ``11pt_avg`` follow trec_eval 10: the recall level ``x`` becomes the
  rank of the ``lround(x * num_rel)``-th relevant document. pytrec_eval bundles trec_eval 9, which
  used ``(long)(x * num_rel + 0.9)`` and so gives other values for some queries (e.g. 0.1420
  instead of trec_eval's 0.1528 for topic 302 at 0.60 in trec_eval's own test files); these two
  measures are therefore computed here (:func:`interpolated_precision`), the rest by pytrec_eval.

Errors (:class:`InputError`): missing columns, a null id, a non-integer judgment, a NaN score, a
document listed twice for one query (in the run or the qrels), no judged query in the run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pytrec_eval

from erag_dagster.core.errors import InputError, where
from erag_dagster.core.input_files import text_lines
from erag_dagster.core.input_numbers import parse_grade
from erag_dagster.metrics.names import MAX_RELEVANCE_LEVEL, MetricName, parse_metric_names
from erag_dagster.metrics.report import ListMetricReport

#: trec_eval's floor for geometric means (``MIN_GEO_MEAN`` in trec_eval).
MIN_GEO_MEAN = 0.00001
#: The recall levels of trec_eval's ``11pt_avg`` (and of ``iprec_at_recall`` by default).
ELEVEN_RECALL_LEVELS: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_INTERPOLATED = frozenset({"iprec_at_recall", "11pt_avg"})
# Judgment given to a run query without judgments when judged_only=False: a document id no run
# can contain, judged non-relevant, so trec_eval scores the query as one without relevant docs.
_PLACEHOLDER_DOC = "\x00unjudged"


def read_trec_qrels(path: str | Path) -> pl.DataFrame:
    """Read a TREC qrels file (``query_id iteration doc_id relevance`` per line).

    Blank lines and lines starting with ``#`` are skipped (trec_eval accepts such comments);
    ``#`` inside a doc id is part of the id. Returns ``query_id: str, doc_id: str,
    relevance: i64``. A line without exactly four fields, a non-integer relevance, or a second
    judgment of the same (query, doc) is an :class:`InputError` at ``path:line``. The file is
    read under the input rule (:mod:`erag_dagster.core.input_files`) and each relevance by
    :func:`~erag_dagster.core.input_numbers.parse_grade` (``+1`` is 1; ``+-1``, ``1e20``, ``1_000``
    and non-ASCII digits are refused, where trec_eval's ``atol`` would read a prefix).
    """
    path = Path(path)
    query_ids: list[str] = []
    doc_ids: list[str] = []
    relevances: list[int] = []
    first_seen: dict[tuple[str, str], int] = {}
    for line_no, line in text_lines(path):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split()
        if len(fields) != 4:
            raise InputError(
                f"{where(path, line_no)}: expected 4 fields "
                f"'query_id iteration doc_id relevance', found {len(fields)}"
            )
        qid, _iteration, doc_id, rel_text = fields
        relevance = parse_grade(rel_text, where(path, line_no))
        key = (qid, doc_id)
        if key in first_seen:
            raise InputError(
                f"{where(path, line_no)}: query {qid} doc {doc_id} judged twice "
                f"(first at line {first_seen[key]})"
            )
        first_seen[key] = line_no
        query_ids.append(qid)
        doc_ids.append(doc_id)
        relevances.append(relevance)
    return pl.DataFrame(
        {"query_id": query_ids, "doc_id": doc_ids, "relevance": relevances},
        schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int64},
    )


def _require(frame: pl.DataFrame, columns: Sequence[str], table: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{table} table lacks column(s) {', '.join(missing)}")


def _first_duplicate(frame: pl.DataFrame) -> tuple[str, str] | None:
    dup = frame.filter(pl.struct("query_id", "doc_id").is_duplicated())
    return None if dup.is_empty() else (dup["query_id"][0], dup["doc_id"][0])


def _qrels_dict(qrels: pl.DataFrame) -> dict[str, dict[str, int]]:
    _require(qrels, ("query_id", "doc_id", "relevance"), "qrels")
    table = qrels.select(
        pl.col("query_id").cast(pl.String),
        pl.col("doc_id").cast(pl.String),
        pl.col("relevance"),
    )
    if table["relevance"].dtype not in (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8,
                                        pl.UInt16, pl.UInt32):  # fmt: skip
        raise InputError(f"qrels: relevance must be integers, found {table['relevance'].dtype}")
    if table.null_count().sum_horizontal().item():
        raise InputError("qrels: a row has a null query_id, doc_id or relevance")
    dup = _first_duplicate(table)
    if dup is not None:
        raise InputError(f"qrels: query {dup[0]!r} doc {dup[1]!r} is judged twice")
    out: dict[str, dict[str, int]] = {}
    for qid, doc_id, relevance in table.iter_rows():
        out.setdefault(qid, {})[doc_id] = int(relevance)
    return out


def _ranked_run(run: pl.DataFrame) -> pl.DataFrame:
    """The run in trec_eval order: per query, score descending, then doc_id descending."""
    _require(run, ("query_id", "doc_id", "score"), "run")
    table = run.select(
        pl.col("query_id").cast(pl.String),
        pl.col("doc_id").cast(pl.String),
        pl.col("score").cast(pl.Float64),
    )
    if table.null_count().sum_horizontal().item():
        raise InputError("run: a row has a null query_id, doc_id or score")
    nan = table.filter(pl.col("score").is_nan())
    if not nan.is_empty():
        raise InputError(
            f"run: query {nan['query_id'][0]!r} doc {nan['doc_id'][0]!r} has a NaN score"
        )
    dup = _first_duplicate(table)
    if dup is not None:
        raise InputError(f"run: query {dup[0]!r} lists doc {dup[1]!r} twice")
    return table.sort(["query_id", "score", "doc_id"], descending=[False, True, True])


def _run_dict(ranked: pl.DataFrame, depth: int | None) -> dict[str, dict[str, float]]:
    if depth is not None:
        ranked = ranked.group_by("query_id", maintain_order=True).head(depth)
    out: dict[str, dict[str, float]] = {}
    for qid, doc_id, score in ranked.iter_rows():
        out.setdefault(qid, {})[doc_id] = score
    return out


def _lround(x: float) -> int:
    """C ``lround`` for ``x >= 0``: nearest integer, halves away from zero."""
    floor = math.floor(x)
    return floor + 1 if x - floor >= 0.5 else floor


def interpolated_precision(
    relevant: Sequence[bool], num_rel: int, levels: Sequence[float]
) -> list[float]:
    """trec_eval 10's interpolated precision at each recall level (``m_iprec_at_recall.c``).

    ``relevant[i]`` says whether the document at rank ``i + 1`` is relevant; ``num_rel`` counts
    the query's relevant judgments; ``levels`` ascend. Level ``x`` maps to the rank at which the
    ``c = lround(x * num_rel)``-th relevant document is retrieved, and its value is
    ``max_{r >= that rank} precision@r`` (for ``c = 0``: the maximum over all ranks). A level
    whose ``c`` exceeds the number of relevant documents retrieved scores 0.
    """
    num_ret = len(relevant)
    num_rel_ret = sum(relevant)
    cutoffs = [_lround(level * num_rel) for level in levels]
    values = [0.0] * len(levels)
    if num_ret == 0:
        return values
    current = len(levels) - 1
    while current >= 0 and cutoffs[current] > num_rel_ret:
        current -= 1
    int_precis = num_rel_ret / num_ret
    rel_so_far = num_rel_ret
    for rank in range(num_ret, 0, -1):
        if rel_so_far <= 0:
            break
        int_precis = max(int_precis, rel_so_far / rank)
        if relevant[rank - 1]:
            while current >= 0 and rel_so_far == cutoffs[current]:
                values[current] = int_precis
                current -= 1
            rel_so_far -= 1
    while current >= 0:
        values[current] = int_precis
        current -= 1
    return values


def _interpolated_value(metric: MetricName, relevant: Sequence[bool], num_rel: int) -> float:
    if metric.family == "11pt_avg":
        values = interpolated_precision(relevant, num_rel, ELEVEN_RECALL_LEVELS)
        total = 0.0
        for value in reversed(values):  # trec_eval sums from the highest level down
            total += value
        return total / len(values)
    level = float(metric.name.rsplit("_", 1)[1])
    return interpolated_precision(relevant, num_rel, [level])[0]


def _aggregate(metric: MetricName, values: list[float]) -> float:
    if metric.aggregation == "sum":
        return float(sum(values))
    if metric.aggregation == "geometric":
        return math.exp(sum(math.log(v) for v in values) / len(values))
    return sum(values) / len(values)


def evaluate_run(
    qrels: pl.DataFrame,
    run: pl.DataFrame,
    metrics: Sequence[str],
    relevance_level: int,
    judged_only: bool = True,
) -> ListMetricReport:
    """trec_eval's values of ``metrics`` for ``run`` judged by ``qrels`` (see the module doc).

    ``relevance_level`` is trec_eval's ``-l`` for names without ``(rel=N)``. Returns per-query
    values for the scored queries (sorted by query id), their aggregate (mean; sum for
    ``num_*``; geometric mean for ``gm_*``) and the ids of the dropped unjudged run queries.
    """
    parsed = parse_metric_names(metrics)
    for metric in parsed:
        if metric.is_signed_metric or metric.ideal == "max":
            raise InputError(
                f"metric {metric.name!r} is defined on label lists only, not on judged runs"
            )
    if isinstance(relevance_level, bool) or not isinstance(relevance_level, int):
        raise InputError(f"relevance_level must be an integer >= 1, got {relevance_level!r}")
    if not 1 <= relevance_level <= MAX_RELEVANCE_LEVEL:
        raise InputError(
            f"relevance_level must be >= 1 and <= {MAX_RELEVANCE_LEVEL}, got {relevance_level}"
        )
    judgments = _qrels_dict(qrels)
    ranked = _ranked_run(run)
    run_queries = sorted(set(ranked["query_id"].to_list()))
    dropped = tuple(q for q in run_queries if q not in judgments)
    if not judged_only:
        for qid in dropped:
            judgments[qid] = {_PLACEHOLDER_DOC: 0}
        dropped = ()
    scored = [q for q in run_queries if q in judgments]
    if not scored:
        raise InputError(
            f"no run query has judgments ({len(run_queries)} run queries, "
            f"{len(judgments)} judged queries): nothing to evaluate"
        )

    groups: dict[tuple[int, int | None], list[MetricName]] = {}
    for metric in parsed:
        level = relevance_level if metric.rel is None else metric.rel
        groups.setdefault((level, metric.truncate_at), []).append(metric)

    per_query: dict[str, dict[str, float]] = {qid: {} for qid in scored}
    interpolated = [m for m in parsed if m.family in _INTERPOLATED]
    if interpolated:
        ranked_docs = _run_dict(ranked, None)
        for qid in scored:
            judged = judgments[qid]
            num_rel = sum(1 for rel in judged.values() if rel >= relevance_level)
            relevant = [judged.get(doc, 0) >= relevance_level for doc in ranked_docs[qid]]
            for metric in interpolated:
                per_query[qid][metric.name] = _interpolated_value(metric, relevant, num_rel)
    for (level, depth), group in groups.items():
        group = [m for m in group if m.family not in _INTERPOLATED]
        if not group:
            continue
        evaluator = pytrec_eval.RelevanceEvaluator(
            judgments, {m.pytrec_measure for m in group}, relevance_level=int(level)
        )
        results = evaluator.evaluate(_run_dict(ranked, depth))
        for qid in scored:
            for metric in group:
                value = float(results[qid][metric.pytrec_measure])
                if metric.aggregation == "geometric":
                    value = math.exp(value)  # pytrec_eval returns log(max(x, MIN_GEO_MEAN))
                per_query[qid][metric.name] = value
    aggregate = {m.name: _aggregate(m, [per_query[qid][m.name] for qid in scored]) for m in parsed}
    ordered = {qid: {m.name: per_query[qid][m.name] for m in parsed} for qid in scored}
    return ListMetricReport(per_query=ordered, aggregate=aggregate, dropped_queries=dropped)
