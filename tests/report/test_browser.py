"""The report in a real browser: headless Chromium renders every figure with no JavaScript error and no network,
and kaleido exports the figures as PNGs (through the same Chromium). Slow: each starts a browser."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from perfmodel.report.capacity import build_report

pytestmark = pytest.mark.slow

N_FIGURES = 5  # breakdown, capacity, memory, timeline, measured


def _chromium() -> str:
    from perfmodel.report.browser import HOW_TO_GET, find_browser

    path = find_browser()
    if not path:
        pytest.fail(f"no headless browser for the report tests: {HOW_TO_GET}")
    return path


def screenshot(html: Path, png: Path, profile: Path, size: str = "1400,4000") -> list[str]:
    """Render `html` in headless Chromium, save a screenshot, return Chromium's log lines (console included)."""
    cmd = [_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", f"--screenshot={png}",
           f"--window-size={size}", html.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env={**os.environ, "HOME": str(profile)})
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 0, "\n".join(lines[-20:])
    return lines


def console_errors(lines: list[str]) -> list[str]:
    bad = ("Uncaught", "ERROR:CONSOLE", "Failed to load resource", "net::ERR_")
    return [ln for ln in lines if "CONSOLE" in ln and any(b in ln for b in bad)]


def png_pixels(path: Path) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("L"), dtype=np.float32)


def assert_not_blank(path: Path) -> None:
    px = png_pixels(path)
    assert px.std() > 10, f"{path} looks blank (pixel std {px.std():.1f})"
    assert (px < 200).mean() > 0.02, f"{path} has almost nothing drawn"


def test_chromium_renders_the_report(report_html: Path, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    lines = screenshot(report_html, png, tmp_path / "profile")
    assert png.is_file() and png.stat().st_size > 50_000
    assert_not_blank(png)
    assert not console_errors(lines), "\n".join(console_errors(lines))
    drawn = [ln for ln in lines if "perfmodel-report: drew" in ln]
    assert drawn and f"drew {N_FIGURES} of {N_FIGURES} figures" in drawn[0], drawn
    keep = os.environ.get("PERFMODEL_REPORT_SCREENSHOT")
    if keep:  # to look at the page: PERFMODEL_REPORT_SCREENSHOT=/tmp/report.png pytest -m slow tests/report
        shutil.copy(png, keep)


def test_console_check_catches_a_broken_page(tmp_path: Path) -> None:
    """The check above would pass vacuously if Chromium stopped logging console errors: make sure it does."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><p>x</p><script>undefinedFunction();</script></body></html>")
    lines = screenshot(page, tmp_path / "broken.png", tmp_path / "profile", size="400,300")
    assert any("Uncaught" in ln for ln in console_errors(lines)), lines[-10:]


def test_kaleido_exports_every_figure(sweep_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("kaleido", reason="PNG export needs kaleido >= 1.0 (pip install 'perfmodel[report]')")
    pngs = tmp_path / "png"
    build_report(sweep_dir, out_html=tmp_path / "r.html", png_dir=pngs)
    names = sorted(p.name for p in pngs.glob("*.png"))
    assert names == ["2_breakdown.png", "3_capacity.png", "4_memory.png", "5_timeline.png", "6_measured.png"]
    for p in pngs.glob("*.png"):
        head = p.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        width = struct.unpack(">I", head[16:20])[0]
        assert width == 1200
        assert_not_blank(p)
