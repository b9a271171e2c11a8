"""The reader fingerprint: one hash for everything that decides a reader's answers.

``fingerprint = sha256(canonical JSON of reader_identity(spec))`` (64 hex; the first 16 are the
short form shown in logs). The identity holds:

* ``model`` — content identity of the weights: the file's sha256 for a GGUF (packaged or not;
  where it lives does not matter), every relevant file's sha256 for a local folder (weights,
  config, tokenizer, chat template), the id plus the pinned revision and the resolved commit for a
  Hugging Face id;
* ``backend`` and ``libraries`` — transformers and torch versions (plus gguf for GGUF sources:
  it dequantises the weights);
* ``dtype`` — the *resolved* dtype (``auto`` is ``float32``): it changes answers;
* ``hardware`` — only where answers depend on the machine (bf16/fp16, any GPU:
  :mod:`.hardware`): the CPU model and kernel flags or the GPU model and CUDA build, so a store
  keeps answers of different hardware apart;
* ``prompt`` — system prompt, user template, answer prefix, few-shot examples,
  ``max_input_tokens`` (the truncation budget) and, from its version 2 on, the prompt builder's
  version ``builder_version`` (:data:`erag_dagster.readers.prompts.PROMPT_BUILDER`; at version 1
  it adds nothing, so fingerprints made before it had a version still hold);
* ``decoding`` — greedy (``do_sample=False``, ``num_beams=1``), ``max_new_tokens`` and, in
  float32, the margin guard's rule (``exact_greedy``: :mod:`.exact_greedy`);
* ``postprocess_version`` — :data:`erag_dagster.readers.prompts.POSTPROCESS_VERSION`.

Deliberately NOT hashed: ``batch_size``, ``num_threads``, ``share_prefix``,
``stop_at_line_end``, ``allow_download`` and the reader's name — they do not change answers: in
float32 on the CPU the margin guard makes each answer the exact-arithmetic greedy answer
(tested across batch layouts, thread counts and kernel paths: ``tests/test_determinism.py``).
In bf16 they can flip a near-tie (13–25% of answers between layouts here): such a reader's
labels are labels of that fingerprint *and that machine kind*, computed under whichever batch
layout came first — an explicit choice for speed, not the default.

torch, transformers and the margin guard are imported inside the functions that need them: the
``openai`` backend uses only :func:`fingerprint_of` and :func:`short` and imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from erag_dagster.core.devices import resolve_device
from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_json
from erag_dagster.readers.models import ModelSource, resolve_model
from erag_dagster.readers.prompts import POSTPROCESS_VERSION, prompt_identity
from erag_dagster.readers.spec import ReaderSpec

if TYPE_CHECKING:
    import torch

FINGERPRINT_VERSION = 2


def short(fingerprint: str) -> str:
    """The 16-hex short form of a fingerprint."""
    return fingerprint[:16]


def resolve_reader_dtype(spec: ReaderSpec, device: torch.device | None = None) -> torch.dtype:
    """``auto`` → float32 on every device: the dtype whose answers the margin guard makes
    machine-independent (:mod:`.exact_greedy`). bf16 / fp16 only when the spec names them."""
    import torch

    device = device or resolve_device(spec.device)
    if spec.dtype == "auto":
        return torch.float32
    dtype = getattr(torch, spec.dtype)  # an EXPLICIT_DTYPES name: ReaderSpec checked it
    if device.type == "cpu" and dtype == torch.float16:
        raise InputError(f"reader {spec.name!r}: float16 is not supported on CPU; use bfloat16")
    return dtype


def library_versions(source: ModelSource) -> dict[str, str]:
    """Versions of the libraries that compute the answers."""
    import torch
    import transformers

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if source.kind == "gguf":
        from importlib.metadata import version

        versions["gguf"] = version("gguf")
    return versions


def reader_identity(
    spec: ReaderSpec,
    source: ModelSource | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
) -> dict[str, Any]:
    """Everything the fingerprint hashes (JSON-serialisable; see the module docstring)."""
    import torch

    from erag_dagster.readers.exact_greedy import guard_identity
    from erag_dagster.readers.hardware import hardware_dependent, hardware_identity

    source = source or resolve_model(spec)
    device = device or resolve_device(spec.device)
    dtype = dtype or resolve_reader_dtype(spec, device)
    identity = {
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
    if dtype == torch.float32 and spec.backend == "transformers":
        identity["decoding"]["exact_greedy"] = guard_identity()
    if hardware_dependent(dtype, device):
        identity["hardware"] = hardware_identity(device)
    return identity


def fingerprint_of(identity: dict[str, Any]) -> str:
    """The fingerprint (sha256 hex, 64 chars) of an identity from :func:`reader_identity`."""
    return sha256_json(identity)


def reader_fingerprint(spec: ReaderSpec) -> str:
    """Shortcut: ``fingerprint_of(reader_identity(spec))`` (hashes files, loads no model)."""
    return fingerprint_of(reader_identity(spec))
