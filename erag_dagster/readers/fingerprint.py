"""The reader fingerprint: one hash for everything that decides a reader's answers.

``fingerprint = sha256(canonical JSON of reader_identity(spec))`` (64 hex; the first 16 are the
short form shown in logs). The identity holds:

* ``model`` — content identity of the weights: the file's sha256 for a GGUF (packaged or not;
  where it lives does not matter), every relevant file's sha256 for a local folder (weights,
  config, tokenizer, chat template), the id plus the pinned revision and the resolved commit for a
  Hugging Face id;
* ``backend`` and ``libraries`` — transformers and torch versions (plus gguf for GGUF sources:
  it dequantises the weights);
* ``dtype`` — the *resolved* dtype (``auto`` becomes ``bfloat16``/``float32`` on this machine):
  it changes answers, so a bf16 machine and an fp32 machine get different fingerprints;
* ``prompt`` — system prompt, user template, answer prefix, few-shot examples and
  ``max_input_tokens`` (the truncation budget);
* ``decoding`` — greedy (``do_sample=False``, ``num_beams=1``) and ``max_new_tokens``;
* ``postprocess_version`` — :data:`erag_dagster.readers.prompts.POSTPROCESS_VERSION`.

Deliberately NOT hashed: ``device``, ``batch_size``, ``num_threads``, ``allow_download`` and the
reader's name — they should not change answers. Caveat: in bf16, batching (padding, different
kernel blocking) can flip a rare greedy tie, so an answer may differ between batch sizes or
devices; fp32 batched equals unbatched in our tests. Stored labels are then still labels of that
fingerprint, just computed under a different batch layout.
"""

from __future__ import annotations

from typing import Any

import torch

from erag_dagster.devices import cpu_supports_bf16, resolve_device
from erag_dagster.errors import InputError
from erag_dagster.hashing import sha256_json
from erag_dagster.readers.models import ModelSource, resolve_model
from erag_dagster.readers.prompts import POSTPROCESS_VERSION, prompt_identity
from erag_dagster.readers.spec import ReaderSpec

FINGERPRINT_VERSION = 1
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def short(fingerprint: str) -> str:
    """The 16-hex short form of a fingerprint."""
    return fingerprint[:16]


def resolve_reader_dtype(spec: ReaderSpec, device: torch.device | None = None) -> torch.dtype:
    """``auto`` → bf16 on a bf16-capable GPU or a CPU with fast oneDNN bf16, else float32."""
    device = device or resolve_device(spec.device)
    if spec.dtype != "auto":
        dtype = _DTYPES[spec.dtype]
        if device.type == "cpu" and dtype == torch.float16:
            raise InputError(f"reader {spec.name!r}: float16 is not supported on CPU; use bfloat16")
        return dtype
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if cpu_supports_bf16() else torch.float32


def library_versions(source: ModelSource) -> dict[str, str]:
    """Versions of the libraries that compute the answers."""
    import transformers

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if source.kind == "gguf":
        from importlib.metadata import version

        versions["gguf"] = version("gguf")
    return versions


def reader_identity(
    spec: ReaderSpec, source: ModelSource | None = None, dtype: torch.dtype | None = None
) -> dict[str, Any]:
    """Everything the fingerprint hashes (JSON-serialisable; see the module docstring)."""
    source = source or resolve_model(spec)
    dtype = dtype or resolve_reader_dtype(spec)
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "backend": spec.backend,
        "model": source.identity,
        "libraries": library_versions(source),
        "dtype": str(dtype).removeprefix("torch."),
        "prompt": prompt_identity(spec, spec.answer_prefix),
        "decoding": {
            "greedy": True,
            "do_sample": False,
            "num_beams": 1,
            "max_new_tokens": spec.max_new_tokens,
        },
        "postprocess_version": POSTPROCESS_VERSION,
    }


def fingerprint_of(identity: dict[str, Any]) -> str:
    """The fingerprint (sha256 hex, 64 chars) of an identity from :func:`reader_identity`."""
    return sha256_json(identity)


def reader_fingerprint(spec: ReaderSpec) -> str:
    """Shortcut: ``fingerprint_of(reader_identity(spec))`` (hashes files, loads no model)."""
    return fingerprint_of(reader_identity(spec))
