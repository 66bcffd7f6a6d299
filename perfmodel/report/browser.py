"""The headless browser the report's PNG export (kaleido) and its rendering tests drive: Debian's chromium, any
Chrome on PATH, or Playwright's Chromium, which installs without root (`python -m playwright install chromium`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
PLAYWRIGHT_GLOBS = ("chromium-*/chrome-linux*/chrome", "chromium_headless_shell-*/chrome-linux*/headless_shell")
HOW_TO_GET = ("as root: apt-get install -y chromium (scripts/install-test-deps.sh does); without root: "
              "pip install playwright && python -m playwright install chromium; or set BROWSER_PATH=/path/to/chrome")


def _playwright_dirs() -> list[Path]:
    env = os.environ.get("PLAYWRIGHT_BROWSERS_PATH")
    return [Path(env)] if env else [Path.home() / ".cache" / "ms-playwright"]


def find_browser() -> str | None:
    """BROWSER_PATH, else a Chrome/Chromium on PATH, else Playwright's newest Chromium; None when there is none."""
    given = os.environ.get("BROWSER_PATH")
    if given:
        return given
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    for root in _playwright_dirs():
        for pattern in PLAYWRIGHT_GLOBS:
            hits = sorted(root.glob(pattern))
            if hits:
                return str(hits[-1])
    return None
