"""corpus, queries, qrels: the dataset named by the settings' spec, as three polars tables."""

import dagster as dg
import polars as pl

from erag_dagster.data.loaders import load_dataset
from erag_dagster.orchestration.assets.adapter import adapt
from erag_dagster.orchestration.assets.automation import DATASET_FILES, RECOMPUTE_WHEN_STALE
from erag_dagster.orchestration.assets.common import (
    CODE_VERSION,
    dataset_of,
    frame_version,
    table_md,
)
from erag_dagster.orchestration.resources import EvalSettings
from erag_dagster.orchestration.resources.keys import UNPREFIXED, ResourceKeys

_TABLES = {
    "corpus": "doc_id, title, text",
    "queries": "query_id, question, answers",
    "qrels": "query_id, doc_id, relevance",
}


def build_dataset_tables(keys: ResourceKeys = UNPREFIXED) -> dg.AssetsDefinition:
    """``corpus``, ``queries`` and ``qrels`` of one dataset (resources under ``keys``)."""
    outs = {
        name: dg.AssetOut(
            code_version=CODE_VERSION,
            description=description,
            automation_condition=RECOMPUTE_WHEN_STALE,
            io_manager_key=keys.io_manager,
        )
        for name, description in _TABLES.items()
    }
    return dg.multi_asset(
        name="dataset_tables", outs=outs, group_name="dataset", can_subset=False,
        deps=[DATASET_FILES],
    )(adapt(dataset_tables, keys))  # fmt: skip


def dataset_tables(context: dg.AssetExecutionContext, settings: EvalSettings):
    """Load and validate the dataset (``settings.dataset``; default ``sample``)."""
    spec = settings.resolve(dataset_of(context)).dataset
    ds = load_dataset(spec)
    context.log.info(
        f"{spec}: {ds.corpus.height} documents, {ds.queries.height} queries, "
        f"{ds.qrels.height} judgments"
    )
    answered = ds.queries.filter(pl.col("answers").list.len() > 0).height
    yield dg.Output(
        ds.corpus,
        output_name="corpus",
        data_version=frame_version(ds.corpus),
        metadata={"dataset": spec, "documents": ds.corpus.height},
    )
    yield dg.Output(
        ds.queries,
        output_name="queries",
        data_version=frame_version(ds.queries),
        metadata={
            "dataset": spec,
            "queries": ds.queries.height,
            "with_gold_answers": answered,
            "preview": table_md(ds.queries.head(5)),
        },
    )
    yield dg.Output(
        ds.qrels,
        output_name="qrels",
        data_version=frame_version(ds.qrels),
        metadata={"dataset": spec, "judgments": ds.qrels.height},
    )
