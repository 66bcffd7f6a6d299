from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

# The `ray_head` fixture (a real Ray head on loopback, tests/ray_head.py), for the tests that ask for it.
pytest_plugins = ["tests.ray_head"]

REPO = Path(__file__).resolve().parent.parent
CASES_DIR = REPO / "studies" / "validation" / "cases"


@pytest.fixture(autouse=True)
def _user_data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's executor store and run folders in its own data dir (executor/store_path.py), never the
    user's ~/.local/share/perfmodel; subprocesses inherit it."""
    data = tmp_path_factory.mktemp("xdg-data")
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.delenv("EXECUTOR_STORE", raising=False)
    return data


@pytest.fixture
def case_dict() -> dict:
    """A fresh copy of a valid pretrain case (Llama 3 70B on H100, TP4/PP8/VPP5)."""
    return copy.deepcopy(yaml.safe_load((CASES_DIR / "mbridge-h100-sxm-llama3-70b-fp8.yaml").read_text()))


@pytest.fixture
def rl_case_dict() -> dict:
    return copy.deepcopy(yaml.safe_load((CASES_DIR / "miles-gb300-dsv4flash-bf16train.yaml").read_text()))


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
