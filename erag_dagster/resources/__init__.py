"""Dagster resources: evaluation settings, the reader (GPU/CPU), the label store.

Each resource is a thin configurable wrapper over a plain-Python object from the evaluation
modules; per-deployment choices (device, storage paths) live here, not in the assets.
"""

import os
from typing import Any

import dagster as dg
from pydantic import Field

from erag_dagster.registry import Registry, load_registry


class EvalSettings(dg.ConfigurableResource):
    """What to evaluate: dataset spec, registry file, cut-offs, downstream and list metrics.

    Empty values fall back to the registry's ``evaluation`` section.
    """

    dataset: str = Field(default="", description="dataset spec, e.g. sample, beir:DIR, squad:PATH")
    registry_path: str = Field(default="", description="registry YAML; default: packaged")
    k: int = Field(default=0, description="retrieval depth per query (0 = registry default)")
    label_k: int = Field(default=0, description="label the top label_k documents (0 = default)")
    metric: str = Field(default="", description="downstream metric: em|f1|rougel|accuracy|contains")
    list_metrics: list[str] = Field(default_factory=list)
    human_metrics: list[str] = Field(default_factory=list)
    e2e_ks: list[int] = Field(default_factory=list, description="end-to-end depths (Figure 1)")
    bootstrap_resamples: int = Field(default=1000, description="bootstrap resamples for CIs")
    efficiency_ks: list[int] = Field(default_factory=list, description="Table 2 depths")
    efficiency_queries: int = Field(default=0, description="queries timed for Table 2")

    def registry(self) -> Registry:
        return load_registry(self.registry_path or None)

    def _default(self, key: str, fallback: Any) -> Any:
        return self.registry().evaluation.get(key, fallback)

    @property
    def dataset_spec(self) -> str:
        return self.dataset or os.environ.get("ERAG_DATASET") or self._default("dataset", "sample")

    @property
    def retrieval_k(self) -> int:
        return self.k or int(self._default("k", 50))

    @property
    def labelling_k(self) -> int:
        return min(self.label_k or int(self._default("label_k", 10)), self.retrieval_k)

    @property
    def downstream_metric(self) -> str:
        return self.metric or str(self._default("metric", "em"))

    @property
    def eval_list_metrics(self) -> list[str]:
        return list(self.list_metrics or self._default("list_metrics", ["P@5", "nDCG@5"]))

    @property
    def end_to_end_ks(self) -> list[int]:
        ks = self.e2e_ks or self._default("e2e_ks", [self.labelling_k])
        return sorted({min(int(k), self.retrieval_k) for k in ks})

    @property
    def eff_ks(self) -> list[int]:
        return [int(k) for k in (self.efficiency_ks or self._default("efficiency_ks", [10, 50]))]

    @property
    def eff_queries(self) -> int:
        return self.efficiency_queries or int(self._default("efficiency_queries", 3))

    @property
    def eval_human_metrics(self) -> list[str]:
        return list(self.human_metrics or self._default("human_metrics", ["nDCG@10", "R@10"]))


class ReaderResource(dg.ConfigurableResource):
    """The reader model as a resource. ``device`` overrides the registry (auto|cpu|cuda:N)."""

    device: str = Field(default="", description="override the registry's device")
    num_threads: int = Field(default=0, description="torch CPU threads (0 = reader default)")

    def get(self, registry: Registry, reader: str):  # -> TransformersReader
        """The reader for a registry entry (name or partition key), loaded lazily, cached."""
        from erag_dagster.readers.transformers_reader import reader_from_config

        entry = registry.reader(reader)
        overrides: dict[str, Any] = {}
        if self.device:
            overrides["device"] = self.device
        if self.num_threads:
            overrides["num_threads"] = self.num_threads
        return reader_from_config(entry.name, {**entry.config, **overrides})

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        from erag_dagster.readers.transformers_reader import close_all_readers

        close_all_readers()


class LabelStoreResource(dg.ConfigurableResource):
    """The content-addressed label store (SQLite). Default: ``<storage root>/labels.sqlite``."""

    path: str = Field(default="", description="SQLite file of the label store")

    def open(self):  # -> LabelStore
        from erag_dagster.labels.store import LabelStore
        from erag_dagster.paths import storage_root

        return LabelStore(self.path or str(storage_root() / "labels.sqlite"))
