"""What the HTML page needs beyond its asset inputs, read where the run left it.

- **dataset facts**: question, document and judgment counts from the latest materialisation
  metadata of the dataset's ``queries``, ``corpus`` and ``qrels`` (:mod:`.data` records them);
- **label cost**: ``pairs_judged_now``, ``pairs_from_store`` and ``generation_seconds`` of each
  ``doc_labels`` partition's latest materialisation (:mod:`.labels` records them from the
  labeller's :class:`~erag_dagster.labels.labeller.LabelResult`);
- **texts**: question and document texts of the worked examples and the drill-down, read from
  the stored ``queries`` / ``corpus`` parquet files (only the rows needed: a lazy scan
  filtered by id), so the page step does not load a whole corpus;
- **specs**: each registry retriever and reader with its partition key and full spec.

Edge cases: a count or a metadata entry that is missing (an older run, an object store) is
``None`` and the page leaves it out; a missing parquet file gives no text (the page says so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import dagster as dg
import polars as pl

from erag_dagster.config.registry import Registry
from erag_dagster.core.credentials import mask_credentials, mask_in
from erag_dagster.meta.per_query import System
from erag_dagster.reports.html_examples import WorkedExample, example_picks, excerpt
from erag_dagster.reports.html_words import DatasetFacts, LabelCost


def _latest_metadata(
    instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None = None
) -> Mapping[str, object]:
    """The metadata of ``key``'s (``partition``'s) latest materialisation; ``{}`` if none."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None),
        limit=1,
    ).records
    if not records or records[0].asset_materialization is None:
        return {}
    return {k: getattr(v, "value", v) for k, v in records[0].asset_materialization.metadata.items()}


def _count(metadata: Mapping[str, object], name: str) -> int | None:
    value = metadata.get(name)
    return int(value) if isinstance(value, int | float) else None


def dataset_facts(
    instance: dg.DagsterInstance, prefix: list[str], name: str, spec: str
) -> DatasetFacts:
    """``name``, ``spec`` and the counts the data assets recorded (``None`` where absent)."""

    def meta(asset: str) -> Mapping[str, object]:
        return _latest_metadata(instance, dg.AssetKey([*prefix, asset]))

    return DatasetFacts(
        name=name,
        spec=spec,
        questions=_count(meta("queries"), "queries"),
        documents=_count(meta("corpus"), "documents"),
        judgments=_count(meta("qrels"), "judgments"),
    )


def label_cost(
    instance: dg.DagsterInstance, key: dg.AssetKey, partitions: list[str], pairs: int
) -> LabelCost:
    """The cost of the labels of ``partitions`` of ``doc_labels`` asset ``key``; ``pairs``: the
    label rows the page shows. A partition without ``generation_seconds`` (written before it
    was recorded) makes ``reader_seconds`` ``None``."""
    now = stored = 0
    seconds: float | None = 0.0
    for partition in partitions:
        meta = _latest_metadata(instance, key, partition)
        now += _count(meta, "pairs_judged_now") or 0
        stored += _count(meta, "pairs_from_store") or 0
        spent = meta.get("generation_seconds")
        if seconds is not None and isinstance(spent, int | float):
            seconds += float(spent)
        else:
            seconds = None
    return LabelCost(
        pairs=pairs,
        from_store=stored,
        generated=now,
        reader_seconds=seconds,
        partitions=len(partitions),
    )


def _stored(base: Path | None, prefix: list[str], asset: str) -> Path | None:
    if base is None:
        return None
    path = base.joinpath(*prefix, f"{asset}.parquet")
    return path if path.is_file() else None


def question_texts(base: Path | None, prefix: list[str]) -> pl.DataFrame | None:
    """The stored ``queries`` frame (``query_id, question, answers``), ``None`` if absent."""
    path = _stored(base, prefix, "queries")
    if path is None:
        return None
    return pl.read_parquet(path, columns=["query_id", "question", "answers"])


def worked_examples(
    base: Path | None,
    prefix: list[str],
    per_query: pl.DataFrame,
    doc_labels: Mapping[System, pl.DataFrame],
    metric: str,
    queries: pl.DataFrame | None,
) -> list[WorkedExample]:
    """The worked examples (:func:`~erag_dagster.reports.html_examples.example_picks`) with
    their question, gold answers and document excerpt; none without the stored texts."""
    picks = example_picks(per_query, doc_labels, metric)
    corpus = _stored(base, prefix, "corpus")
    if not picks.height or queries is None or corpus is None:
        return []
    query_id = picks["query_id"][0]
    question = queries.filter(pl.col("query_id") == query_id)
    if not question.height:
        return []
    row = question.row(0, named=True)
    text, gold = row["question"], tuple(row["answers"] or ())
    docs = dict(
        pl.scan_parquet(corpus)
        .filter(pl.col("doc_id").is_in(picks["doc_id"].unique().to_list()))
        .select("doc_id", pl.concat_str("title", "text", separator=". ", ignore_nulls=True))
        .collect()
        .iter_rows()
    )
    return [
        WorkedExample(
            reader=p["reader"],
            retriever=p["retriever"],
            query_id=query_id,
            question=text,
            gold=gold,
            doc_id=p["doc_id"],
            rank=p["rank"],
            excerpt=excerpt(docs.get(p["doc_id"]) or "", gold),
            answer=p["answer"],
            label=p["label"],
            score=p["score"],
        )
        for p in picks.iter_rows(named=True)
    ]


def registry_specs(registry: Registry, facts: DatasetFacts) -> pl.DataFrame:
    """``kind, name, partition_key, spec`` of the dataset (its full spec), each retriever and
    each reader of ``registry`` (a dataset's view); specs as sorted JSON, anything that looks
    like a credential masked (:mod:`erag_dagster.core.credentials`: the page is a file people
    share)."""
    rows = [("dataset", facts.name, "", mask_credentials(facts.spec or ""))]
    for kind, entries in (("retriever", registry.retrievers), ("reader", registry.readers)):
        rows += [
            (
                kind,
                e.name,
                e.partition_key,
                json.dumps(mask_in(e.config), sort_keys=True, default=str),
            )
            for e in entries.values()
        ]
    return pl.DataFrame(rows, schema=["kind", "name", "partition_key", "spec"], orient="row")
