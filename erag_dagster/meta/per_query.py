"""Per-query list metrics on label frames, and the tables built from them for every system.

A *system* is one (reader partition key, retriever partition key) pair: the reader judged (or
answered from) the retriever's ranked lists. Label frames hold ``query_id, doc_id, rank,
label`` rows (labels in [0, 1]); the metrics are those of
:func:`erag_dagster.metrics.list_metrics.evaluate_labels`, computed on each query's labels in
rank order.

**Missing queries** (one rule, :func:`query_lists`; docs/metrics.md): a system is scored on the
*evaluated question set* — the dataset's queries — and a query of that set it has no labelled
document for (its run retrieved nothing there, or a run file left it out) is an empty list,
scored 0 on every list metric and kept in the mean, as trec_eval ``-c`` and ir_measures do for
a run's missing queries; :func:`unlabelled_queries` names them for the note every door prints
(:func:`missing_queries_note`). A labelled query outside the set is refused (a label of a
question the evaluation does not have). Every door reaches this rule: the Dagster
``erag_per_query`` report and the API through :func:`erag_per_query`, the regression gate
through :func:`scored_queries`. Table 1 (:func:`correlation_inputs`) pairs each labelled query
with its end-to-end score, on the labelled queries only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.meta.label_methods import SIGNED_METHODS
from erag_dagster.metrics.list_metrics import evaluate_labels, labels_from_frame
from erag_dagster.metrics.report import ListMetricReport

#: ``(reader partition key, retriever partition key)``.
System = tuple[str, str]

#: The list metrics of the correlation-vs-k figure (paper Figure 1) at depth ``k``.
FIGURE1_METRICS = ("P@{k}", "Success@{k}", "nDCG@{k}")


def query_lists(labels: pl.DataFrame, query_ids: Sequence[str]) -> dict[str, list[float]]:
    """The label lists (rank order) of every query of ``query_ids``, sorted by id — the one
    missing-query rule (module docstring): a query without a labelled row gets ``[]`` (scored
    0 on every metric by :func:`~erag_dagster.metrics.list_metrics.evaluate_labels`). A
    labelled query outside ``query_ids`` is an :class:`InputError` naming it."""
    lists = labels_from_frame(labels) if labels.height else {}
    wanted = {str(q) for q in query_ids}
    outside = sorted(set(lists) - wanted)
    if outside:
        raise InputError(
            f"labels of {len(outside)} question(s) the evaluation does not have, e.g. "
            f"{outside[0]!r}"
        )
    return {q: lists.get(q, []) for q in sorted(wanted)}


def unlabelled_queries(labels: pl.DataFrame, query_ids: Sequence[str]) -> list[str]:
    """The queries of ``query_ids`` (sorted) ``labels`` has no row for: the ones
    :func:`query_lists` scores 0."""
    labelled = (
        set(labels.get_column("query_id").cast(pl.String).to_list()) if labels.height else set()
    )
    return sorted({str(q) for q in query_ids} - labelled)


def missing_queries_note(system: str, missing: Sequence[str], total: int) -> str:
    """The note that names a system's :func:`unlabelled_queries` (``""`` when none)."""
    if not missing:
        return ""
    shown = ", ".join(repr(q) for q in list(missing)[:5])
    more = f", ... {len(missing) - 5} more" if len(missing) > 5 else ""
    return (
        f"{system} has no document for {len(missing)} of {total} queries (each scored 0 on "
        f"every metric: {shown}{more})"
    )


def scored_queries(
    labels: pl.DataFrame, metrics: Sequence[str], query_ids: Sequence[str]
) -> ListMetricReport:
    """The list metrics of one system's ``labels`` on every query of ``query_ids`` (the
    missing-query rule of :func:`query_lists`): per query (sorted by id) and their means."""
    return evaluate_labels(query_lists(labels, query_ids), list(metrics))


def per_query_metrics(
    labels: pl.DataFrame,
    metrics: Sequence[str],
    signed: bool = False,
    query_ids: Sequence[str] | None = None,
) -> pl.DataFrame:
    """``query_id`` plus one ``Float64`` column per metric, one row per query: every query of
    ``query_ids`` (:func:`scored_queries`: the missing-query rule), or with ``None`` each
    labelled query (Table 1's pairing; ``signed``: labels in [-1, 1], scored as
    ``evaluate_labels(..., signed=True)``)."""
    if query_ids is not None:
        report = scored_queries(labels, metrics, query_ids)
    else:
        report = evaluate_labels(
            labels_from_frame(labels, signed=signed), list(metrics), signed=signed
        )
    return pl.DataFrame(
        [{"query_id": qid, **{m: values[m] for m in metrics}} for qid, values in
         report.per_query.items()],
        schema={"query_id": pl.String, **dict.fromkeys(metrics, pl.Float64)},
    )  # fmt: skip


def erag_per_query(
    doc_labels: Mapping[System, pl.DataFrame], metrics: Sequence[str], query_ids: Sequence[str]
) -> pl.DataFrame:
    """``reader, retriever, query_id`` + one column per metric, systems in sorted order, every
    query of ``query_ids`` (the evaluated question set) for each system: one it has no
    labelled document for scores 0 (:func:`query_lists`)."""
    frames = [
        per_query_metrics(labels, metrics, query_ids=query_ids).select(
            pl.lit(reader).alias("reader"), pl.lit(retriever).alias("retriever"), pl.all()
        )
        for (reader, retriever), labels in sorted(doc_labels.items())
    ]
    return pl.concat(frames) if frames else pl.DataFrame()


def check_erag_per_query(table: pl.DataFrame, metrics: Sequence[str], what: str) -> None:
    """Refuse an :func:`erag_per_query` table (named ``what`` in the message) that lacks the
    ``reader, retriever, query_id`` columns or a metric column, or has a null / non-finite value
    of a metric: one :class:`InputError` naming the first such reader, retriever and query."""
    missing = [c for c in ("reader", "retriever", "query_id", *metrics) if c not in table.columns]
    if missing:
        raise InputError(f"{what}: missing column(s) {', '.join(missing)}")
    for m in metrics:
        bad = table.filter(pl.col(m).is_null() | ~pl.col(m).cast(pl.Float64).is_finite())
        if bad.height:
            row = bad.row(0, named=True)
            raise InputError(
                f"{what}: missing or non-finite {m} for reader {row['reader']!r}, "
                f"retriever {row['retriever']!r}, query {row['query_id']!r}"
            )


def erag_summary(per_query: pl.DataFrame, metrics: Sequence[str]) -> pl.DataFrame:
    """Per (reader, retriever): ``queries`` and the mean over queries of each metric present
    in ``per_query`` (the retriever comparison table)."""
    present = [m for m in metrics if m in per_query.columns]
    return (
        per_query.group_by("reader", "retriever", maintain_order=True)
        .agg(pl.len().alias("queries"), *[pl.col(m).mean() for m in present])
        .sort("reader", "retriever")
    )


def _long(
    labels: pl.DataFrame, metrics: Sequence[str], system: str, method: str, dataset: str
) -> pl.DataFrame:
    """The ``per_query`` frame of :mod:`erag_dagster.meta.correlation` for one method."""
    return (
        per_query_metrics(labels, metrics, signed=method in SIGNED_METHODS)
        .unpivot(index="query_id", variable_name="metric", value_name="value")
        .select(
            pl.lit(dataset).alias("dataset"),
            pl.lit(system).alias("retriever"),
            pl.lit(method).alias("method"),
            pl.col("metric").cast(pl.String),
            "query_id",
            pl.col("value").cast(pl.Float64),
        )
    )


def transfer_method(labelling_reader: str) -> str:
    """The Table-1 method name of eRAG labels made by ``labelling_reader`` (a reader partition
    key) and correlated with another reader's end-to-end quality."""
    return f"eRAG (labels of {labelling_reader})"


def correlation_inputs(
    doc_labels: Mapping[System, pl.DataFrame],
    baseline_labels: Mapping[System, pl.DataFrame],
    end_to_end: Mapping[System, pl.DataFrame],
    metrics: Sequence[str],
    dataset: str,
    k: int,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-query retrieval scores of every labelling method on the top ``k`` (eRAG and each
    baseline ``method``), and the end-to-end scores at depth ``k``, per system.

    The system is named ``"<retriever> / <reader>"`` in the ``retriever`` column. A system
    without baseline labels or end-to-end scores contributes its eRAG rows only.

    Reader transfer: with several readers, each system also gets the eRAG labels that every
    *other* reader gave the same retriever's lists, as method :func:`transfer_method` — how well
    reader A's labels track reader B's end-to-end quality, i.e. how much eRAG depends on which
    reader produced the labels (the paper's premise, not measured there).
    """
    per_query, e2e = [], []
    for (reader, retriever), labels in sorted(doc_labels.items()):
        system = f"{retriever} / {reader}"
        top = labels.filter(pl.col("rank") <= k)
        per_query.append(_long(top, metrics, system, "eRAG", dataset))
        for (other, other_retriever), other_labels in sorted(doc_labels.items()):
            if other_retriever == retriever and other != reader:
                top_other = other_labels.filter(pl.col("rank") <= k)
                per_query.append(_long(top_other, metrics, system, transfer_method(other), dataset))
        baselines = baseline_labels.get((reader, retriever))
        if baselines is not None:
            for (method,), frame in baselines.group_by("method", maintain_order=True):
                top_b = frame.filter(pl.col("rank") <= k)
                per_query.append(_long(top_b, metrics, system, str(method), dataset))
        scores = end_to_end.get((reader, retriever))
        if scores is not None:
            e2e.append(
                scores.filter(pl.col("k") == k).select(
                    dataset=pl.lit(dataset),
                    retriever=pl.lit(system),
                    query_id="query_id",
                    value="score",
                )
            )
    return pl.concat(per_query), pl.concat(e2e) if e2e else pl.DataFrame()
