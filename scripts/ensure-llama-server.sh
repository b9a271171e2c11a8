#!/usr/bin/env bash
# llama.cpp's OpenAI-compatible server (llama-cpp-python[server]) for the tests that need a real
# server with logprobs (tests/llama_server.py). Only `make test` calls this: `make run` never
# needs it. PyPI has no wheel for it, so scripts/build-llama-wheel.sh compiles one once per
# machine (~7 CPU-minutes; cached outside the repo) and pip installs it from there. Idempotent:
# returns at once when the pinned version is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
VPY="${1:-$PWD/.venv/bin/python}"
VERSION=$(sed -n 's/^llama-cpp-python==//p' constraints.txt)
if [[ "$("$VPY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null)" == "$VERSION" ]]; then
  exit 0
fi
WHEELS=$(scripts/build-llama-wheel.sh "$VPY")
"$VPY" -m pip install -q -c constraints.txt --find-links "$WHEELS" "llama-cpp-python[server]==$VERSION"
