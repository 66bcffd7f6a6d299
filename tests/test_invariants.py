"""Physical invariants are enforced where results are made: an impossible result raises, names the invariant and
the layout, and the sweep counts it instead of ranking it. Issue #10's repro (GPT-3 175B on 4,096 A100s,
TP4/PP32/VPP2 with 48 micro-batches) is refused with Megatron's rule, and its sweep ranks no impossible plan."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from perfmodel.cost.memory.training import MemoryBreakdown
from perfmodel.errors import InputError
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import build_scenario
from perfmodel.invariants import PhysicsError, check_rl_step
from perfmodel.predict import simulate_run
from perfmodel.sim.train import TrainStepResult
from tests.conftest import REPO

DATA = REPO / "tests" / "data"
REPRO = DATA / "gpt3-175b-a100-interleaved.yaml"
PEAK = 312e12


def _train(**over: object) -> TrainStepResult:
    kw: dict = dict(step_time_s=10.0, pipeline_s=9.0, microbatches=8, tokens=1000, gpus=8,
                    breakdown_s={"forward": 3.0, "backward": 6.0, "bubble": 1.0}, bubble_s_per_stage=[1.0, 1.0],
                    exposed_comm_s={}, model_flops=8 * 10.0 * PEAK * 0.5, hardware_flops=8 * 10.0 * PEAK * 0.6,
                    peak_flops_per_gpu=PEAK, events=10, where="TP1/PP2/DP4 1f1b")
    kw.update(over)
    return TrainStepResult(**kw)


def test_a_sane_result_passes() -> None:
    assert _train().mfu == pytest.approx(0.5)


@pytest.mark.parametrize("over,invariant", [
    ({"bubble_s_per_stage": [1.0, -1.06]}, "bubble >= 0"),
    ({"model_flops": 8 * 10.0 * PEAK * 7.8, "hardware_flops": 8 * 10.0 * PEAK * 7.8}, "MFU <= 1"),
    ({"hardware_flops": 8 * 10.0 * PEAK * 1.2}, "hardware FLOP utilization <= 1"),
    ({"breakdown_s": {"forward": 3.0, "backward": 8.0, "bubble": 0.0}}, "parts sum to the step"),
    ({"breakdown_s": {"forward": 11.0, "backward": -1.0, "bubble": 0.0}}, "parts >= 0"),
    ({"step_time_s": float("nan")}, "finite"),
    ({"step_time_s": 0.0, "breakdown_s": {}}, "step > 0"),
])
def test_an_impossible_training_result_is_refused(over: dict, invariant: str) -> None:
    with pytest.raises(PhysicsError) as err:
        _train(**over)
    assert err.value.invariant.startswith(invariant)
    assert "TP1/PP2/DP4" in str(err.value)  # the layout is named


def test_rl_phases_must_sum_to_the_step() -> None:
    parts = {"rollout": 5.0, "train_compute": 4.0, "other": 1.0}
    check_rl_step("x", 10.0, {"rollout": 5.0}, parts, {})
    with pytest.raises(PhysicsError, match="sum to the step"):
        check_rl_step("x", 10.0, {"rollout": 5.0}, parts | {"weight_sync": 2.0}, {})
    with pytest.raises(PhysicsError, match="idle GPU time"):
        check_rl_step("x", 10.0, {"rollout": 5.0}, parts, {"rollout_tail": -3.0})


def test_memory_parts_must_be_non_negative() -> None:
    kw = dict(pipeline_rank=0, weights_bytes=1e9, grads_bytes=1e9, optimizer_bytes=1e9, optimizer_host_bytes=0.0,
              activations_bytes=1e9, comm_buffers_bytes=0.0, margin_bytes=0.0, total_bytes=4e9, capacity_bytes=8e10,
              host_capacity_bytes=1e11, fits=True)
    MemoryBreakdown(**kw)
    with pytest.raises(PhysicsError, match="memory parts"):
        MemoryBreakdown(**(kw | {"activations_bytes": -1.0}))


def test_the_repro_is_refused_with_megatrons_rule() -> None:
    run = RunSpec.model_validate(yaml.safe_load(REPRO.read_text()))
    with pytest.raises(InputError) as err:
        build_scenario(run, source=str(REPRO))
    assert err.value.field == "train.global_batch"
    assert "multiple of pp = 32" in err.value.message and "microbatch_group_size_per_vp_stage: 48" in err.value.message


def test_the_repro_with_megatrons_group_size_gives_a_sane_step() -> None:
    data = yaml.safe_load(REPRO.read_text())
    data["train"]["microbatch_group_size_per_vp_stage"] = 48
    res = simulate_run(RunSpec.model_validate(data))
    t = res.train
    assert 0.1 < t.mfu < 0.6
    assert min(t.bubble_s_per_stage) > 0
    # every micro-batch is in the warm-up (2 x 31 + 48 > 96 chunk passes): no better than GPipe, bubble ~ 1/3
    assert 0.2 < t.breakdown_s["bubble"] / t.step_time_s < 0.5


def test_a_sweep_of_the_repro_job_ranks_no_impossible_plan(tmp_path: Path) -> None:
    from perfmodel.cli import main

    out = tmp_path / "sweep"
    assert main(["sweep", str(DATA / "gpt3-175b-a100-sweep.yaml"), "--no-report", "--out", str(out),
                 "--workers", "1", "--no-cache"]) == 0
    import csv

    rows = list(csv.DictReader((out / "candidates.csv").open()))
    ranked = [r for r in rows if r["rank"]]
    assert ranked, "some plan must be ranked"
    # 175B parameters, 6 FLOPs per parameter and token (and more with full recompute): no plan may beat the
    # A100's BF16 peak on 4,096 GPUs
    tokens = 1536 * 2048
    floor_s = 6 * 174.6e9 * tokens / (4096 * PEAK)
    for r in ranked:
        assert float(r["step_time_s"]) > floor_s, r["label"]
        if int(r["vpp"]) > 1:
            m = 1536 // (4096 // (int(r["tp"]) * int(r["pp"])))
            assert m % int(r["pp"]) == 0, f"{r['label']}: {m} micro-batches on pp {r['pp']} ranked"
    refused = [r for r in rows if r["status"] == "pruned" and "megatron-core" in r["reason"]]
    assert any(r["label"].startswith("512n TP4/PP32/VPP2") for r in refused)
    assert not [r for r in rows if r["status"] == "invalid"]
