from __future__ import annotations

import copy
import functools
from collections import Counter
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
    user's ~/.local/share/perfmodel, and its own sweep result cache; subprocesses inherit them."""
    data = tmp_path_factory.mktemp("xdg-data")
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(data / "sweep-cache"))  # never the user's, never shared
    monkeypatch.delenv("EXECUTOR_STORE", raising=False)
    return data


@pytest.fixture
def case_dict() -> dict:
    """A fresh copy of a valid pretrain case (Llama 3 70B on H100, TP4/PP8/VPP5)."""
    return copy.deepcopy(yaml.safe_load((CASES_DIR / "mbridge-h100-sxm-llama3-70b-fp8.yaml").read_text()))


@pytest.fixture
def rl_case_dict() -> dict:
    return copy.deepcopy(yaml.safe_load((CASES_DIR / "miles-gb300-dsv4flash-bf16train.yaml").read_text()))


@functools.cache
def validation_report(folder: Path) -> dict:
    """`run_validation` of one case folder, once per test session: the prediction snapshot and the development-set
    bands read the same 174 runs (about a minute to simulate here). Callers only read it."""
    from perfmodel.validation import run_validation

    return run_validation([str(folder)])


def host_busy() -> str:
    """Why this host is too busy for timings of one real run to carry over to another ('' when it is not): a 0.3 s
    busy loop got under 3/4 of a core (other processes hold the cores; the load average would still count the
    suite's last test). Tests that compare two real runs' timings call it before and after their runs."""
    import time

    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < 0.3:
        pass
    share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    return f"a busy loop got {share:.0%} of a core" if share < 0.75 else ""


def sweep_rows(outcome: object, folder: Path) -> list[dict]:
    """Every row of an evaluated sweep, typed as the capacity report reads them: the outcome keeps only the top
    rows in memory (perfmodel/sweep/collect.py), so the CSV is written to `folder` and read back."""
    from perfmodel.report.sweep_data import read_candidates

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "candidates.csv"
    outcome.rows.write_csv(path)  # type: ignore[attr-defined]
    return read_candidates(path)


def hardware_file_without(tmp_path: Path, hw_id: str, field: str) -> str:
    """A copy of a shipped hardware profile with one optional field's line left out (a user's older file)."""
    text = (REPO / "hwprofiles" / f"{hw_id}.yaml").read_text()
    path = tmp_path / f"my-{hw_id}.yaml"
    path.write_text("\n".join(line for line in text.splitlines() if f"{field}:" not in line) + "\n")
    return str(path)


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _fuzz_counts() -> Counter:
    """This process's counted-fuzz tallies (tests/test_fuzz_counted.py COUNTS), empty when it ran none."""
    import sys

    module = next((m for name, m in sys.modules.items() if name.endswith("test_fuzz_counted")), None)
    return Counter(getattr(module, "COUNTS", None) or {})


_WORKER_FUZZ_COUNTS: Counter = Counter()  # under pytest-xdist: what each worker sent back when it finished


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that compare the timings of real runs go last, on a host that has finished everything else (the sort
    is stable: every other test keeps its place)."""
    items.sort(key=lambda item: item.get_closest_marker("timing") is not None)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its fuzz tallies to the controller (which prints the summary)."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["fuzz_counts"] = [[k[0], k[1], v] for k, v in _fuzz_counts().items()]


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, called on the controller as each worker ends
def pytest_testnodedown(node: object, error: object) -> None:
    for kind, outcome, count in getattr(node, "workeroutput", {}).get("fuzz_counts", []):
        _WORKER_FUZZ_COUNTS[kind, outcome] += count


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many bad inputs the counted fuzz tried, per kind (tests/test_fuzz_counted.py), summed over xdist
    workers when the suite ran on several."""
    counts = _fuzz_counts() + _WORKER_FUZZ_COUNTS
    if not counts:
        return
    kinds = sorted({k for k, _ in counts})
    terminalreporter.write_sep("-", "bad inputs tried (rejected with one line, exit 2 / accepted and simulated)")
    for kind in kinds:
        terminalreporter.write_line(f"{kind:22} {counts[kind, 'rejected']:6,} rejected {counts[kind, 'accepted']:6,} "
                                    "accepted")
    failed = [r for r in terminalreporter.stats.get("failed", []) if "test_fuzz_counted" in r.nodeid]
    terminalreporter.write_line(f"{'total':22} {sum(counts.values()):6,} inputs, "
                                f"{len(failed)} kinds with a traceback or a wrong answer")
