"""Input fingerprints: the dataset digest hashes exactly the files the loader reads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from erag_dagster.config.inputs import dataset_digest
from erag_dagster.data.loaders import dataset_source_files, load_dataset


@pytest.fixture(autouse=True)
def _storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERAG_STORAGE", str(tmp_path / "storage"))


def _kilt_beside_corpus(folder: Path, shared_data: Path) -> tuple[Path, Path]:
    """gold1.jsonl and a knowledge source ks.jsonl in ``folder`` (not the working directory)."""
    folder.mkdir()
    kilt = folder / "gold1.jsonl"
    kilt.write_bytes((shared_data / "kilt-test-fixtures" / "gold1.jsonl").read_bytes())
    pages = [{"wikipedia_id": "10287141", "wikipedia_title": "Chen", "text": ["A painter."]}]
    ks = folder / "ks.jsonl"
    ks.write_text("".join(json.dumps(p) + "\n" for p in pages), encoding="utf-8")
    return kilt, ks


def test_kilt_corpus_beside_the_kilt_file_is_in_the_digest(
    shared_data: Path, tmp_path: Path
) -> None:
    kilt, ks = _kilt_beside_corpus(tmp_path / "kilt", shared_data)
    spec = f"kilt:{kilt}?corpus=ks.jsonl"
    assert not (Path.cwd() / "ks.jsonl").exists()  # only found beside the KILT file
    data = load_dataset(spec)
    assert data.source_files == (kilt, ks) == dataset_source_files(spec)
    before = dataset_digest(spec)
    assert dataset_digest(spec) == before  # stable while nothing changes
    ks.write_text(
        json.dumps({"wikipedia_id": "10287141", "wikipedia_title": "Chen", "text": ["Other."]})
        + "\n",
        encoding="utf-8",
    )
    os.utime(ks, ns=(1, 1))  # a new mtime too, so the per-file hash cache cannot hide it
    after = dataset_digest(spec)
    assert after != before
    assert load_dataset(spec).corpus.get_column("text").to_list() == ["Other."]


def test_digest_covers_only_the_files_read(shared_data: Path, tmp_path: Path) -> None:
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n', encoding="utf-8")
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "y"}\n', encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("q1\td1\t1\n", encoding="utf-8")
    spec = f"beir:{folder}"
    assert load_dataset(spec).source_files == (
        folder / "corpus.jsonl",
        folder / "queries.jsonl",
        folder / "qrels" / "test.tsv",
    )
    before = dataset_digest(spec)
    (folder / "qrels" / "dev.tsv").write_text("q1\td1\t0\n", encoding="utf-8")  # another split
    (folder / "README").write_text("notes\n", encoding="utf-8")
    assert dataset_digest(spec) == before
    (folder / "qrels" / "test.tsv").write_text("q1\td1\t2\n", encoding="utf-8")
    assert dataset_digest(spec) != before


def test_missing_files_hash_as_missing_then_change(tmp_path: Path) -> None:
    spec = f"squad:{tmp_path / 'absent.json'}"
    missing = dataset_digest(spec)
    (tmp_path / "absent.json").write_text('{"data": []}', encoding="utf-8")
    assert dataset_digest(spec) != missing


def test_sample_reports_its_packaged_file() -> None:
    (path,) = load_dataset("sample").source_files
    assert path.name == "squad-v1.1-dev-sample.json" and path.is_file()
