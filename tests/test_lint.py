"""The linter configured in pyproject.toml ([tool.ruff]) passes on the whole tree."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.conftest import REPO


def test_ruff_passes() -> None:
    cmd = [shutil.which("ruff") or sys.executable, "check", str(REPO)]
    if cmd[0] == sys.executable:
        cmd.insert(1, "-m")
        cmd.insert(2, "ruff")
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
