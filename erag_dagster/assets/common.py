"""Helpers shared by the asset modules: partitions from the registry, data versions, metadata."""

import hashlib

import dagster as dg
import polars as pl

from erag_dagster.registry import Registry
from erag_dagster.reports.tables import to_markdown

CODE_VERSION = "1"


def retriever_partitions(registry: Registry) -> dg.StaticPartitionsDefinition:
    return dg.StaticPartitionsDefinition(registry.retriever_partitions)


def reader_retriever_partitions(registry: Registry) -> dg.MultiPartitionsDefinition:
    return dg.MultiPartitionsDefinition(
        {
            "reader": dg.StaticPartitionsDefinition(registry.reader_partitions),
            "retriever": dg.StaticPartitionsDefinition(registry.retriever_partitions),
        }
    )


def frame_version(frame: pl.DataFrame) -> dg.DataVersion:
    """A content hash of a frame (its rows as JSON lines): equal data → equal version."""
    digest = hashlib.sha256(frame.write_ndjson().encode("utf-8")).hexdigest()
    return dg.DataVersion(digest[:16])


def table_md(frame: pl.DataFrame, max_rows: int = 50) -> dg.MetadataValue:
    return dg.MetadataValue.md(to_markdown(frame.head(max_rows)))
