#!/usr/bin/env bash
# The PostgreSQL tests (label store, Dagster instance) start a throwaway server from Debian's
# PostgreSQL binaries (tests/postgres_server.py). Install them when missing and we can
# (root + apt); otherwise say what to do. The tests skip with that message when it is absent.
set -euo pipefail
for dir in /usr/lib/postgresql/*/bin; do
  [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]] && exit 0
done
if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing Debian's PostgreSQL server for the store tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
else
  echo "setup: PostgreSQL server binaries not found; install Debian's 'postgresql' package" >&2
fi
