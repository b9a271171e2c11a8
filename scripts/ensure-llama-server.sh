#!/usr/bin/env bash
# llama.cpp's OpenAI-compatible server (llama-cpp-python[server]) for the tests that need a real
# server with logprobs (tests/llama_server.py). Only `make test` calls this: `make run` never
# needs it. PyPI has no wheel for it, so scripts/build-llama-wheel.sh compiles one once per
# machine (~2.5 minutes on 2 idle cores; cached outside the repo) and pip installs it from there.
# Idempotent: returns at once when the pinned version is installed.
#
#   scripts/ensure-llama-server.sh [PYTHON]               build (if needed) and install, now
#   scripts/ensure-llama-server.sh --background [PYTHON]  the same in the background, at the
#        lowest CPU priority and one compile job, so `make test` goes on with the default run
#        and the other tests; the outcome goes to .venv/.llama-server-build ("building", then
#        "ok" or "failed: ..."), which tests/llama_server.py waits on before the llama.cpp tests
set -euo pipefail
cd "$(dirname "$0")/.."
STATUS="$PWD/.venv/.llama-server-build"
status() { printf '%s\n' "$1" > "$STATUS.tmp" && mv "$STATUS.tmp" "$STATUS"; }
BACKGROUND=0
if [[ "${1:-}" == "--background" ]]; then BACKGROUND=1; shift; fi
VPY="${1:-$PWD/.venv/bin/python}"
VERSION=$(sed -n 's/^llama-cpp-python==//p' constraints.txt)
if [[ "$("$VPY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null)" == "$VERSION" ]]; then
  status ok
  exit 0
fi
if [[ $BACKGROUND == 1 ]]; then
  echo "setup: llama.cpp's test server is built in the background (log: .venv/llama-server-build.log)" >&2
  status building
  (
    if nice -n 19 env CMAKE_BUILD_PARALLEL_LEVEL=1 "$0" "$VPY" > "$PWD/.venv/llama-server-build.log" 2>&1; then
      status ok
    else
      status "failed: scripts/ensure-llama-server.sh exited non-zero (log: .venv/llama-server-build.log)"
    fi
  ) < /dev/null > /dev/null 2>&1 &
  exit 0
fi
WHEELS=$(scripts/build-llama-wheel.sh "$VPY")
"$VPY" -m pip install -q -c constraints.txt --find-links "$WHEELS" "llama-cpp-python[server]==$VERSION"
status ok
