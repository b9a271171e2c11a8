"""Convert the packaged readers once, at set-up, so the first run does not pay for it.

``scripts/setup.sh`` (so ``make run`` and ``make test``) calls ``python -m
erag_dagster.readers.prepare``: every packaged GGUF (:data:`~.models.PACKAGED_MODELS`,
:data:`~.models.PACKAGED_CHUNKED`) is joined (chunked ones) and converted to its safetensors
folder in the model cache, exactly what the first load of the reader would do
(:func:`~.models.converted_folder`; measured here: SmolLM2 ~15 s, Gemma 3 270M ~35 s, once per
machine). Idempotent: with every folder complete it returns in about a second and prints
nothing. A packaged reader whose wheel is not installed is skipped with one line (the run
that needs it says how to install it).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from erag_dagster.core.errors import InputError
from erag_dagster.readers.models import (
    PACKAGED_CHUNKED,
    PACKAGED_MODELS,
    conversion_pending,
    converted_folder,
    packaged_gguf_path,
)

__all__ = ["prepare_packaged_models"]


def prepare_packaged_models(log: Callable[[str], None] = print) -> dict[str, Path]:
    """The converted folder of every installed packaged reader, converting the missing ones
    (one ``log`` line each, with its time in seconds)."""
    folders: dict[str, Path] = {}
    for name in [*PACKAGED_MODELS, *PACKAGED_CHUNKED]:
        try:
            gguf = packaged_gguf_path(name)
        except InputError as exc:
            log(f"setup: packaged reader {name} skipped: {exc}")
            continue
        pending = conversion_pending(gguf)
        started = time.perf_counter()
        folders[name] = converted_folder(gguf)
        if pending:
            log(
                f"setup: packaged reader {name} converted once to safetensors "
                f"({time.perf_counter() - started:.0f} s): {folders[name]}"
            )
    return folders


def main() -> int:
    prepare_packaged_models(lambda line: print(line, file=sys.stderr))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
