"""Storage of asset values: polars frames as parquet, everything else as JSON, on any fsspec path.

No pickling: asset values are data (``pl.DataFrame`` → ``.parquet``; dicts/lists/scalars →
``.json``), so the store can be read by any tool and loading it never executes code.

The base path is a :class:`~upath.UPath`: a local folder (``/srv/erag/assets`` or
``file:///srv/erag/assets``), or an object store through fsspec (``s3://bucket/erag``,
``gs://bucket/erag``; install ``s3fs``/``gcsfs``; credentials from their usual environment
variables, never in config). Writes are atomic either way: on a local disk a temporary file
beside the target is renamed into place; on an object store one upload creates the object, which
readers see whole or not at all (no rename: on S3/GCS it would be a copy). A value's file name is
its Dagster path plus ``.parquet``/``.json`` appended (a partition key with a dot, e.g. reader
``qwen2.5``, keeps its whole name).
"""

import json
import os
import typing
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
from upath import UPath

from erag_dagster.core.paths import atomic_path

LOCAL_PROTOCOLS = ("", "file", "local")


def local_path(path: UPath) -> Path | None:
    """The plain :class:`Path` of a local ``path`` (no protocol, ``file://``), else ``None``."""
    return Path(path.path) if path.protocol in LOCAL_PROTOCOLS else None


def _with(path: UPath, suffix: str) -> UPath:
    return path.parent / f"{path.name}{suffix}"


class PolarsJsonIOManager(dg.UPathIOManager):
    """Parquet for ``pl.DataFrame`` outputs, JSON for the rest; partitions as sub-folders."""

    extension = ""

    @property
    def base_path(self) -> UPath:
        """The folder (or object-store URL) every value is stored under."""
        return self._base_path

    def dump_to_path(self, context: dg.OutputContext, obj: Any, path: UPath) -> None:
        if isinstance(obj, pl.DataFrame):
            target, write = _with(path, ".parquet"), obj.write_parquet
        else:
            text = json.dumps(obj, indent=1, default=str)
            target = _with(path, ".json")

            def write(file: Any) -> None:
                file.write(text.encode("utf-8"))

        local = local_path(target)
        if local is not None:
            with atomic_path(local) as tmp, tmp.open("wb") as file:
                write(file)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("wb") as file:
            write(file)

    def load_from_path(self, context: dg.InputContext, path: UPath) -> Any:
        parquet, as_json = _with(path, ".parquet"), _with(path, ".json")
        if parquet.is_file():
            with parquet.open("rb") as file:
                return pl.read_parquet(file)
        if as_json.is_file():
            return json.loads(as_json.read_text(encoding="utf-8"))
        raise FileNotFoundError(f"no stored value at {path}(.parquet|.json)")

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
        return _with(path, ".parquet").is_file() or _with(path, ".json").is_file()


class PolarsJsonIOManagerFactory(dg.ConfigurableIOManagerFactory):
    """Configurable factory; ``base_dir`` (a local folder or an fsspec URL such as
    ``s3://bucket/erag/assets``) defaults to ``$ERAG_ASSETS_URL``, else the erag storage root's
    ``assets`` folder. Every pod of a multi-pod deployment must see the same base."""

    base_dir: str | None = None

    def create_io_manager(self, context: dg.InitResourceContext) -> PolarsJsonIOManager:
        from erag_dagster.core.paths import storage_dir

        base = self.base_dir or os.environ.get("ERAG_ASSETS_URL") or str(storage_dir("assets"))
        return PolarsJsonIOManager(base_path=UPath(base))
