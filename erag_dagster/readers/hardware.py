"""The hardware a reader's answers depend on, for settings whose answers are not machine-free.

A float32 reader on the CPU decodes through the margin guard (:mod:`.exact_greedy`): its
answers are those of the exact-arithmetic model, whatever the CPU, so its fingerprint names no
hardware and one label store may hold answers computed on any x86-64 machine.

Every other setting — bf16 / fp16 on any device, and any dtype on a GPU (CUDA kernels choose
their reduction order by GPU model and library build; not measured here) — can give another
answer on other hardware. For those, :func:`hardware_identity` goes into the reader identity,
so the fingerprint, and with it every label key, differs per kind of machine: a shared store
keeps the answers of different hardware apart instead of mixing them under one fingerprint,
and ``audit`` shows which hardware made a label.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

__all__ = ["CPU_FLAGS", "hardware_dependent", "hardware_identity"]

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")
"""The /proc/cpuinfo flags that select different bf16/fp16 kernels in oneDNN and PyTorch."""


def hardware_dependent(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether answers in ``dtype`` on ``device`` may differ between machines (see module)."""
    return device.type != "cpu" or dtype != torch.float32


def hardware_identity(device: torch.device) -> dict[str, Any]:
    """The machine kind answers depend on: for the CPU its model name, vendor, the kernel
    flags of :data:`CPU_FLAGS` and PyTorch's dispatch level; for CUDA the GPU's name, compute
    capability and the CUDA / cuDNN builds. JSON-serialisable, stable across runs on one
    machine kind (no serial numbers, no core counts)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return {
            "device": "cuda",
            "gpu": torch.cuda.get_device_name(index),
            "compute_capability": f"{major}.{minor}",
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        }
    return {"device": device.type, **_cpu_identity()}


@functools.cache
def _cpu_identity() -> dict[str, Any]:
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key and key not in fields:
            fields[key] = value.strip()
        if not key and fields:  # end of the first processor's block
            break
    flags = set(fields.get("flags", "").split())
    return {
        "cpu": fields.get("model name", "unknown"),
        "vendor": fields.get("vendor_id", "unknown"),
        "flags": [flag for flag in CPU_FLAGS if flag in flags],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
