#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine: the package with its test, exec (SGLang,
# megatron-core), report (kaleido) and ray extras, and Debian's chromium for report rendering tests.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "warning: could not install chromium; report screenshot tests will fail" >&2
  else
    echo "warning: chromium missing; run: sudo apt-get install -y chromium" >&2
  fi
fi
python3 -m pip install -q -e ".[test,exec,report,ray]"
