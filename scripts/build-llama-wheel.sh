#!/usr/bin/env bash
# Build llama-cpp-python's wheel once per machine (it compiles llama.cpp: no wheel on PyPI) and
# print the folder that holds it, for `pip install --find-links`. Used by scripts/ensure-llama-server.sh (make test) for
# the test server with logprobs (tests/llama_server.py).
#   scripts/build-llama-wheel.sh [PYTHON]     # PYTHON defaults to .venv/bin/python
#
# Flags: GGML_NATIVE=OFF builds for x86-64-v3 (AVX2/FMA/F16C; no AVX-512, no AMX), not for this
# CPU: the native build segfaults in ggml's AMX matmul on a host whose CPU lists AMX (measured
# here), and a portable wheel can be cached and reused. Tests, examples, tools and the C++ server
# are off (the defaults when llama.cpp is a subproject; stated anyway); LLAVA_BUILD=OFF skips the
# multimodal library (the project serves text models only). The folder name carries a hash of
# the version and flags, so a change of either builds anew; pip's own wheel cache is not used
# (it keys on the sdist only, so it would hand back a wheel built with other flags).
set -euo pipefail
cd "$(dirname "$0")/.."
VPY="${1:-$PWD/.venv/bin/python}"
VERSION=$(sed -n "s/^llama-cpp-python==//p" constraints.txt)  # the pin lives once, in constraints.txt
FLAGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DGGML_BLAS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"
KEY=$(printf '%s %s' "$VERSION" "$FLAGS" | sha256sum | cut -c1-12)
DIR="${ERAG_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/erag-dagster/wheels}/llama-cpp-python-$KEY"
if ! ls "$DIR"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; then
  echo "setup: building llama-cpp-python $VERSION (compiles llama.cpp once per machine; ~2.5 minutes on 2 idle cores)" >&2
  mkdir -p "$DIR.tmp"
  CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$VPY" -m pip wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-python \
    -w "$DIR.tmp" "llama-cpp-python==$VERSION" >&2  # stdout carries only the folder
  rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
fi
echo "$DIR"
