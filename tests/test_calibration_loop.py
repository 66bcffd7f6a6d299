"""The measure -> calibrate -> predict loop end to end, small: two real local runs (SGLang + megatron-core GRPO on
this machine), exported, the `local-cpu` stack calibrated on one, the other predicted (studies/calibration-loop is
the full version)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, host_busy

LOOP = REPO / "studies" / "calibration-loop"
pytestmark = [pytest.mark.slow, pytest.mark.timing]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, LOOP / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@pytest.mark.skipif(not (_have("sglang") and _have("megatron.core")), reason="needs sglang + megatron-core")
@pytest.mark.timeout(900)
def test_calibrate_on_one_real_run_predict_another(tmp_path: Path) -> None:
    measure, run = _module("measure"), _module("run")
    plans, measured = tmp_path / "plans", tmp_path / "measured"
    plans.mkdir()
    measured.mkdir()
    # the same rollout (16 prompts x 8 samples, 4 tokens), trained PP1 vs PP2: one run informs the rollout's
    # per-request, per-step and per-token host costs only together, so the held-out run shares its rollout shape
    # (studies/calibration-loop separates them with three runs)
    for pid, src, resp in (("t-fit", "loop-pp1-fp8-b256-r3", 4), ("t-held", "loop-pp2-fp8-b512-r3", 4)):
        plan = yaml.safe_load((LOOP / "plans" / f"{src}.yaml").read_text())
        plan["id"] = pid
        plan["rl"]["prompts_per_step"] = 16
        plan["train"]["global_batch"] = 16 * plan["rl"]["samples_per_prompt"]
        plan["rl"]["response_tokens"] = {"max": resp}
        (plans / f"{pid}.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    busy = host_busy()
    assert measure.main(["--plans", str(plans), "--out", str(measured), "--steps", "5"]) == 0  # median of 4
    busy = busy or host_busy()
    for pid in ("t-fit", "t-held"):
        case = yaml.safe_load((measured / f"{pid}.yaml").read_text())
        assert case["stack"] == "local-cpu" and case["rl"]["response_tokens"]["mean"] > 0
    result = run.loop(measured, ("t-fit",), ("t-held",), tmp_path / "out")
    overlay = yaml.safe_load((tmp_path / "out" / "calibration.yaml").read_text())
    assert [f["file"] for f in overlay["provenance"]["fitted_on"]] == [str(measured / "t-fit.yaml")]  # never t-held
    assert overlay["stack"] == "local-cpu" and overlay["stack_params"]
    rows = {(r["role"], r["metric"]): r for r in result["rows"]}
    table = [(r["run"], r["metric"], r["measured_s"], r["zero_shot_error"], r["calibrated_error"])
             for r in result["rows"]]
    assert {m for role, m in rows if role == "held out"} >= {"rollout_time_s", "train_time_s", "step_time_s"}
    # the fit reproduces its own run: measured 0.1-2.3% in 5 runs with two other busy processes on the 2 cores,
    # 11.8% once in a CI run on a busy machine
    assert abs(rows["calibration", "step_time_s"]["calibrated_error"]) < 0.15, table
    # the rollout's host costs, which first principles miss (SGLang's Python on the cores that compute), carry
    # over from one run to another layout. Runs this small spread by +-25% from one launch to the next on a quiet
    # shared 2-core machine (the held-out plan's training phase measured 0.60, 0.68 and 0.77 s in three launches),
    # and a clean-clone CI run of 2026-12-03 (right after the PPO test, the busy probe calling the host quiet) missed
    # the held-out step by x1.65 where four runs of this test alone that hour passed: so the step is held to a
    # factor of 2, as the PPO test's step is (a prediction in the right range), and no phase is compared finer:
    # studies/calibration-loop does, on 3 + 3 runs. With two other busy processes on the cores the two runs are
    # slowed unequally (held-out step -51% to +240% in 5 tries): no margin says anything there, so a busy host
    # checks the fit and not the carry-over
    if busy:
        pytest.skip(f"held-out accuracy not checked: the host was busy ({busy}); the fit was: {table}")
    held_rollout = rows["held out", "rollout_time_s"]
    assert abs(held_rollout["calibrated_error"]) < abs(held_rollout["zero_shot_error"]), table
    assert abs(math.log(1 + rows["held out", "step_time_s"]["calibrated_error"])) < math.log(2.0), table
