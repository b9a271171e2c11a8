"""A real OpenAI-compatible server *with* logprobs for tests: llama.cpp's, on loopback.

``python -m llama_cpp.server`` (``llama-cpp-python[server]``: llama.cpp behind FastAPI +
uvicorn) serves the packaged SmolLM2 GGUF file itself
(:func:`~erag_dagster.readers.models.packaged_gguf_path`) on 127.0.0.1 and a free port, one
thread, seed 0, under the model id :data:`MODEL_ID`. It answers ``/v1/models``,
``/v1/chat/completions`` and ``/v1/completions``, decodes greedily at ``temperature: 0``, reports
``usage`` and returns ``logprobs`` (chat: ``top_logprobs`` up to 20; completions: ``logprobs``
= the number of top tokens), so P("yes") can be read from it.

``llama-cpp-python`` compiles llama.cpp when installed (no wheel on PyPI); ``make test`` builds it
in the background while the other tests run, and the tests that use this server wait for that
build and are skipped, with the reason, where it is not installed (:func:`llama_missing`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.openai_server import LoopbackServer

MODEL_ID = "smollm2-135m-instruct"
#: Where ``scripts/ensure-llama-server.sh --background`` (``make test``) writes how its build
#: went: ``building``, then ``ok`` or ``failed: ...``.
BUILD_STATUS = Path(__file__).resolve().parents[1] / ".venv" / ".llama-server-build"
BUILD_WAIT_S = 1800  # a failure bound only: the build takes ~2.5 minutes on 2 idle cores


def llama_missing() -> str | None:
    """Why the llama.cpp server tests cannot run here, or None when they can.

    While ``make test``'s background build is still going (:data:`BUILD_STATUS` says
    ``building``), wait for it: the event is the status file changing, the time only a bound."""
    deadline = time.monotonic() + BUILD_WAIT_S
    while BUILD_STATUS.is_file() and BUILD_STATUS.read_text().strip() == "building":
        if time.monotonic() > deadline:
            return f"llama.cpp's background build still running after {BUILD_WAIT_S} s"
        time.sleep(1)
    importlib.invalidate_caches()  # the build may have installed the package since start-up
    if all(importlib.util.find_spec(m) for m in ("llama_cpp", "uvicorn", "sse_starlette")):
        return None
    status = BUILD_STATUS.read_text().strip() if BUILD_STATUS.is_file() else "not built"
    return (
        f"llama-cpp-python[server] is not installed ({status}; it compiles llama.cpp on "
        "install: scripts/ensure-llama-server.sh)"
    )


class LlamaCppServer(LoopbackServer):
    """``python -m llama_cpp.server --model GGUF`` on loopback: 1 thread, seed 0, 2048-token
    context, model id :data:`MODEL_ID`."""

    name = "llama_cpp.server"

    def __init__(self, gguf: Path, log_path: Path, port: int | None = None) -> None:
        super().__init__(log_path, port)
        self.gguf = gguf

    @property
    def model(self) -> str:
        return MODEL_ID

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "llama_cpp.server", "--model", str(self.gguf),
            "--model_alias", MODEL_ID, "--host", "127.0.0.1", "--port", str(self.port),
            "--n_threads", "1", "--n_threads_batch", "1", "--seed", "0", "--n_ctx", "2048",
        ]  # fmt: skip


@contextlib.contextmanager
def running_llama_server(root: Path, port: int | None = None) -> Iterator[LlamaCppServer]:
    """A started :class:`LlamaCppServer` serving the packaged SmolLM2 GGUF; stopped after."""
    from erag_dagster.readers.models import packaged_gguf_path

    server = LlamaCppServer(packaged_gguf_path(MODEL_ID), root / "llama-server.log", port)
    with server:
        yield server
