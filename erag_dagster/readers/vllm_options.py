"""VLLMOptions: the keys only ``backend: vllm`` reads (vLLM's offline engine, :mod:`.vllm_reader`).

Beyond :class:`~erag_dagster.readers.options.LocalWeightsOptions` (``gguf_file``,
``revision``, ``allow_download``, ``dtype``): ``tensor_parallel_size`` (GPUs per engine, >= 1;
default 1), ``gpu_memory_utilization`` (the fraction of GPU memory the engine may take, in
(0, 1]; default 0.9) and ``max_model_len`` (context length in tokens, >= 16; ``null``: the
model's). All three go to ``vllm.LLM``; none is hashed. Light: imports neither torch nor vllm.
"""

from __future__ import annotations

from dataclasses import dataclass

from erag_dagster.core.errors import InputError
from erag_dagster.readers.options import LocalWeightsOptions, check_int

__all__ = ["VLLMOptions"]


@dataclass(frozen=True)
class VLLMOptions(LocalWeightsOptions):
    """Options of the vLLM reader (see the module docstring)."""

    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None

    def validate(self, where: str, model: str) -> None:
        super().validate(where, model)
        check_int(where, "tensor_parallel_size", self.tensor_parallel_size, 1)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise InputError(
                f"{where}: gpu_memory_utilization must be in (0, 1], "
                f"got {self.gpu_memory_utilization!r}"
            )
        if self.max_model_len is not None and self.max_model_len < 16:
            raise InputError(f"{where}: max_model_len must be >= 16 or null")
