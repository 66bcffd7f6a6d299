"""Fixtures of the report tests: one sweep folder and its report, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from .sweep_folder import write_sweep


@pytest.fixture(scope="session")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sweep(tmp_path_factory.mktemp("sweep") / "out")


@pytest.fixture(scope="session")
def report_html(sweep_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from perfmodel.report.capacity import build_report

    return build_report(sweep_dir, out_html=tmp_path_factory.mktemp("html") / "report.html")
