#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine, saying what it does as it goes: a headless browser
# for the report tests (Debian's chromium as root; without root, Playwright's Chromium in ~/.cache), then the
# package with its test, exec (SGLang + torch, megatron-core), report (kaleido) and ray extras. The first run
# downloads about 11 GB (5 minutes on a fast link); later runs check and return in seconds (pip is skipped when
# scripts/deps_installed.py finds everything in place).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
step() { printf '[install %3ds] %s\n' "$((SECONDS - t0))" "$*"; }

browser() { python3 - <<'EOF' 2>/dev/null || true
import importlib.util, sys
sys.path.insert(0, ".")
spec = importlib.util.spec_from_file_location("browser", "perfmodel/report/browser.py")
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
print(mod.find_browser() or "")
EOF
}

found="$(browser)"
if [ -n "$found" ]; then
  step "1/2 headless browser for the report tests: $found"
elif [ "$(id -u)" = "0" ]; then
  step "1/2 headless browser: apt-get install chromium (Debian, about 300 MB)"
  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; the report rendering tests will fail" >&2
else
  step "1/2 headless browser: not root, so Playwright's Chromium into ~/.cache/ms-playwright (about 150 MB)"
  if ! (python3 -m pip install --progress-bar off -q playwright && python3 -m playwright install chromium); then
    echo "warning: no headless browser; the report rendering tests will fail. Run one of:" >&2
    echo "  sudo apt-get install -y chromium" >&2
    echo "  python3 -m pip install playwright && python3 -m playwright install chromium" >&2
    echo "  export BROWSER_PATH=/path/to/chrome" >&2
  fi
fi
[ -n "$(browser)" ] && step "    browser: $(browser)"

status=0
python3 scripts/deps_installed.py || status=$?
if [ "$status" = 0 ]; then
  step "2/2 Python packages: every one installed at a version that fits, perfmodel editable from this clone: \
pip skipped (scripts/deps_installed.py)"
elif [ "$status" = 3 ]; then
  step "2/2 Python packages: every dependency in place; perfmodel itself, editable from this clone (pip --no-deps)"
  python3 -m pip install --progress-bar off -q --no-deps -e .
else
  step "2/2 Python packages: perfmodel[test,exec,report,ray,kernels] (SGLang 0.5.23 with torch 2.14.1 about 10 GB, \
megatron-core, Ray, kaleido, aiconfigurator-core); pip names each package as it fetches it"
  progress=()
  [ -t 1 ] || progress=(--progress-bar off)  # logs: one line per package, no bars
  python3 -m pip install "${progress[@]}" -e ".[test,exec,report,ray,kernels]" \
    | { grep --line-buffered -vE "^Requirement already satisfied" || true; }  # pipefail: pip's failure stops here
fi
versions="$(python3 -c 'import importlib.metadata as m; print(", ".join(d + " " + m.version(d) for d in
  ("perfmodel", "torch", "sglang", "megatron-core", "ray", "kaleido")))')"
step "done: $versions"
