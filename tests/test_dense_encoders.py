"""Dense retrievers with any local encoder (pooling, normalisation and prefixes stated in the
config) and approximate faiss indexes (HNSW, IVF-PQ) whose recall against flat is reported.

All on the embedded sample (364 passages) with the packaged all-MiniLM-L6-v2 on one thread; the
corpus is encoded once (the flat index is reused by every approximate index built from it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import InputError
from erag_dagster.data.loaders import load_dataset
from erag_dagster.evaluation.checks import scores_every_document
from erag_dagster.evaluation.retrievers import RetrievalTiming, run_retriever
from erag_dagster.retrieval.ann import parse_index, recall_against_exact
from erag_dagster.retrieval.encoder import TextEncoder, packaged_encoder_path
from tests.pipeline_fixtures import scoped_env

DENSE = {"kind": "dense", "encoder": "packaged:all-minilm-l6-v2", "dtype": "float32"}
HNSW = {"type": "hnsw", "m": 16, "ef_construction": 100, "ef_search": 64}
IVFPQ = {"type": "ivfpq", "nlist": 8, "m": 8, "nbits": 6, "nprobe": 8}


def _registry(folder: Path, **retrievers) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "registry.yaml"
    path.write_text(yaml.safe_dump({"retrievers": retrievers, "readers": {"r": {"model": "m"}}}))
    return path


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory):
    with scoped_env(ERAG_STORAGE=str(tmp_path_factory.mktemp("dense-storage"))):
        yield


def test_default_encoder_identity_is_unchanged() -> None:
    """The index folder of an existing default encoder keeps its name (no rebuild)."""
    identity = TextEncoder(dtype="float32").identity()
    assert set(identity) == {"model", "pooling", "max_length", "dtype"}
    stated = TextEncoder(dtype="float32", normalize=False, query_prefix="query: ").identity()
    assert stated["normalize"] is False and stated["query_prefix"] == "query: "


def test_config_keys_change_the_partition_and_bad_ones_are_one_line(tmp_path: Path) -> None:
    base = load_registry(_registry(tmp_path / "a", d=DENSE)).retriever("d").partition_key
    e5 = {**DENSE, "query_prefix": "query: ", "passage_prefix": "passage: "}
    assert load_registry(_registry(tmp_path / "b", d=e5)).retriever("d").partition_key != base
    approx = {**DENSE, "index": HNSW}
    assert load_registry(_registry(tmp_path / "c", d=approx)).retriever("d").partition_key != base
    bad = [
        ({**DENSE, "pooling": "max"}, "pooling: 'max'; it must be mean or cls"),
        ({**DENSE, "normalize": "yes"}, "normalize: 'yes'; it must be true or false"),
        ({**DENSE, "index": {"type": "hnsw", "M": 3}}, "has index: "),
        ({**DENSE, "index": {"type": "ivfpq", "nbits": 40}}, "has index: "),
        ({**DENSE, "index": "annoy"}, "has index: 'annoy'"),
    ]
    for i, (config, message) in enumerate(bad):
        with pytest.raises(InputError, match=message):
            load_registry(_registry(tmp_path / f"bad{i}", d=config))
    with pytest.raises(InputError, match=r"unknown parameter\(s\) \['M'\]; known: m, ef_con"):
        parse_index({"type": "hnsw", "M": 3})
    assert parse_index({"type": "hnsw"}).params == {
        "m": 32,
        "ef_construction": 200,
        "ef_search": 128,
    }
    assert scores_every_document({"d": DENSE, "a": approx}, "d", 10)
    assert not scores_every_document({"d": DENSE, "a": approx}, "a", 10)


def test_pooling_normalisation_and_prefixes_of_a_plain_hf_folder(tmp_path: Path) -> None:
    """MiniLM's weights as a plain Hugging Face folder (no sentence-transformers files): with
    ``pooling: mean`` and the same max length stated it gives the packaged encoder's vectors."""
    source = packaged_encoder_path()
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "vocab.txt", "special_tokens_map.json"):  # fmt: skip
        (plain / name).symlink_to(source / name)
    texts = ["The Berlin Wall fell in 1989.", "Bananas are rich in potassium."]
    packaged = TextEncoder(dtype="float32", num_threads=1)
    folder = TextEncoder(str(plain), dtype="float32", pooling="mean", max_length=256, num_threads=1)
    assert folder.pooling == "mean" and packaged.pooling == "mean"
    np.testing.assert_allclose(folder.encode(texts), packaged.encode(texts), atol=1e-6)
    cls = TextEncoder(str(plain), dtype="float32", pooling="cls", num_threads=1).encode(texts)
    assert not np.allclose(cls, packaged.encode(texts), atol=1e-3)
    raw = TextEncoder(dtype="float32", normalize=False, num_threads=1).encode(texts)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-3)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True),
                               packaged.encode(texts), atol=1e-5)  # fmt: skip
    e5 = TextEncoder(dtype="float32", query_prefix="query: ", passage_prefix="passage: ")
    np.testing.assert_allclose(
        e5.encode_queries(texts), packaged.encode([f"query: {t}" for t in texts]), atol=1e-6
    )
    np.testing.assert_allclose(
        e5.encode_passages(texts), packaged.encode([f"passage: {t}" for t in texts]), atol=1e-6
    )


@pytest.mark.slow
def test_approximate_indexes_report_recall_against_flat(tmp_path: Path, storage) -> None:
    ds = load_dataset("sample?max_questions=20")
    registry = load_registry(
        _registry(
            tmp_path,
            flat={**DENSE, "threads": 1},
            hnsw={**DENSE, "index": HNSW},
            ivfpq={**DENSE, "index": IVFPQ},
        )
    )
    flat = run_retriever(registry, "flat", ds.corpus, ds.queries, 10)
    details = {}
    for name in ("hnsw", "ivfpq"):
        timing = RetrievalTiming()
        run = run_retriever(registry, name, ds.corpus, ds.queries, 10, timing=timing)
        details[name] = timing.details
        assert run.height <= flat.height and run["query_id"].n_unique() == 20
        recall = timing.details["recall_vs_flat@10"]
        assert recall == pytest.approx(recall_against_exact(run, flat))
        assert timing.details["index"]["type"] == name
        assert timing.details["index_build_seconds"] > 0
        assert timing.details["approximate_search_seconds"] > 0
    assert details["hnsw"]["recall_vs_flat@10"] >= 0.99  # 364 documents: HNSW is near exact
    assert 0.3 <= details["ivfpq"]["recall_vs_flat@10"] < 1.0  # 8 sub-quantisers of 6 bits: lossy
    again = RetrievalTiming()
    run_retriever(registry, "hnsw", ds.corpus, ds.queries, 10, timing=again)
    assert again.details["index_build_seconds"] == 0.0  # the index file is reused
    with pytest.raises(InputError, match="needs at least max"):
        big = {**DENSE, "index": {**IVFPQ, "nlist": 1000}}
        run_retriever(
            load_registry(_registry(tmp_path / "big", big=big)), "big", ds.corpus, ds.queries, 10
        )


def test_the_in_process_memo_returns_what_a_fresh_encode_computes() -> None:
    """A repeated call is served from the memo: the same numbers as a fresh encoder computing
    them with the memo empty, in a copy a caller may change; another order or another setting
    is another key."""
    from erag_dagster.retrieval import encoder as encoder_module

    texts = ["a short text", "a much longer text about the tallest building of Paris", "x"]
    first = TextEncoder(batch_size=2).encode(texts)
    first[0, 0] = 99.0  # the caller's copy: not the memo's
    again = TextEncoder(batch_size=2).encode(texts)
    encoder_module._memo.clear()
    fresh = TextEncoder(batch_size=2).encode(texts)
    assert np.array_equal(again, fresh) and again[0, 0] != 99.0
    key = TextEncoder(batch_size=2)._memo_key(texts)
    assert key != TextEncoder(batch_size=2)._memo_key(texts[::-1])
    assert key != TextEncoder(batch_size=3)._memo_key(texts)
    assert key != TextEncoder(batch_size=2, normalize=False)._memo_key(texts)


def test_auto_dtype_on_cpu_is_float32_and_vectors_do_not_move_with_the_batch() -> None:
    """``dtype: auto`` on CPU is float32 (devices.resolve_dtype): 30 sample passages encoded
    alone and in batches of 8 (other padding, other neighbours) give the same vectors to float32
    rounding, where bf16 had moved them by up to 1.7e-3."""
    encoder = TextEncoder(dtype="auto", device="cpu")
    assert encoder.identity()["dtype"] == "float32"
    texts = load_dataset("sample").corpus.get_column("text").head(30).to_list()
    alone = TextEncoder(batch_size=1).encode(texts)
    batched = TextEncoder(batch_size=8).encode(texts)
    assert np.abs(alone - batched).max() < 1e-5
