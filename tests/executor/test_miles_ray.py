"""The miles backend's submission path against a real Ray head on loopback.

A real single-node Ray cluster (127.0.0.1 only, temp dir of its own, every port picked free) runs a job whose entry
point is a stand-in for Miles' `train_async.py`: a tiny script in the test's temp dir that prints Miles-style
`perf N: {...}` lines for two steps (a test double of the training script, not of Ray). The test checks that
`run_miles` submits it with the Job SDK, follows the log, and stores two step measurements.

Teardown stops exactly the processes this test started (the `ray start --block` process and its descendants, by
pid); it never runs `ray stop`, which kills every Ray process on the machine by name.
"""

from __future__ import annotations

import copy
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
pytest.importorskip("ray.job_submission")
psutil = pytest.importorskip("psutil")

from executor.backends.miles import run_miles  # noqa: E402
from perfmodel.inputs.loading import parse  # noqa: E402
from perfmodel.inputs.plan import Plan  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "seed-mi355x-dsv4.yaml"

FAKE_TRAIN_ASYNC = textwrap.dedent('''
    """Test double of Miles' train_async.py: logs two steps the way Miles does, then exits."""
    import logging
    import sys
    import time

    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="[%(asctime)s.%(msecs)03d stand-in] %(filename)s:%(lineno)d - %(message)s")
    log = logging.getLogger("miles")
    assert "--rollout-batch-size" in sys.argv and "--num-layers" in sys.argv, sys.argv
    for step in range(2):
        log.info("perf %d: %s", step, {"perf/rollout_time": 70.0 + step, "perf/tokens_per_gpu_per_sec": 338.0,
                                       "rollout/response_len/mean": 3000.0})
        time.sleep(0.2)
        log.info("step %d: %s", step, {"train/train_rollout_logprob_abs_diff": 0.09, "train/loss": -0.01})
        log.info("perf %d: %s", step, {"perf/update_weights_time": 60.0, "perf/log_probs_time": 76.0,
                                       "perf/actor_train_time": 100.0 + step, "perf/train_wait_time": 150.0,
                                       "perf/train_time": 180.0, "perf/step_time": 330.0})
    print("done", flush=True)
''')


class ListStore:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add_step(self, *, run_id: str, plan_id: str, backend: str, measurement: dict[str, Any]) -> None:
        self.rows.append({"run_id": run_id, "plan_id": plan_id, "backend": backend, **measurement})


def test_submit_follow_and_parse_on_real_ray(ray_head, tmp_path):
    address = ray_head.dashboard
    miles_root = tmp_path / "miles"
    miles_root.mkdir()
    (miles_root / "train_async.py").write_text(FAKE_TRAIN_ASYNC)
    d = copy.deepcopy(yaml.safe_load(SEED.read_text()))
    d["executor"]["options"].update(miles_root=str(miles_root), python=sys.executable,
                                    model_args=["--num-layers", "43"])
    plan = parse(Plan, d, str(SEED))
    store = ListStore()
    t0 = time.monotonic()
    result = run_miles(plan, str(SEED), ray_address=address, store=store, run_id=f"ray-test-{os.getpid()}",
                       log_path=tmp_path / "job.log", timeout_s=90, environ={})
    assert result.status == "SUCCEEDED", (result.status, result.message, (tmp_path / "job.log").read_text()[-2000:])
    assert time.monotonic() - t0 < 60
    assert [r["step"] for r in store.rows] == [0, 1]
    first, second = store.rows
    assert first["rollout_time_s"] == 70.0 and second["rollout_time_s"] == 71.0
    assert first["train_time_s"] == 100.0 and second["train_time_s"] == 101.0
    assert first["log_probs_time_s"] == 76.0 and first["weight_update_time_s"] == 60.0
    assert first["step_time_s"] == 330.0 and first["train_rollout_logprob_abs_diff"] == 0.09
    assert all(r["complete"] and r["backend"] == "miles" and r["plan_id"] == "seed-mi355x-dsv4" for r in store.rows)
    assert "done" in (tmp_path / "job.log").read_text()


FAKE_HUNG_TRAIN = textwrap.dedent('''
    """Test double of a Miles job whose collective hangs after one step: logs it, then waits silently."""
    import os
    import sys
    import time

    print("perf 0: {'perf/rollout_time': 70.0, 'perf/update_weights_time': 60.0, 'perf/log_probs_time': 76.0, "
          "'perf/actor_train_time': 100.0, 'perf/step_time': 330.0}", flush=True)
    open(sys.argv[-1], "w").write(str(os.getpid()))  # where the test finds the hung process
    time.sleep(3600)
''')


@pytest.mark.timeout(240)
def test_a_hung_job_is_stalled_and_stopped_on_real_ray(ray_head, tmp_path):
    """The watchdog (floor 30 s: Ray starts the job's runtime env in several seconds, more on a busy machine) stops
    the silent job through Ray: the job ends STOPPED, its hung process is gone, the step it logged is kept."""
    miles_root = tmp_path / "miles"
    miles_root.mkdir()
    (miles_root / "train_async.py").write_text(FAKE_HUNG_TRAIN)
    pid_file = tmp_path / "pid"
    d = copy.deepcopy(yaml.safe_load(SEED.read_text()))
    d["executor"]["options"].update(miles_root=str(miles_root), python=sys.executable, model_args=[],
                                    extra_args=[str(pid_file)], watchdog_floor_s=30.0, watchdog_multiple=1e-6)
    plan = parse(Plan, d, str(SEED))
    store = ListStore()
    t0 = time.monotonic()
    result = run_miles(plan, str(SEED), ray_address=ray_head.dashboard, store=store,
                       run_id=f"ray-hang-{os.getpid()}", log_path=tmp_path / "job.log", timeout_s=170, environ={})
    assert result.status == "STALLED", (result.status, (tmp_path / "job.log").read_text()[-2000:])
    assert time.monotonic() - t0 < 150
    assert result.stall is not None and result.stall["job_status_after_stop"] == "STOPPED"
    log = (tmp_path / "job.log").read_text()
    assert [r["step"] for r in store.rows] == [0] and result.stall["steps_done"] == 1, log
    hung = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while psutil.pid_exists(hung) and psutil.Process(hung).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the hung job's process survived the stop"
        time.sleep(0.5)
