"""`executor export`: a stored run becomes a validation case that perfmodel loads and scores."""

from __future__ import annotations

import time
from pathlib import Path

from executor.cli import main
from executor.measurement_sink import MeasurementSink
from executor.records import RunRecord, environment, plan_hash
from executor.store import Store
from perfmodel.inputs.case import load_case
from perfmodel.validation import run_validation

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "examples" / "local-grpo.yaml"


def _store_with_run(path: Path, plan: Path = PLAN, env: dict | None = None) -> None:
    store = Store(path)
    store.create_run(RunRecord(run_id="local-grpo-x", plan_id="local-grpo", plan_hash=plan_hash(plan),
                               plan_path=str(plan), backend="local", hardware="cpu-local", layout="TP1/PP1/DP1",
                               run_dir=str(path.parent), started_at=time.time(), environment=env or environment(),
                               predicted={}))
    sink = MeasurementSink(store)  # any backend's steps land in the same table
    for step, rollout in enumerate((9.0, 0.4, 0.5, 0.3)):
        sink.add_step(run_id="local-grpo-x", plan_id="local-grpo", backend="local",
                      measurement={"step": step, "rollout_time_s": rollout, "train_time_s": 0.3,
                                   "step_time_s": rollout + 0.4})
    store.close()


def test_export_writes_a_loadable_case(tmp_path, capsys):
    store = tmp_path / "s.sqlite"
    _store_with_run(store)
    out = tmp_path / "case.yaml"
    assert main(["export", "local-grpo", "--store", str(store), "--out", str(out)]) == 0
    case = load_case(out)
    assert case.id == "local-grpo-x" and case.hardware == "cpu-local" and case.stack == "local-cpu"
    assert case.measured.rollout_time_s == 0.4  # median of the steps after the warm-up step
    assert case.measured.train_time_s == 0.3
    report = run_validation([str(out)])
    assert {r["metric"] for r in report["cases"]} == {"rollout_time_s", "train_time_s", "step_time_s"}
    assert all(r["predicted"] is not None for r in report["cases"])


def test_export_refuses_a_changed_plan(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.read_text())
    store = tmp_path / "s.sqlite"
    _store_with_run(store, plan)
    plan.write_text(PLAN.read_text() + "\n# edited\n")
    rc = main(["export", "local", "--store", str(store), "--out", str(tmp_path / "c.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and "changed since the run" in err and err.count("\n") == 1


def test_export_keeps_the_stack_and_the_lengths_the_run_measured():
    """The case names the plan's stack, and its prompt and response lengths are what the steps measured (a plan
    states a cap; a random-init policy writes to it), so calibration is not fitted to a wrong workload."""
    from executor.export import _measured_lengths

    rl = {"prompts_per_step": 32, "samples_per_prompt": 8, "prompt_tokens_mean": 5.0, "response_tokens": {"max": 3}}
    kept = [{"tokens": {"prompt": 1280, "response": r, "train": 2048}} for r in (762, 765, 700)]
    _measured_lengths(rl, kept)
    assert rl["prompt_tokens_mean"] == 5.0
    assert rl["response_tokens"] == {"max": 3, "mean": round(762 / 256, 4)}
    rl_over = {**rl, "response_tokens": {"max": 2}}
    _measured_lengths(rl_over, kept)
    assert rl_over["response_tokens"]["mean"] == 2  # never past the cap


def test_export_prices_the_case_on_the_host_that_ran_it(tmp_path):
    """A run records its host's matmul rates (the probe at launch); the exported case carries them as
    hardware_options and the backward's rate as stack_options, so a faster host's run is not priced with
    hwprofiles/cpu-local.yaml's slow-path numbers (and a calibration on it is not refused as faster than physics)."""
    from executor.backends.local.host_probe import case_facts
    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.predict import simulate_scenario

    store_path = tmp_path / "s.sqlite"
    probe = {"bf16_flops": {"forward": 2.0e11, "dgrad": 1.0e11, "wgrad": 4.0e11}, "torch": "x", "cpu_flags": ["amx"]}
    _store_with_run(store_path, env=environment() | {"host_probe": probe})
    out = tmp_path / "case.yaml"
    assert main(["export", "local-grpo", "--store", str(store_path), "--out", str(out)]) == 0
    case = load_case(out)
    hardware, stack = case_facts(probe, "local-grpo-x")
    assert case.hardware_options.peak_tflops_bf16 == 0.2 and "host probe" in case.hardware_options.source
    assert case.stack_options.model_extra["backward_compute_scale"] == stack["backward_compute_scale"] == 1.25
    fast = build_scenario(case)
    assert fast.hardware.peak("bf16") == 2.0e11 and fast.hardware.gemm_curve("bf16").half_flops == 5.0e6
    assert fast.stack.backward_compute_scale == 1.25
    slow = build_scenario(case.model_copy(update={"hardware_options": None, "stack_options": None}))
    assert simulate_scenario(fast).metrics()["train_time_s"] < 0.5 * simulate_scenario(slow).metrics()["train_time_s"]


def test_export_writes_the_reward_time_the_steps_measured():
    """The reward function's host time per sample is the workload's (a string compare here, not the default's
    math verifier): exported from the steps, so the rollout is not priced with 128 ms of rewards it never ran."""
    from executor.export import _measured_reward

    rl = {"prompts_per_step": 16, "samples_per_prompt": 8, "reward_host_s": 1e-3}
    _measured_reward(rl, [{"host_s": {"reward": r}} for r in (1.28e-4, 2.56e-4, 3.0e-4)])
    assert rl["reward_host_s"] == 2e-6
    untimed = {"prompts_per_step": 16, "samples_per_prompt": 8}
    _measured_reward(untimed, [{"host_s": {}}])
    assert "reward_host_s" not in untimed  # a record without the timing keeps the plan's value
