#!/usr/bin/env bash
# The two ends of pyproject.toml's Dagster range, each in a throwaway venv (issue 33 item 2):
#   scripts/check_dagster_range.sh            # 1.12.13 (oldest) and the newest 1.13.x, + no torch
#   ENDS="1.12.22 1.13.29" scripts/check_dagster_range.sh
#
# Each venv gets the committed HEAD of this checkout (git archive: not a half-edited tree), its
# [local] extra and the Dagster release under test, from PyPI as a user's pip resolves them:
# only torch is held, at constraints.txt's CPU wheel (the lock's other pins belong to one
# Dagster release: 1.12's dagster-graphql needs gql < 4, the lock has 4.x). Then, per venv:
# the definitions load (`dagster definitions validate`), the CLI answers, and the data assets of
# the embedded sample materialise through erag-dagster's own step job. A third venv installs the
# newest end WITHOUT [local] (a team whose reader is served): torch must be absent and the same
# checks must pass (ONLY_NO_TORCH=1: that venv alone). One line per venv; exit status 1 when any check failed. Not run by make test
# (minutes of pip); its result is recorded in docs/setup.md.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PY="${PYTHON:-python3.11}"
ENDS="${ENDS:-1.12.13 newest-1.13}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/erag-dagster-range.XXXXXX")"
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$WORK"' EXIT

git archive --format=tar --prefix=src/ HEAD | tar -x -C "$WORK"
grep -i '^torch==' constraints.txt > "$WORK/constraints.txt"
mkdir -p "$WORK/home"
cp deploy/local/dagster.yaml "$WORK/home/dagster.yaml"

# What each venv runs once installed: versions, no private Dagster API reached at load, the
# sample's corpus/queries/qrels materialised in an ephemeral instance.
cat > "$WORK/check.py" <<'EOF'
import importlib.util
import sys

import dagster as dg

import erag_dagster.orchestration.definitions as definitions
from erag_dagster.orchestration.pipeline import step_job

want_torch = sys.argv[1] == "with-torch"
has_torch = importlib.util.find_spec("torch") is not None
assert has_torch == want_torch, f"torch installed: {has_torch}, expected {want_torch}"
defs = definitions.defs
keys = [dg.AssetKey(name) for name in ("corpus", "queries", "qrels")]
job = step_job(list(defs.assets or []), dict(defs.resources or {}), keys)
with dg.DagsterInstance.ephemeral() as instance:
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    assert result.success, "corpus/queries/qrels did not materialise"
    done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert done == {"corpus", "queries", "qrels"}, done
print(f"dagster {dg.__version__}, python {sys.version.split()[0]}, torch {has_torch}")
EOF

status=0
check_venv() {  # name, extra ("[local]" or ""), torch flag, pip requirement(s) for dagster
  local name="$1" extra="$2" torch="$3"
  shift 3
  local venv="$WORK/$name" log="$WORK/$name.log" start=$SECONDS
  "$PY" -m venv "$venv"
  if ! "$venv/bin/pip" install -q --no-compile -c "$WORK/constraints.txt" \
      "$WORK/src$extra" "$@" > "$log" 2>&1; then
    echo "$name: FAIL install ($((SECONDS - start)) s): $(grep -m1 -i error "$log")"
    status=1
    return
  fi
  local installed=$((SECONDS - start))
  local env=(env DAGSTER_HOME="$WORK/home" ERAG_STORAGE="$WORK/storage-$name" HF_HUB_OFFLINE=1)
  if ! (cd "$WORK" && "${env[@]}" "$venv/bin/dagster" definitions validate \
      -m erag_dagster.orchestration.definitions >> "$log" 2>&1); then
    echo "$name: FAIL dagster definitions validate (see $log)"; status=1; return
  fi
  if ! (cd "$WORK" && "${env[@]}" "$venv/bin/erag-dagster" --help > /dev/null 2>> "$log"); then
    echo "$name: FAIL erag-dagster --help (see $log)"; status=1; return
  fi
  local line
  if ! line=$(cd "$WORK" && "${env[@]}" "$venv/bin/python" check.py "$torch" 2>> "$log"); then
    echo "$name: FAIL load + materialise (see $log): $(tail -n 1 "$log")"; status=1; return
  fi
  echo "$name: ok: $line; install ${installed} s, all $((SECONDS - start)) s"
}

for end in $([[ -n "${ONLY_NO_TORCH:-}" ]] || echo "$ENDS"); do
  if [[ "$end" == newest-* ]]; then
    minor="${end#newest-}"
    spec=("dagster>=${minor},<${minor%.*}.$(( ${minor#*.} + 1 ))")
    spec+=("dagster-webserver>=${minor},<${minor%.*}.$(( ${minor#*.} + 1 ))")
  else
    spec=("dagster==$end" "dagster-webserver==$end")
  fi
  check_venv "dagster-$end" "[local]" with-torch "${spec[@]}"
done
last="${ENDS##* }"
if [[ "$last" == newest-* ]]; then
  minor="${last#newest-}"
  spec=("dagster>=${minor},<${minor%.*}.$(( ${minor#*.} + 1 ))"
        "dagster-webserver>=${minor},<${minor%.*}.$(( ${minor#*.} + 1 ))")
else
  spec=("dagster==$last" "dagster-webserver==$last")
fi
check_venv "dagster-$last-no-torch" "" without-torch "${spec[@]}"
exit "$status"
