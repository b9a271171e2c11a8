"""The packaged readers' weights, carried to a GPU machine in chunks (used by bench/gpu_check.py).

The GPU machine takes at most 64 MiB of files per command (the git working tree plus up to 8
git-ignored "carry" paths) and keeps git-ignored files between calls while it stays warm. The
readers' converted float32 safetensors are far larger (SmolLM2 538 MB, Gemma 3 270M 1,072 MB),
so what travels is the packaged **GGUF** itself (98 MB and 253 MB: the file whose sha256 the
reader fingerprint records) plus the small files of the converted folder made here (config,
generation config, tokenizer, chat template), as one gzip'd tar per reader split into chunks of
``--chunk-mib`` (default 56 MiB, leaving room for the working tree), grouped into device calls
of at most that size (:func:`device_calls`).

* here — :func:`write_pack` (``bench/gpu_check.py --pack DIR``): ``DIR/chunks/<reader>.NN``,
  ``DIR/site/`` (the ``gguf`` package with its dist-info: the GPU image lacks it, and
  transformers needs it to read a GGUF), ``DIR/manifest.json`` (sha256 of every chunk, of the
  payload and of the GGUF, and the sha256 of every float32 tensor of the converted folder here),
  ``DIR/PLAN.md`` (the device calls, each with its carry paths and command).
* on the device — :func:`unpack_reader` (``bench/gpu_check.py --pack-dir DIR``): joins the
  chunks, checks every sha256, dequantises the GGUF to float32 with transformers (as
  ``readers/models.py`` does here), saves ``DIR/readers/<reader>/`` beside the packed small
  files, and compares every tensor with the manifest's: the GPU then runs the same float32
  weights as this machine, or the check says that it does not.

Standard library at module level (torch, transformers and safetensors are imported where used).
Nothing here is committed to git: ``.gpu_pack/`` is git-ignored.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PACK_VERSION = 1
DEFAULT_CHUNK_MIB = 56
UNPACKED_MARKER = ".gpu-check-unpacked.json"  # hidden: not part of the folder identity
#: Files of the converted folder carried verbatim (the weights are rebuilt from the GGUF).
SMALL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
)
_BLOCK = 1 << 22


def _fault(message: str) -> Exception:
    """An :class:`~erag_dagster.core.errors.InputError` (imported late: this module is
    stdlib-only)."""
    from erag_dagster.core.errors import InputError

    return InputError(message)


def file_sha256(path: Path) -> str:
    """sha256 hex of a file's bytes, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def tensor_hashes(weights: Path) -> dict[str, str]:
    """sha256 of each tensor of a safetensors file (its dtype, shape and raw bytes), by name."""
    import torch
    from safetensors import safe_open

    out: dict[str, str] = {}
    with safe_open(str(weights), "pt") as handle:
        for name in sorted(handle.keys()):
            tensor = handle.get_tensor(name).contiguous()
            digest = hashlib.sha256(f"{tensor.dtype}|{tuple(tensor.shape)}|".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
            out[name] = digest.hexdigest()
    return out


def compare_tensors(here: dict[str, str], there: dict[str, str]) -> dict[str, int]:
    """``equal``/``differ`` counts of the tensors both sides name, and ``unmatched``: tensors
    named on one side only whose content is not among the other side's (a tied weight saved
    under the other name by another transformers version counts as matched)."""
    common = set(here) & set(there)
    equal = sum(here[n] == there[n] for n in common)
    only = [here[n] for n in set(here) - common] + [there[n] for n in set(there) - common]
    contents = set(here.values()) & set(there.values())
    return {
        "tensors": len(common),
        "equal": equal,
        "differ": len(common) - equal,
        "unmatched": sum(c not in contents for c in only),
    }


# -- here: write the pack -------------------------------------------------------------------------


def write_pack(
    out: Path, readers: dict[str, dict[str, Any]], chunk_mib: int = DEFAULT_CHUNK_MIB
) -> dict[str, Any]:
    """Write the pack of ``readers`` (registry name -> registry config) into ``out``.

    Each reader's model must be a packaged GGUF (``packaged:...``) or a ``.gguf`` path, resolved
    and converted with the project's own code (``readers/models.py``). Chunks larger than
    ``chunk_mib`` MiB are never written; an existing pack of the same content is rewritten.
    Returns the manifest (also ``out/manifest.json``).
    """
    from erag_dagster.readers.models import converted_folder, resolve_model
    from erag_dagster.readers.spec import ReaderSpec

    if chunk_mib < 1:
        raise _fault(f"--chunk-mib must be >= 1, got {chunk_mib}")
    chunk_bytes = chunk_mib << 20
    (out / "chunks").mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {
        "version": PACK_VERSION,
        "chunk_bytes": chunk_bytes,
        "readers": {},
        "site": _copy_site(out / "site"),
    }
    for name, config in readers.items():
        source = resolve_model(ReaderSpec.from_dict(config, name=name))
        if source.kind != "gguf" or source.gguf_path is None:
            raise _fault(
                f"reader {name!r}: only GGUF readers are packed (model {config.get('model')!r} "
                f"is a {source.kind})"
            )
        folder = converted_folder(source.gguf_path)
        payload = _payload(source.gguf_path, folder)
        chunks = []
        for index, start in enumerate(range(0, len(payload), chunk_bytes)):
            part = payload[start : start + chunk_bytes]
            rel = f"chunks/{name}.{index:02d}"
            (out / rel).write_bytes(part)
            chunks.append(
                {"file": rel, "bytes": len(part), "sha256": hashlib.sha256(part).hexdigest()}
            )
        manifest["readers"][name] = {
            "config": config,
            "gguf_file": source.gguf_path.name,
            "gguf_sha256": source.identity["sha256"],
            "payload_bytes": len(payload),
            "payload_sha256": hashlib.sha256(payload).hexdigest(),
            "chunks": chunks,
            "tensors_sha256": tensor_hashes(folder / "model.safetensors"),
        }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    (out / "PLAN.md").write_text(plan_text(out, manifest), encoding="utf-8")
    return manifest


def _payload(gguf_path: Path, folder: Path) -> bytes:
    """A gzip'd tar of the GGUF and the converted folder's small files (in memory: < 400 MB)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        tar.add(gguf_path, arcname=f"gguf/{gguf_path.name}")
        for name in SMALL_FILES:
            if (folder / name).is_file():
                tar.add(folder / name, arcname=f"folder/{name}")
    return buffer.getvalue()


def _copy_site(site: Path) -> list[str]:
    """Copy the installed ``gguf`` package and its dist-info (transformers checks the version
    through the metadata) into ``site``; returns the names copied."""
    import importlib.metadata as metadata

    dist = metadata.distribution("gguf")
    root = Path(str(dist.locate_file("")))
    names = sorted({Path(str(f)).parts[0] for f in dist.files or [] if str(f).count("/")})
    names = [n for n in names if n == "gguf" or n.endswith(".dist-info")]
    if site.exists():
        shutil.rmtree(site)
    for name in names:
        shutil.copytree(root / name, site / name, ignore=shutil.ignore_patterns("__pycache__"))
    return names


def device_calls(manifest: dict[str, Any]) -> list[list[tuple[str, dict[str, Any]]]]:
    """The chunks grouped into device calls, first fit in pack order: a chunk joins the first
    call whose chunks and it stay within ``chunk_bytes`` (a reader's small last chunk rides
    with an earlier call), else opens a new call. Each call: ``[(reader, chunk), ...]``."""
    calls: list[list[tuple[str, dict[str, Any]]]] = []
    for name, entry in manifest["readers"].items():
        for chunk in entry["chunks"]:
            for call in calls:
                if sum(c["bytes"] for _, c in call) + chunk["bytes"] <= manifest["chunk_bytes"]:
                    call.append((name, chunk))
                    break
            else:
                calls.append([(name, chunk)])
    return calls


def plan_text(out: Path, manifest: dict[str, Any]) -> str:
    """The device calls as Markdown (also printed by ``--pack``): :func:`device_calls`; the
    call that completes a reader runs its check (the first reader: every section; the others:
    throughput and determinism), the others ``--status``; ``--compare`` when ``out/cpu.json``
    (the CPU run) exists."""
    rel = out.as_posix().rstrip("/")
    env = "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 python3 bench/gpu_check.py"
    compare = f" --compare {rel}/cpu.json" if (out / "cpu.json").is_file() else ""
    carried = f"`{rel}/manifest.json`, `{rel}/site`" + (f", `{rel}/cpu.json`" if compare else "")
    lines = [
        "# Device calls for bench/gpu_check.py",
        "",
        f"Every call carries {carried} and its chunks. Make the calls back to back: a warm "
        "machine goes back after a short idle time and takes the carried chunks with it "
        "(`--status` names the missing ones).",
        "",
    ]
    calls = device_calls(manifest)
    names = list(manifest["readers"])
    last = {n: max(i for i, call in enumerate(calls) for r, _ in call if r == n) for n in names}
    for i, call in enumerate(calls):
        files = ", ".join(f"`{rel}/{c['file']}`" for _, c in call)
        mib = sum(c["bytes"] for _, c in call) / 2**20
        runs = []
        for name in [n for n in names if last[n] == i]:
            sections = "" if name == names[0] else " --sections throughput"
            runs.append(f"{env} --pack-dir {rel} --readers {name}{sections}{compare} "
                        f"--json $OUT/gpu_check_{name}.json")  # fmt: skip
        command = "; ".join(["nvidia-smi", *runs]) if runs else (
            f"{env} --pack-dir {rel} --readers {','.join(names)} --status"
        )  # fmt: skip
        lines.append(f"{i + 1}. carry {files} ({mib:.1f} MiB); run `{command}`")
    return "\n".join(lines) + "\n"


# -- on the device: unpack a reader ------------------------------------------------------------


def load_manifest(pack: Path) -> dict[str, Any]:
    """``pack/manifest.json``, checked for this version (an InputError names what is wrong)."""
    from erag_dagster.core.input_files import load_json

    path = pack / "manifest.json"
    if not path.is_file():
        raise _fault(f"{path}: no pack manifest (write the pack here with --pack {pack})")
    manifest = load_json(path)
    if not isinstance(manifest, dict) or manifest.get("version") != PACK_VERSION:
        raise _fault(f"{path}: not a version-{PACK_VERSION} pack manifest")
    return manifest


def chunk_status(pack: Path, entry: dict[str, Any]) -> list[str]:
    """The reader's chunk files that are missing or whose sha256 differs (empty: complete)."""
    bad = []
    for chunk in entry["chunks"]:
        path = pack / chunk["file"]
        if not path.is_file():
            bad.append(f"{chunk['file']} (missing)")
        elif path.stat().st_size != chunk["bytes"] or file_sha256(path) != chunk["sha256"]:
            bad.append(f"{chunk['file']} (sha256 differs)")
    return bad


def unpack_reader(pack: Path, name: str, manifest: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The model folder of reader ``name`` rebuilt from its chunks (once; later calls read the
    marker), and what was checked: ``gguf_sha256_ok`` and the tensor comparison with the
    converted folder of the machine that packed it (:func:`compare_tensors`)."""
    entry = manifest["readers"].get(name)
    if entry is None:
        raise _fault(
            f"{pack}/manifest.json: no reader {name!r}; packed: {sorted(manifest['readers'])}"
        )
    folder = pack / "readers" / name
    marker = folder / UNPACKED_MARKER
    if marker.is_file():
        checked = json.loads(marker.read_text(encoding="utf-8"))
        if checked.get("payload_sha256") == entry["payload_sha256"]:
            return folder, checked
    bad = chunk_status(pack, entry)
    if bad:
        raise _fault(f"pack {pack}: reader {name!r} is incomplete: {', '.join(bad)}")
    payload = b"".join((pack / c["file"]).read_bytes() for c in entry["chunks"])
    if hashlib.sha256(payload).hexdigest() != entry["payload_sha256"]:
        raise _fault(f"pack {pack}: reader {name!r}: joined chunks do not match payload_sha256")
    work = pack / "readers" / f".{name}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as tar:
        tar.extractall(work, filter="data")
    del payload
    gguf = work / "gguf" / entry["gguf_file"]
    checked: dict[str, Any] = {
        "payload_sha256": entry["payload_sha256"],
        "gguf_sha256_ok": file_sha256(gguf) == entry["gguf_sha256"],
    }
    _dequantise(gguf, work / "folder" / "model.safetensors")
    checked["tensors"] = compare_tensors(
        entry["tensors_sha256"], tensor_hashes(work / "folder" / "model.safetensors")
    )
    (work / "folder" / UNPACKED_MARKER).write_text(json.dumps(checked, indent=1), "utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(work / "folder", folder)
    shutil.rmtree(work, ignore_errors=True)
    return folder, checked


def _dequantise(gguf: Path, weights: Path) -> None:
    """Float32 weights of a GGUF, dequantised by transformers, saved as safetensors (what
    ``readers/models.py`` converts here; config and tokenizer come from the pack instead)."""
    import safetensors.torch
    import torch
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"gguf_file": gguf.name, "local_files_only": True}
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), dtype=torch.float32, **kwargs
        )
    except TypeError:  # transformers before 4.56 names it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), torch_dtype=torch.float32, **kwargs
        )
    safetensors.torch.save_model(model, str(weights))
    del model


def pack_summary(pack: Path, names: Iterable[str]) -> list[str]:
    """One line per reader: complete, or the chunks still missing (``--status``)."""
    manifest = load_manifest(pack)
    lines = []
    for name in names:
        entry = manifest["readers"].get(name)
        if entry is None:
            lines.append(f"{name}: not in the pack")
            continue
        bad = chunk_status(pack, entry)
        done = len(entry["chunks"]) - len(bad)
        state = "complete" if not bad else "missing " + ", ".join(bad)
        lines.append(f"{name}: {done}/{len(entry['chunks'])} chunks, {state}")
    return lines
