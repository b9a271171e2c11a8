"""``ReaderResource`` owns the readers it creates: its teardown frees those models only."""

from __future__ import annotations

import dagster as dg

from erag_dagster.config.registry import load_registry
from erag_dagster.orchestration.resources import ReaderResource
from erag_dagster.readers.factory import reader_from_config


def test_teardown_closes_only_the_resources_own_readers() -> None:
    registry = load_registry()
    entry = next(iter(registry.readers.values()))
    outside = reader_from_config(entry.name, {**entry.config, "num_threads": 1})
    before = outside.answer([("Who wrote Hamlet?", "Hamlet is a play by William Shakespeare.")])
    with dg.build_resources({"reader": ReaderResource(num_threads=1)}) as resources:
        own = resources.reader.get(registry, entry.partition_key)
        assert resources.reader.get(registry, entry.name) is own  # one reader per entry
        own.answer([("Who wrote Hamlet?", "Hamlet is a play by William Shakespeare.")])
        assert own._loaded is not None
    assert own._loaded is None  # freed by the resource's teardown
    assert outside._loaded is not None  # a reader created elsewhere keeps its model
    outside.reset_timings()
    again = outside.answer([("Who wrote Hamlet?", "Hamlet is a play by William Shakespeare.")])
    assert again == before
