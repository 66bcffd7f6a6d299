"""PNG export of report figures through kaleido (>= 1.0), which drives a local Chrome / Chromium.

Kaleido drives the browser perfmodel.report.browser finds (Debian's chromium, a Chrome on PATH, Playwright's).
One browser session renders all figures: starting it costs seconds, each image then takes a fraction of that.
MathJax is off, so nothing is fetched from a CDN; plotly.js comes from the installed plotly package.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

from perfmodel.errors import InputError

PNG_WIDTH = 1200


def export_pngs(figures: dict[str, Any], png_dir: str | Path, width: int = PNG_WIDTH,
                timeout_s: float = 120.0) -> list[Path]:
    """Write each figure as `png_dir/<name>.png` in one kaleido session. Returns the paths written."""
    out = Path(png_dir)
    if out.exists() and not out.is_dir():
        raise InputError(str(out), "--png", "is a file; give a folder for the PNG images")
    try:
        import kaleido
    except ImportError:
        raise InputError(str(out), "--png", "PNG export needs kaleido >= 1.0: pip install 'kaleido>=1.0' "
                         "(or pip install 'perfmodel[report]')") from None
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    paths = []
    for name, fig in figures.items():
        p = out / f"{name}.png"
        height = int(fig.layout.height or 500)
        jobs.append({"fig": fig, "path": str(p), "opts": {"format": "png", "width": width, "height": height}})
        paths.append(p)
    if not jobs:
        return []

    from perfmodel.report.browser import HOW_TO_GET, find_browser

    browser = find_browser()
    if browser and not os.environ.get("BROWSER_PATH"):
        os.environ["BROWSER_PATH"] = browser  # kaleido looks at PATH and BROWSER_PATH only

    async def render() -> None:
        async with kaleido.Kaleido(n=1, mathjax=False, timeout=timeout_s) as k:
            await k.write_fig_from_object(jobs, cancel_on_error=True)

    try:
        _run(render())
    except Exception as err:
        if type(err).__name__ == "ChromeNotFoundError":
            raise InputError(str(out), "--png", f"kaleido found no Chrome/Chromium: {HOW_TO_GET}") from None
        raise
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise RuntimeError(f"kaleido did not write {', '.join(map(str, missing))}")
    return paths


def _run(coro: Any) -> None:
    """asyncio.run, or in a helper thread when an event loop already runs here (Jupyter)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coro)
        return
    err: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coro)
        except BaseException as e:
            err.append(e)

    t = threading.Thread(target=target, name="kaleido-export")
    t.start()
    t.join()
    if err:
        raise err[0]
