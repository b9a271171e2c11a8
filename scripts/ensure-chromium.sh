#!/usr/bin/env bash
# The browser test drives Debian's chromium (Playwright uses it as executable_path; no browser
# download). Install it when missing and we can (root + apt); otherwise say what to do.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing Debian's chromium for the browser test" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
else
  echo "setup: chromium not found; install Debian's 'chromium' package for the browser test" >&2
fi
