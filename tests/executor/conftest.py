"""What the executor's integration tests share."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

DEFAULT_PLAN_STEPS = 25


@pytest.fixture(scope="session")
def default_plan_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """One launch of the default plan (examples/local-grpo.yaml, 25 steps) for the whole session: (the finished
    launch, its store, its run folder). The default plan's launch checks, the long-run study's and the PPO test's
    GRPO calibration run all read it: a launch costs about 25 s of start-up on two cores, whatever it then runs."""
    from tests.executor.test_local_launch import _launch

    return _launch("local-grpo.yaml", DEFAULT_PLAN_STEPS, tmp_path_factory.mktemp("default-plan"))
