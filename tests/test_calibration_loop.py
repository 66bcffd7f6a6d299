"""The measure -> calibrate -> predict loop end to end, small: two real local runs (SGLang + megatron-core GRPO on
this machine), exported, the `local-cpu` stack calibrated on one, the other predicted (studies/calibration-loop is
the full version)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

LOOP = REPO / "studies" / "calibration-loop"
pytestmark = [pytest.mark.slow]


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
    for pid, src, resp in (("t-fit", "loop-pp1-fp8-b256-r3", 3), ("t-held", "loop-pp1-bf16-b512-r6", 5)):
        plan = yaml.safe_load((LOOP / "plans" / f"{src}.yaml").read_text())
        plan["id"] = pid
        plan["rl"]["prompts_per_step"] = 16
        plan["train"]["global_batch"] = 16 * plan["rl"]["samples_per_prompt"]
        plan["rl"]["response_tokens"] = {"max": resp}
        (plans / f"{pid}.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    assert measure.main(["--plans", str(plans), "--out", str(measured), "--steps", "3"]) == 0
    for pid in ("t-fit", "t-held"):
        case = yaml.safe_load((measured / f"{pid}.yaml").read_text())
        assert case["stack"] == "local-cpu" and case["rl"]["response_tokens"]["mean"] > 0
    result = run.loop(measured, ("t-fit",), ("t-held",), tmp_path / "out")
    overlay = yaml.safe_load((tmp_path / "out" / "calibration.yaml").read_text())
    assert [f["file"] for f in overlay["provenance"]["fitted_on"]] == [str(measured / "t-fit.yaml")]  # never t-held
    assert overlay["stack"] == "local-cpu" and overlay["stack_params"]
    held = [r for r in result["rows"] if r["role"] == "held out"]
    assert {r["metric"] for r in held} >= {"rollout_time_s", "train_time_s", "step_time_s"}
    zero = sum(abs(r["zero_shot_error"]) for r in held) / len(held)
    calibrated = sum(abs(r["calibrated_error"]) for r in held) / len(held)
    assert calibrated < zero, (zero, calibrated)  # one run already buys accuracy on another
    step = next(r for r in held if r["metric"] == "step_time_s")
    assert abs(math.log(step["calibrated_s"] / step["measured_s"])) < math.log(1.3)
