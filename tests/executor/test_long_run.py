"""A long local GRPO run of the default plan (25 steps in CI, the study's 100 measured in its README), summarized by
studies/long-run/run.py, the study's own code: it finishes, no step stalls, the reward ends at least where it
began, the log-prob gap is recorded every step, and memory is flat (peak RSS of the trainer and of SGLang's
processes at the last step within 10% of step 10's). The same launch is the default plan's launch test
(test_local_launch.check_default_plan_launch) and the PPO test's GRPO calibration run: one launch for all three
(tests/executor/conftest.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.executor.conftest import DEFAULT_PLAN_STEPS
from tests.executor.test_local_launch import REPO, check_default_plan_launch, needs_stack

pytestmark = [pytest.mark.slow]


def _study() -> object:
    spec = importlib.util.spec_from_file_location("long_run", REPO / "studies" / "long-run" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_stack
@pytest.mark.timeout(900)
def test_a_long_run_is_flat_in_memory_without_a_stall(default_plan_run, tmp_path: Path) -> None:
    steps = DEFAULT_PLAN_STEPS
    res, store_path, run_dir = default_plan_run
    check_default_plan_launch(res, store_path, run_dir, steps)
    study = _study()
    assert study.main(["--summarize-only", "--store", str(store_path), "--out", str(tmp_path)]) == 0
    import json

    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["status"] == "finished" and s["steps"] == steps
    assert s["gap_recorded_every_step"] and 0 < s["gap_last_tenth"] < 0.1
    assert s["steps_over_10x_median"] == 0, s  # no stalled step
    assert s["reward_last_tenth"] >= s["reward_first_tenth"], s  # still rising or flat
    for who in ("trainer", "engine"):
        at10, last = s[f"{who}_rss_gib_step10"], s[f"{who}_rss_gib_last"]
        assert last <= 1.10 * at10, (who, at10, last)
    assert (tmp_path / "curves.csv").read_text().count("\n") == steps + 1
