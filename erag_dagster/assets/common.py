"""Helpers shared by the asset modules: partitions from the registry, data versions, metadata."""

from collections.abc import Mapping
from typing import TypeVar

import dagster as dg
import polars as pl

from erag_dagster.hashing import sha256_frame
from erag_dagster.meta.per_query import System
from erag_dagster.registry import Registry
from erag_dagster.reports.tables import to_markdown

CODE_VERSION = "1"
T = TypeVar("T")


def retriever_partitions(registry: Registry) -> dg.StaticPartitionsDefinition:
    return dg.StaticPartitionsDefinition(registry.retriever_partitions)


def reader_retriever_partitions(registry: Registry) -> dg.MultiPartitionsDefinition:
    return dg.MultiPartitionsDefinition(
        {
            "reader": dg.StaticPartitionsDefinition(registry.reader_partitions),
            "retriever": dg.StaticPartitionsDefinition(registry.retriever_partitions),
        }
    )


def system_of(key: dg.MultiPartitionKey) -> System:
    """``(reader, retriever)`` of a reader x retriever partition key."""
    dims = key.keys_by_dimension
    return dims["reader"], dims["retriever"]


def by_system(partitions: Mapping[dg.MultiPartitionKey, T]) -> dict[System, T]:
    """Every partition of a reader x retriever input, keyed by ``(reader, retriever)``."""
    return {system_of(key): value for key, value in partitions.items()}


def frame_version(frame: pl.DataFrame) -> dg.DataVersion:
    """A content hash of a frame (its rows as JSON lines): equal data → equal version."""
    digest = sha256_frame(frame)
    return dg.DataVersion(digest[:16])


def table_md(frame: pl.DataFrame, max_rows: int = 50) -> dg.MetadataValue:
    return dg.MetadataValue.md(to_markdown(frame.head(max_rows)))
