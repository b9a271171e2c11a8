"""The one ``Definitions`` object: assets, resources, jobs, schedules and sensors."""

from __future__ import annotations

import dagster as dg

from erag_dagster.assets import data, labels, retrieval
from erag_dagster.resources import EvalSettings, LabelStoreResource, ReaderResource
from erag_dagster.resources.io import PolarsJsonIOManagerFactory

ALL_ASSETS = [
    *dg.load_assets_from_modules([data, retrieval, labels]),
]


def build_resources() -> dict[str, object]:
    """Single-machine defaults; everything is overridable through run config or env vars."""
    return {
        "settings": EvalSettings(),
        "reader": ReaderResource(),
        "label_store": LabelStoreResource(),
        "io_manager": PolarsJsonIOManagerFactory(),
    }


defs = dg.Definitions(assets=ALL_ASSETS, resources=build_resources())
