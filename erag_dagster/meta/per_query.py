"""Per-query list metrics on label frames, and the tables built from them for every system.

A *system* is one (reader partition key, retriever partition key) pair: the reader judged (or
answered from) the retriever's ranked lists. Label frames hold ``query_id, doc_id, rank,
label`` rows (labels in [0, 1]); the metrics are those of
:func:`erag_dagster.metrics.list_metrics.evaluate_labels`, computed on each query's labels in
rank order. A query with no label rows does not appear.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from erag_dagster.core.errors import InputError
from erag_dagster.meta.label_methods import SIGNED_METHODS
from erag_dagster.metrics.list_metrics import evaluate_labels, labels_from_frame

#: ``(reader partition key, retriever partition key)``.
System = tuple[str, str]

#: The list metrics of the correlation-vs-k figure (paper Figure 1) at depth ``k``.
FIGURE1_METRICS = ("P@{k}", "Success@{k}", "nDCG@{k}")


def per_query_metrics(
    labels: pl.DataFrame, metrics: Sequence[str], signed: bool = False
) -> pl.DataFrame:
    """``query_id`` plus one ``Float64`` column per metric, one row per labelled query
    (``signed``: labels in [-1, 1], scored as ``evaluate_labels(..., signed=True)``)."""
    report = evaluate_labels(labels_from_frame(labels, signed=signed), list(metrics), signed=signed)
    return pl.DataFrame(
        [{"query_id": qid, **{m: values[m] for m in metrics}} for qid, values in
         report.per_query.items()],
        schema={"query_id": pl.String, **dict.fromkeys(metrics, pl.Float64)},
    )  # fmt: skip


def erag_per_query(
    doc_labels: Mapping[System, pl.DataFrame], metrics: Sequence[str]
) -> pl.DataFrame:
    """``reader, retriever, query_id`` + one column per metric, systems in sorted order."""
    frames = [
        per_query_metrics(labels, metrics).select(
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
