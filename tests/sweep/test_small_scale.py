"""A plan at small scale (perfmodel.sweep.small_scale.py), the settling measurement's cheapest candidate: its fewest
data-parallel replicas, every replica's work unchanged, priced by the sweep's own evaluation."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from perfmodel.sweep.small_scale import replica_runs


def _pretrain(gpus: int, tp: int, pp: int, global_batch: int) -> dict:
    return {"kind": "pretrain", "hardware": "h100-sxm", "gpus": gpus, "model": {"id": "llama3-8b"},
            "train": {"seq_len": 4096, "global_batch": global_batch, "micro_batch": 1,
                      "layout": {"tp": tp, "pp": pp, "cp": 1, "ep": 1, "dp": gpus // (tp * pp)}}}


def _rl(placement: str, actor: int, rollout: int, engine: int, prompts: int = 32) -> dict:
    run = _pretrain(actor if placement == "colocated" else actor + rollout, 1, 16, prompts * 8)
    run["kind"] = "rl"
    run["rl"] = {"placement": placement, "actor_gpus": actor, "rollout_gpus": rollout, "prompts_per_step": prompts,
                 "samples_per_prompt": 8, "rollout": {"engine_gpus": engine}}
    run["train"]["layout"]["dp"] = actor // 16
    return run


def test_each_smaller_replica_count_keeps_every_replicas_work():
    run = _pretrain(64, 4, 2, 24)  # dp 8
    small = replica_runs(run)
    assert [r["train"]["layout"]["dp"] for r in small] == [1, 2, 4]
    assert [(r["gpus"], r["train"]["global_batch"]) for r in small] == [(8, 3), (16, 6), (32, 12)]
    assert run == _pretrain(64, 4, 2, 24)  # the plan itself untouched
    assert [r["train"]["layout"]["dp"] for r in replica_runs(_pretrain(64, 4, 2, 20))] == [2, 4]  # 20 / 8 not whole
    assert replica_runs(_pretrain(8, 4, 2, 24)) == []  # one replica: nothing smaller


def test_disaggregated_engines_shrink_with_the_replicas_and_colocated_ones_with_the_trainer():
    one = replica_runs(_rl("disaggregated", 32, 96, 8))[0]  # dp 2 -> 1
    assert one["rl"]["actor_gpus"] == 16 and one["rl"]["rollout_gpus"] == 48 and one["gpus"] == 64
    assert one["rl"]["prompts_per_step"] == 16 and one["train"]["global_batch"] == 128
    lone = replica_runs(_rl("disaggregated", 32, 8, 8))[0]
    assert lone["rl"]["rollout_gpus"] == 8  # never fewer than one engine
    co = replica_runs(_rl("colocated", 64, 64, 8))  # dp 4
    assert [(r["gpus"], r["rl"]["rollout_gpus"]) for r in co] == [(16, 16), (32, 32)]
    assert replica_runs(_rl("colocated", 64, 64, 32))[0]["gpus"] == 32  # 16 GPUs hold no 32-GPU engine


def test_a_sweeps_smallest_version_is_a_plan_the_executor_takes_and_is_kept_only_when_named(tmp_path: Path,
                                                                                            monkeypatch):
    from perfmodel.api import sweep
    from perfmodel.inputs.plan import load_plan
    from perfmodel.sweep.small_scale import smallest_version
    from tests.conftest import REPO

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    spec = REPO / "tests" / "data" / "gpt3-175b-a100-sweep.yaml"
    ranking = sweep(spec, out=tmp_path / "s", top=3, workers=1, report=False)
    settle = json.loads((tmp_path / "s" / "summary.json").read_text())["settle"]
    small = [c for c in settle["candidates"] if "small_scale" in c]
    assert len(small) == 1 and small[0]["gpu_s"] < min(c["gpu_s"] for c in settle["candidates"][:-1]) / 10
    named = {settle["plan"]} | ({settle["cheaper"]["plan"]} if "cheaper" in settle else set())
    assert {str(p) for p in (tmp_path / "s" / "plans").iterdir()} == named | {t["plan_path"] for t in ranking.top}

    by_index = ranking.outcome.rows.candidates
    version = smallest_version(ranking.top, by_index, _hardware(spec), tmp_path, None, spec.name, None)
    plan = load_plan(version["plan_path"])
    full = copy.deepcopy(by_index[next(t for t in ranking.top if t["rank"] == version["rank"])["index"]].run)
    mp = plan.train.layout.tp * plan.train.layout.pp
    assert plan.gpus == version["gpus"] == mp * version["replicas"] < full["gpus"]
    assert plan.train.global_batch * version["of"] == full["train"]["global_batch"] * version["replicas"]
    assert plan.id.startswith("settle-") and plan.predicted.step_time_s == version["step_time_s"]


def _hardware(spec: Path):
    from perfmodel.inputs.hardware import load_hardware
    from perfmodel.sweep.spec import load_sweep_spec

    return load_hardware(load_sweep_spec(str(spec)).hardware)


def test_one_engines_rollout_carries_the_load_each_engine_carries_in_the_plan():
    from perfmodel.sweep.small_scale import one_engine_run

    run = _rl("colocated", 64, 64, 8, prompts=32)  # 8 engines
    run["rl"]["samples_per_prompt"] = 8
    run["rl"]["weight_update"] = {"mode": "ipc"}
    one = one_engine_run(run)
    assert one["rl"]["placement"] == "disaggregated" and one["rl"]["rollout_gpus"] == 8 and not one["rl"]["async"]
    assert one["rl"]["prompts_per_step"] == 4 and one["gpus"] == 64 + 8
    assert one["rl"]["weight_update"]["mode"] == "broadcast"  # never run: the launch trains nothing
    assert one["train"]["global_batch"] == 32  # no more than the 4 x 8 samples
    assert run["rl"]["placement"] == "colocated"  # the plan itself untouched
    assert one_engine_run(_pretrain(64, 4, 2, 24)) is None


def test_a_sweeps_rollout_on_one_engine_is_a_miles_rollout_only_plan(tmp_path: Path, monkeypatch):
    from executor.backends.miles import build_miles_launch
    from perfmodel.api import sweep
    from perfmodel.inputs.plan import load_plan
    from perfmodel.sweep.small_scale import one_engine_version
    from tests.sweep.test_sweep import small_spec

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    spec = small_spec()
    ranking = sweep(spec, out=tmp_path / "s", top=3, workers=1, report=False)
    settle = ranking.settle
    engine = [c for c in settle["candidates"] if "engines" in c.get("small_scale", "")]
    assert len(engine) == 1 and engine[0]["gpu_s"] < min(c["gpu_s"] for c in settle["candidates"][:3])
    by_index = ranking.outcome.rows.candidates
    hw = _hardware_of(spec.hardware)
    version = one_engine_version(ranking.top, by_index, hw, tmp_path, None, "s.yaml", None)
    plan = load_plan(version["plan_path"])
    full = by_index[next(t for t in ranking.top if t["rank"] == version["rank"])["index"]].run
    assert plan.executor.backend == "miles" and plan.executor.options["debug_rollout_only"] is True
    assert plan.rl.rollout_gpus == full["rl"]["rollout"]["engine_gpus"] == version["gpus"]
    assert plan.predicted.rollout_time_s == version["step_time_s"]
    assert version["parameter"] == "stack.rollout_compute_scale"

    launch = build_miles_launch(plan, version["plan_path"])
    assert launch.has("--debug-rollout-only") and launch.num_nodes == 1 and launch.entry_point == "train.py"
    # the loop: its rollout measured 1.3x the price (what export writes), calibrated as the settle line says
    fitted, again = _settle_loop(plan, spec, tmp_path, "rollout_time_s", 1.3 * version["step_time_s"],
                                 "rollout_compute_scale")
    assert 1.2 < fitted < 1.45 and again.top[0]["rollout_time_s"] > 1.2 * ranking.top[0]["rollout_time_s"]
    assert one_engine_version(ranking.top, by_index, hw, tmp_path, None, "s.yaml", {"backend": "local"}) is None


def _hardware_of(hw_id: str):
    from perfmodel.inputs.hardware import load_hardware

    return load_hardware(hw_id)


def test_a_weight_update_alone_keeps_the_mechanism_at_the_fewest_replicas_and_one_engine():
    from perfmodel.sweep.small_scale import UPDATE_RESPONSE_TOKENS, weight_update_run

    run = _rl("disaggregated", 32, 96, 8)  # TP1 PP16, dp 2; 12 engines
    run["rl"]["weight_update"] = {"mode": "p2p", "bucket_mb": 512}
    run["rl"]["async"], run["rl"]["off_policy_steps"] = True, 2
    run["rl"]["response_tokens"] = {"max": 4096, "mean": 1500}
    one = weight_update_run(run)
    assert one["rl"]["actor_gpus"] == 16 and one["rl"]["rollout_gpus"] == 8 and one["gpus"] == 24
    assert one["train"]["layout"]["dp"] == 1 and one["rl"]["weight_update"] == {"mode": "p2p", "bucket_mb": 512}
    assert not one["rl"]["async"] and "off_policy_steps" not in one["rl"]
    assert one["rl"]["response_tokens"] == {"max": UPDATE_RESPONSE_TOKENS, "mean": UPDATE_RESPONSE_TOKENS}
    # the fewest samples that give each of the 16 stages whole micro-batches: 2 prompts x 8 samples
    assert one["rl"]["prompts_per_step"] == 2 and one["train"]["global_batch"] == 16
    assert run["rl"]["async"] and run["rl"]["rollout_gpus"] == 96  # the plan itself untouched
    co = weight_update_run(_rl("colocated", 64, 64, 8))
    assert co["gpus"] == co["rl"]["actor_gpus"] == co["rl"]["rollout_gpus"] == 16  # the engine on the replica's GPUs
    assert weight_update_run(_rl("colocated", 64, 64, 32)) is None  # 16 GPUs hold no 32-GPU engine
    assert weight_update_run(_pretrain(64, 4, 2, 24)) is None
    ep = _rl("disaggregated", 64, 16, 8)  # TP1 PP16 dp 4, EP4 x ETP1: the experts span 4 replicas
    ep["train"]["layout"] |= {"ep": 4, "etp": 1}
    four = weight_update_run(ep)
    assert four["train"]["layout"]["dp"] == 4 and four["rl"]["actor_gpus"] == 64 and four["gpus"] == 72
    assert four["train"]["global_batch"] % (16 * 4) == 0  # whole micro-batches on every stage of every replica
    ep["train"]["layout"] |= {"ep": 8, "dp": 4}
    assert weight_update_run(ep) is None  # 8 expert ranks need 8 of the plan's 4 replicas


def test_a_sweeps_weight_update_alone_is_a_plan_whose_record_calibrates_the_update(tmp_path: Path, monkeypatch):
    from perfmodel.api import sweep
    from perfmodel.inputs.plan import load_plan
    from perfmodel.sweep.small_scale import weight_update_version
    from tests.sweep.test_sweep import small_spec

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    spec = small_spec()
    ranking = sweep(spec, out=tmp_path / "s", top=3, workers=1, report=False)
    update = [c for c in ranking.settle["candidates"] if "weight update" in c.get("small_scale", "")]
    assert len(update) == 1 and update[0]["gpu_s"] < min(c["gpu_s"] for c in ranking.settle["candidates"][:3])
    by_index = ranking.outcome.rows.candidates
    version = weight_update_version(ranking.top, by_index, _hardware_of(spec.hardware), tmp_path, None, "s.yaml",
                                    None)
    plan = load_plan(version["plan_path"])
    assert plan.id.startswith("settle-") and plan.gpus == version["gpus"]
    assert plan.predicted.weight_update_time_s == version["update_s"] > 0
    assert plan.predicted.rollout_time_s < 0.1 * version["update_s"]  # a token-sized rollout around the update
    assert version["parameter"] == "stack.weight_update_time_scale"
    # the loop: its update measured 1.5x the price, calibrated as the settle line says, the sweep priced again
    fitted, again = _settle_loop(plan, spec, tmp_path, "weight_update_time_s", 1.5 * version["update_s"],
                                 "weight_update_time_scale")
    assert 1.35 < fitted < 1.6 and again.top[0]["weight_update_time_s"] > 1.3 * ranking.top[0]["weight_update_time_s"]


def _settle_loop(plan, spec, tmp_path: Path, metric: str, measured: float, param: str):
    """The settling launch's record as `executor export` writes it (the plan, `metric` measured), `perfmodel
    calibrate --params param` on it, the sweep again with the overlay: (the fitted multiplier, the new ranking)."""
    from perfmodel.api import calibrate, sweep

    case = plan.model_dump(mode="json", by_alias=True, exclude_none=True,
                           include={"kind", "hardware", "stack", "stack_options", "gpus", "model", "train", "rl"})
    case |= {"id": "settle", "source": "test", "measured": {metric: measured}}
    (tmp_path / "settle.yaml").write_text(yaml.safe_dump(case))
    cal = calibrate([tmp_path / "settle.yaml"], params=[param], out=tmp_path / "cal.yaml")
    again = sweep(spec, out=tmp_path / "s2", top=3, workers=1, report=False, calibration=tmp_path / "cal.yaml")
    return cal.stack_params[param], again
