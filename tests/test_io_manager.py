"""The IO manager on real fsspec paths: a local folder, ``file://`` and fsspec's ``memory://``.

Each case materialises the same small graph (a frame, a JSON value, a partitioned frame whose
keys include a dot, and a consumer reading all of them back as a ``dict`` of partitions) with
``dg.materialize`` through :class:`PolarsJsonIOManagerFactory`; ``memory://`` is fsspec's
in-memory filesystem (a real fsspec implementation, as s3fs and gcsfs are).
"""

import uuid
from pathlib import Path

import dagster as dg
import fsspec
import polars as pl
import pytest

from erag_dagster.orchestration.resources.io import PolarsJsonIOManagerFactory

PARTS = dg.StaticPartitionsDefinition(["qwen2.5-7b", "smollm2"])


@dg.asset
def frame() -> pl.DataFrame:
    return pl.DataFrame({"doc_id": ["a", "b"], "score": [1.5, 0.25]})


@dg.asset
def summary() -> dict:
    return {"metric": "em", "values": [1, 2], "note": "é"}


@dg.asset(partitions_def=PARTS)
def per_reader(context: dg.AssetExecutionContext) -> pl.DataFrame:
    return pl.DataFrame({"reader": [context.partition_key], "n": [len(context.partition_key)]})


@dg.asset(deps=[frame, summary, per_reader])
def consumer(
    frame: pl.DataFrame, summary: dict, per_reader: dict[str, pl.DataFrame]
) -> pl.DataFrame:
    assert summary == {"metric": "em", "values": [1, 2], "note": "é"}
    assert sorted(per_reader) == ["qwen2.5-7b", "smollm2"]
    return pl.concat([per_reader[k] for k in sorted(per_reader)]).with_columns(
        total=pl.lit(frame.get_column("score").sum())
    )


def _materialise(base: str) -> None:
    io = PolarsJsonIOManagerFactory(base_dir=base)
    for key in PARTS.get_partition_keys():
        assert dg.materialize([per_reader], resources={"io_manager": io}, partition_key=key).success
    assert dg.materialize([frame, summary], resources={"io_manager": io}).success
    result = dg.materialize(
        [consumer, frame, summary, per_reader],
        selection=[consumer],
        resources={"io_manager": io},
    )
    assert result.success
    out = result.output_for_node("consumer")
    assert out.get_column("reader").to_list() == ["qwen2.5-7b", "smollm2"]
    assert out.get_column("total").to_list() == [1.75, 1.75]


EXPECTED = {
    "frame.parquet",
    "summary.json",
    "per_reader/qwen2.5-7b.parquet",
    "per_reader/smollm2.parquet",
    "consumer.parquet",
}


def _local_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_a_local_folder(tmp_path: Path) -> None:
    _materialise(str(tmp_path))
    assert _local_files(tmp_path) == EXPECTED  # no temporary file left behind
    assert pl.read_parquet(tmp_path / "frame.parquet").height == 2


def test_a_file_url(tmp_path: Path) -> None:
    _materialise(tmp_path.as_uri())
    assert _local_files(tmp_path) == EXPECTED  # the same files as for the plain folder


def test_fsspecs_memory_filesystem() -> None:
    root = f"/erag-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    try:
        _materialise(f"memory://{root}")
        stored = {p.removeprefix(f"{root}/") for p in fs.find(root)}
        assert stored == EXPECTED
        with fs.open(f"{root}/per_reader/qwen2.5-7b.parquet", "rb") as file:
            assert pl.read_parquet(file).get_column("reader").to_list() == ["qwen2.5-7b"]
    finally:
        if fs.exists(root):
            fs.rm(root, recursive=True)


def test_the_base_comes_from_erag_assets_url(monkeypatch: pytest.MonkeyPatch) -> None:
    root = f"/erag-env-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("ERAG_ASSETS_URL", f"memory://{root}")
    fs = fsspec.filesystem("memory")
    try:
        io = PolarsJsonIOManagerFactory()
        assert dg.materialize([frame], resources={"io_manager": io}).success
        assert fs.exists(f"{root}/frame.parquet")
    finally:
        if fs.exists(root):
            fs.rm(root, recursive=True)


def test_a_missing_value_names_its_path(tmp_path: Path) -> None:
    io = PolarsJsonIOManagerFactory(base_dir=f"memory:///missing-{uuid.uuid4().hex[:8]}")
    with pytest.raises(
        Exception, match=r"no stored value at memory://.*frame\(\.parquet\|\.json\)"
    ):
        dg.materialize([consumer, frame, summary, per_reader], selection=[consumer],
                       resources={"io_manager": io})  # fmt: skip
