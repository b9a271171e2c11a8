"""TransformersOptions: the keys only ``backend: transformers`` reads (the default backend).

Beyond :class:`~erag_dagster.readers.options.LocalWeightsOptions` (``gguf_file``,
``revision``, ``allow_download``, ``dtype``): ``share_prefix`` (``true``, ``false`` or
``auto``, the default: on in float32; :mod:`.prefix_sharing`) and ``stop_at_line_end``
(``true``: stop a row once its answer is final; :mod:`.stopping`). Neither is
hashed into the fingerprint. Light: imports no torch (the reader does,
:mod:`.transformers_reader`).
"""

from __future__ import annotations

from dataclasses import dataclass

from erag_dagster.core.errors import InputError
from erag_dagster.readers.options import LocalWeightsOptions

__all__ = ["TransformersOptions"]


@dataclass(frozen=True)
class TransformersOptions(LocalWeightsOptions):
    """Options of the in-process transformers reader (see the module docstring)."""

    share_prefix: bool | str = "auto"
    stop_at_line_end: bool = True

    def validate(self, where: str, model: str) -> None:
        if self.share_prefix not in (True, False, "auto"):
            raise InputError(f"{where}: share_prefix must be true, false or auto")
        super().validate(where, model)
