"""A real OpenAI-compatible server for tests and benches: ``transformers serve`` on loopback.

``transformers serve`` (the Hugging Face transformers CLI, FastAPI + uvicorn) is a server people
deploy; here it serves the packaged SmolLM2 reader from its converted safetensors folder, on
127.0.0.1 and a free port, with one torch thread. It answers ``/v1/models``,
``/v1/chat/completions`` and ``/v1/completions``, honours ``temperature: 0`` (greedy) and
``seed``, reports ``usage``, and returns no ``logprobs`` (so P("yes") is unavailable through it).

Also here: :class:`RateLimitProxy`, a loopback HTTP proxy in front of it that answers some
requests with HTTP 429 and ``Retry-After`` (the one case where the issue allows a stand-in), and
counts what it forwarded.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STARTUP_SECONDS = 180.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def served_folder(root: Path) -> Path:
    """A folder ``transformers serve`` can load: the packaged SmolLM2 GGUF's converted folder
    (:func:`~erag_dagster.readers.models.converted_folder`, shared with the in-process reader),
    linked file by file, with ``architectures`` added to its config (the GGUF-derived config
    lacks it and the server needs it to pick the model class)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from erag_dagster.readers.models import converted_folder, packaged_gguf_path

    source = converted_folder(packaged_gguf_path("smollm2-135m-instruct"))
    target = root / "smollm2-served"
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        link = target / item.name
        if item.name != "config.json" and not link.exists():
            link.symlink_to(item)
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config["architectures"] = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config["model_type"]]]
    (target / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return target


class LoopbackServer:
    """A server process on 127.0.0.1:``port`` (a free one by default) in its own process group,
    its output (one access-log line per request) in ``log_path``; ready when ``GET /v1/models``
    answers 200. Subclasses give the command line (:meth:`command`) and the model id."""

    name = "server"

    def __init__(self, log_path: Path, port: int | None = None) -> None:
        self.log_path = log_path
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> LoopbackServer:
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        log = open(self.log_path, "ab")  # noqa: SIM115 (handed to the child)
        self.process = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name} exited: {tail}")
            if self.ready():
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {STARTUP_SECONDS:.0f} s")

    def ready(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/v1/models")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the server process group (TERM, then KILL after 15 s)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)

    def requests(self, path: str = "/v1/chat/completions") -> int:
        """Requests to ``path`` the server logged (uvicorn's access log), any status."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return sum(1 for line in text.splitlines() if f'"POST {path} ' in line)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TransformersServer(LoopbackServer):
    """``transformers serve FOLDER`` on loopback, CPU, fp32, one torch thread."""

    name = "transformers serve"

    def __init__(self, folder: Path, log_path: Path, port: int | None = None) -> None:
        super().__init__(log_path, port)
        self.folder = folder

    @property
    def model(self) -> str:
        """The model id the server reports (the folder path it was started with)."""
        return str(self.folder)

    def command(self) -> list[str]:
        return [
            sys.executable, "-c",
            "import sys, torch; torch.set_num_threads(1); "
            "from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; "
            "sys.exit(main())",
            "serve", str(self.folder), "--host", "127.0.0.1", "--port", str(self.port),
            "--device", "cpu", "--dtype", "float32", "--log-level", "info",
        ]  # fmt: skip


class RateLimitProxy:
    """Loopback proxy to ``upstream`` (``host:port``): every ``every``-th POST is answered
    ``429`` with ``Retry-After: retry_after`` instead of being forwarded."""

    def __init__(self, upstream_port: int, every: int = 3, retry_after: str = "1") -> None:
        self.upstream_port, self.every, self.retry_after = upstream_port, every, retry_after
        self.posts = 0
        self.refused = 0
        self.forwarded = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _relay(self, body: bytes | None) -> None:
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=300)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            def do_GET(self) -> None:
                self._relay(None)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with proxy._lock:
                    proxy.posts += 1
                    refuse = proxy.posts % proxy.every == 0
                    if refuse:
                        proxy.refused += 1
                    else:
                        proxy.forwarded += 1
                if refuse:
                    payload = b'{"error": {"message": "rate limited", "type": "rate_limit"}}'
                    self.send_response(429)
                    self.send_header("Retry-After", proxy.retry_after)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self._relay(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> RateLimitProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def running_server(root: Path, port: int | None = None) -> Iterator[TransformersServer]:
    """A started :class:`TransformersServer` serving SmolLM2 from ``root``; stopped after."""
    server = TransformersServer(served_folder(root), root / "server.log", port)
    with server:
        yield server
