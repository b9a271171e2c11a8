"""Storage of asset values: polars frames as parquet, everything else as JSON.

No pickling: asset values are data (``pl.DataFrame`` → ``.parquet``; dicts/lists/scalars →
``.json``), so the store can be read by any tool and loading it never executes code.
Writes go to a temporary file that is renamed into place (atomic).
"""

import json
import typing
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
from upath import UPath

from erag_dagster.paths import atomic_path


class PolarsJsonIOManager(dg.UPathIOManager):
    """Parquet for ``pl.DataFrame`` outputs, JSON for the rest; partitions as sub-folders."""

    extension = ""

    def dump_to_path(self, context: dg.OutputContext, obj: Any, path: UPath) -> None:
        target = Path(str(path))
        if isinstance(obj, pl.DataFrame):
            with atomic_path(target.with_suffix(".parquet")) as tmp:
                obj.write_parquet(tmp)
        else:
            with atomic_path(target.with_suffix(".json")) as tmp:
                tmp.write_text(json.dumps(obj, indent=1, default=str), encoding="utf-8")

    def load_from_path(self, context: dg.InputContext, path: UPath) -> Any:
        target = Path(str(path))
        if target.with_suffix(".parquet").is_file():
            return pl.read_parquet(target.with_suffix(".parquet"))
        if target.with_suffix(".json").is_file():
            return json.loads(target.with_suffix(".json").read_text(encoding="utf-8"))
        raise FileNotFoundError(f"no stored value at {target}(.parquet|.json)")

    def load_partitions(self, context: dg.InputContext) -> Any:
        """A ``dict[str, ...]`` input gets ``{partition key: value}`` also when one partition
        maps to it (Dagster's UPathIOManager hands over the bare value then: a registry with one
        retriever broke ``retrieval_report``); any other input type is left as Dagster loads it."""
        loaded = super().load_partitions(context)
        wants_mapping = typing.get_origin(context.dagster_type.typing_type) is dict
        keys = context.asset_partition_keys
        if wants_mapping and len(keys) == 1:
            return {keys[0]: loaded}
        return loaded

    def path_exists(self, path: UPath) -> bool:
        target = Path(str(path))
        return target.with_suffix(".parquet").is_file() or target.with_suffix(".json").is_file()


class PolarsJsonIOManagerFactory(dg.ConfigurableIOManagerFactory):
    """Configurable factory; ``base_dir`` defaults to the erag storage root's ``assets`` folder."""

    base_dir: str | None = None

    def create_io_manager(self, context: dg.InitResourceContext) -> PolarsJsonIOManager:
        from erag_dagster.paths import storage_dir

        base = self.base_dir or str(storage_dir("assets"))
        return PolarsJsonIOManager(base_path=UPath(base))
