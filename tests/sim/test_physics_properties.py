"""Property tests over random layouts, schedules, micro-batch counts, precisions, hardware and catalogue models:
every layout is either refused with one InputError naming a field, or simulates to a result that obeys physics
(finite, bubbles >= 0, parts sum to the step, MFU <= 1, memory parts >= 0). The invariants raise inside the
result classes; these tests also re-check them from outside, so a check that is switched off still fails here.

`PERFMODEL_PROPERTY_EXAMPLES` scales the example counts (the session note reports a long run)."""

from __future__ import annotations

import math
import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.errors import InputError
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import build_scenario
from perfmodel.predict import simulate_scenario
from tests.conftest import REPO

SCALE = float(os.environ.get("PERFMODEL_PROPERTY_EXAMPLES", "1"))
MODELS = sorted(p.stem for p in (REPO / "perfmodel" / "catalogue").glob("*.json"))
HARDWARE = sorted(p.stem for p in (REPO / "hwprofiles").glob("*.yaml"))
COUNTS: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report_counts():
    yield
    print(f"\nphysics properties: {dict(COUNTS)}")


MLA = {"deepseek-v3", "deepseek-v4-flash"}  # attention kinds without a materialized variant
MOE = {"deepseek-v3", "deepseek-v4-flash", "gpt-oss-120b", "qwen3-235b-a22b", "qwen3-30b-a3b"}


def _layouts(draw: st.DrawFn, model: str) -> dict:
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 3, 4, 8]))
    cp = draw(st.sampled_from([1, 1, 2]))
    dp = draw(st.sampled_from([1, 2, 4, 8]))
    ranks = tp * cp * dp  # EP divides the ranks of a stage (Megatron), most draws respect it
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8, 16) if ranks % e == 0])) if model in MOE else 1
    schedule = draw(st.sampled_from(["1f1b", "interleaved", "zb-h1", "dualpipe", "dualpipev"]))
    vpp = draw(st.sampled_from([2, 3, 4])) if schedule == "interleaved" else 1
    return {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "vpp": vpp, "dp": dp, "schedule": schedule}


def _train(draw: st.DrawFn, lay: dict, microbatches: int, model: str) -> dict:
    micro_batch = draw(st.sampled_from([1, 2]))
    train = {
        "precision": draw(st.sampled_from(["bf16", "fp8"])),
        "seq_len": draw(st.sampled_from([512, 2048, 4096])),
        "global_batch": microbatches * micro_batch * lay["dp"],
        "micro_batch": micro_batch,
        "layout": {k: lay[k] for k in ("tp", "pp", "cp", "ep", "vpp")},
        "schedule": lay["schedule"],
        "recompute": draw(st.sampled_from(["none", "selective", "full"])),
        "sequence_parallel": draw(st.booleans()),
        "moe_dispatcher": draw(st.sampled_from(["alltoall", "deepep"])),
        "optimizer_offload_fraction": draw(st.sampled_from([0.0, 0.0, 1.0])),
    }
    if lay["schedule"] == "interleaved" and draw(st.booleans()):
        train["microbatch_group_size_per_vp_stage"] = draw(st.integers(lay["pp"], max(lay["pp"], microbatches)))
    return train


@st.composite
def pretrain_runs(draw: st.DrawFn) -> dict:
    model = draw(st.sampled_from(MODELS))
    lay = _layouts(draw, model)
    m = draw(st.integers(1, 40))
    return {"kind": "pretrain", "hardware": draw(st.sampled_from(HARDWARE)),
            "gpus": lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"], "model": {"id": model},
            "train": _train(draw, lay, m, model), **_stack(draw, model)}


def _stack(draw: st.DrawFn, model: str) -> dict:
    """A named stack (shipped, an unknown release, an unknown framework) and sometimes a stated attention kernel."""
    out: dict = {"stack": draw(st.sampled_from([None, "megatron-bridge@25.11", "megatron-lm@2021", "torchtitan",
                                                 "miles@9.9", "someframework@1.0"]))}
    if model not in MLA and draw(st.booleans()):
        out["stack_options"] = {"attention_kernel": draw(st.sampled_from(["flash", "materialized"]))}
    if model in MLA and out["stack"] == "megatron-lm@2021":
        out["stack"] = None  # a materialized-attention stack has no MLA/DSV4 pricing (refused by name)
    return out


@st.composite
def rl_runs(draw: st.DrawFn) -> dict:
    model = draw(st.sampled_from(MODELS))
    lay = _layouts(draw, model)
    lay["schedule"] = draw(st.sampled_from(["1f1b", "interleaved"]))  # what the RL frameworks run
    lay["vpp"] = draw(st.sampled_from([2, 3])) if lay["schedule"] == "interleaved" else 1
    actor = lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"]
    placement = draw(st.sampled_from(["colocated", "disaggregated"]))
    engine = draw(st.sampled_from([e for e in (2, 4, 8) if placement == "disaggregated" or actor % e == 0] or [1]))
    rollout_gpus = actor if placement == "colocated" else engine * draw(st.integers(1, 4))
    prompts, samples = lay["dp"] * draw(st.integers(1, 8)), draw(st.sampled_from([1, 4, 8]))
    train = _train(draw, lay, 1, model)
    train["global_batch"] = prompts * samples
    train["micro_batch"] = 1
    max_resp = draw(st.sampled_from([16, 64, 1024, 4096]))
    if lay["schedule"] == "interleaved" or draw(st.booleans()):  # Miles pads packed micro-batches for VPP
        train["max_tokens_per_gpu"] = draw(st.sampled_from([2048, 8192, 16384]))
    train["seq_len"] = -(-(max_resp + 256) // 4) * 4
    return {
        "kind": "rl", "hardware": draw(st.sampled_from(HARDWARE)),
        "gpus": actor if placement == "colocated" else actor + rollout_gpus,
        "model": {"id": model}, "train": train, **_stack(draw, model),
        "rl": {"algorithm": draw(st.sampled_from(["grpo", "ppo"])), "placement": placement, "actor_gpus": actor,
               "rollout_gpus": rollout_gpus,
               "async": placement == "disaggregated" and draw(st.booleans()),
               "prompts_per_step": prompts, "samples_per_prompt": samples, "prompt_tokens_mean": 200,
               "response_tokens": {"max": max_resp, "mean": max(1.0, max_resp * draw(st.sampled_from([0.3, 0.9]))),
                                   "truncated_fraction": draw(st.sampled_from([0.0, 0.2]))},
               "rollout": {"engine_gpus": engine, "tp": engine, "precision": draw(st.sampled_from(["bf16", "fp8"])),
                           "mem_fraction_static": 0.85, "max_total_tokens": 1 << 20}},
    }


def _check_physics(res) -> None:
    trains = [res.train] if res.train is not None else [
        x for x in (res.rl.train_side.train, res.rl.train_side.log_probs, res.rl.train_side.ref_log_probs,
                    res.rl.train_side.critic) if x is not None]
    for t in trains:
        assert math.isfinite(t.step_time_s) and t.step_time_s > 0
        assert t.mfu <= 1.0 + 1e-9 and t.hardware_flops / t.step_time_s / t.gpus <= t.peak_flops_per_gpu * (1 + 1e-9)
        assert min(t.bubble_s_per_stage) >= -1e-9 * t.step_time_s
        assert all(v >= -1e-12 for v in t.breakdown_s.values())
        assert sum(t.breakdown_s.values()) == pytest.approx(t.step_time_s, rel=1e-6)
    if res.rl is not None:
        rl = res.rl
        assert all(math.isfinite(v) and v >= 0 for v in rl.phases_s.values())
        assert sum(rl.breakdown_s.values()) == pytest.approx(rl.step_time_s, rel=1e-6)
        assert rl.step_time_s >= max(rl.phases_s["train"], rl.phases_s["weight_update"]) - 1e-9
        if not rl.scenario.run.rl.async_:
            assert rl.step_time_s >= rl.phases_s["rollout"] + rl.phases_s["train"] - 1e-9
    assert all(v >= 0 for v in res.memory.components().values())


def _simulate_or_refuse(data: dict) -> None:
    try:  # layout rules, and the simulator's own input checks (rollout weights that do not fit, ...)
        res = simulate_scenario(build_scenario(RunSpec.model_validate(data), source="property"))
    except InputError as err:
        assert err.field and err.message and "\n" not in err.message
        COUNTS[f"{data['kind']}_refused"] += 1
        return
    COUNTS[f"{data['kind']}_simulated"] += 1
    _check_physics(res)


@settings(max_examples=int(600 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pretrain_runs())
def test_training_steps_obey_physics(data: dict) -> None:
    _simulate_or_refuse(data)


@settings(max_examples=int(150 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rl_runs())
def test_rl_steps_obey_physics(data: dict) -> None:
    _simulate_or_refuse(data)
