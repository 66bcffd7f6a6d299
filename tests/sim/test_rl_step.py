"""RL step composition: colocated vs disaggregated vs async, PPO and reference passes, the breakdown and the
GPU-idle accounting, on the seed run (DeepSeek-V4-Flash GRPO on 4 MI355X nodes)."""

from __future__ import annotations

import copy

import pytest

from perfmodel.inputs.plan import load_plan
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import build_scenario
from perfmodel.predict import simulate_scenario
from tests.conftest import REPO

SEED = load_plan(REPO / "examples" / "seed-mi355x-dsv4.yaml")
BASE = SEED.model_dump(mode="json", by_alias=True, include={"kind", "hardware", "gpus", "model", "train", "rl"})


def _result(**rl_updates):
    data = copy.deepcopy(BASE)
    data["rl"].update(rl_updates)
    return simulate_scenario(build_scenario(RunSpec.model_validate(data)))


@pytest.fixture(scope="module")
def sync():
    return _result(**{"async": False}).rl


@pytest.fixture(scope="module")
def asyn():
    return _result(**{"async": True}).rl


def test_sync_disaggregated_is_the_sum_of_phases(sync):
    p = sync.phases_s
    assert sync.step_time_s == pytest.approx(p["rollout"] + p["log_probs"] + p["ref_log_probs"] + p["train"]
                                             + p["weight_update"], rel=1e-9)
    assert sync.offload_s == 0.0


def test_async_overlaps_rollout_with_training(sync, asyn):
    p = asyn.phases_s
    train_path = p["log_probs"] + p["train"]
    assert asyn.step_time_s == pytest.approx(max(p["rollout"], train_path) + p["weight_update"], rel=1e-9)
    assert asyn.step_time_s < sync.step_time_s


def test_breakdown_sums_to_step(sync, asyn):
    for r in (sync, asyn):
        assert sum(r.breakdown_s.values()) == pytest.approx(r.step_time_s, rel=1e-6)
        assert all(v >= 0 for v in r.breakdown_s.values())


def test_disaggregated_idles_on_the_other_side(sync):
    assert sync.idle_gpu_s["waiting_on_other_side"] > 0
    assert sync.idle_gpu_s["rollout_tail"] > 0


def test_colocated_uses_all_gpus_and_pays_offload():
    data = copy.deepcopy(BASE)
    data["rl"].update(placement="colocated", actor_gpus=32, rollout_gpus=32, **{"async": False})
    data["rl"]["weight_update"]["mode"] = "ipc"
    data["train"]["layout"]["dp"] = 8
    coloc = simulate_scenario(build_scenario(RunSpec.model_validate(data))).rl
    disagg = _result(**{"async": False}).rl
    assert coloc.offload_s > 0
    assert coloc.rollout.num_engines == 2 * disagg.rollout.num_engines
    assert coloc.phases_s["rollout"] < disagg.phases_s["rollout"]
    p = coloc.phases_s
    assert coloc.step_time_s == pytest.approx(p["rollout"] + coloc.offload_s + p["log_probs"] + p["train"]
                                              + p["weight_update"], rel=1e-9)
    assert "waiting_on_other_side" not in coloc.idle_gpu_s
    traced = simulate_scenario(build_scenario(RunSpec.model_validate(data)), record_trace=True).rl
    phase = {sp.name: sp for sp in traced.spans() if sp.group == "rl step"}
    assert phase["log_probs"].start_s == pytest.approx(p["rollout"] + coloc.offload_s)
    update = phase["update_weights"]
    assert update.start_s + update.dur_s == pytest.approx(coloc.step_time_s)


def test_reference_pass_and_ppo_critic_add_time(sync):
    data = copy.deepcopy(BASE)
    data["rl"].update(**{"async": False})
    data["rl"]["log_probs"] = {"ref_model": True}
    with_ref = simulate_scenario(build_scenario(RunSpec.model_validate(data))).rl
    assert with_ref.phases_s["ref_log_probs"] == pytest.approx(sync.phases_s["log_probs"], rel=1e-6)
    data["rl"]["algorithm"] = "ppo"
    ppo = simulate_scenario(build_scenario(RunSpec.model_validate(data))).rl
    assert ppo.phases_s["train"] > 1.5 * sync.phases_s["train"]


def test_training_sees_the_rollout_samples(sync):
    side = sync.train_side
    prompt = int(round(SEED.rl.prompt_tokens_mean))
    assert side.tokens == sum(prompt + r for r in sync.rollout.response_lengths)
    assert max(sync.rollout.response_lengths) <= SEED.rl.response_tokens.max


def test_packing_by_token_budget_and_by_micro_batch_size():
    from perfmodel.sim.rl_step import pack_microbatches

    lengths = [3000, 2500, 2000, 1500, 1000, 800, 600, 400]
    # dynamic batching: every micro-batch within the budget, all tokens of the busiest DP rank kept
    mbs = pack_microbatches(lengths, dp=1, max_tokens=4096)
    assert all(t <= 4096 for t, _ in mbs) and sum(t for t, _ in mbs) == sum(lengths)
    assert len(mbs) < len(lengths)
    # fixed micro-batch size: one micro-batch per `samples_per_microbatch` samples
    assert len(pack_microbatches(lengths, dp=1, max_tokens=None, samples_per_microbatch=1)) == 8
    assert len(pack_microbatches(lengths, dp=1, max_tokens=None, samples_per_microbatch=2)) == 4
    # balance-data: two DP ranks get about half the tokens each; the busiest one is returned
    half = pack_microbatches(lengths, dp=2, max_tokens=None)
    assert sum(lengths) / 2 <= sum(t for t, _ in half) <= sum(lengths) / 2 + max(lengths)


def test_samples_beyond_global_batch_take_several_optimizer_steps(sync):
    """256 samples at global_batch 64: four optimizer steps (Miles --num-steps-per-rollout 4), log-probs once."""
    data = copy.deepcopy(BASE)
    data["rl"]["async"] = False
    data["train"]["global_batch"] = 64
    four = simulate_scenario(build_scenario(RunSpec.model_validate(data))).rl
    one_opt = sync.train_side.train.breakdown_s["optimizer"]
    assert four.train_side.train.breakdown_s["optimizer"] == pytest.approx(4 * one_opt, rel=1e-6)
    assert four.train_side.log_probs_time_s == pytest.approx(sync.train_side.log_probs_time_s, rel=1e-6)
    # every sample trained once (tokens count the busiest DP rank x dp, so within the balancing slack)
    assert four.train_side.train.tokens == pytest.approx(sync.train_side.train.tokens, rel=0.01)
    assert four.phases_s["train"] > sync.phases_s["train"]
    # the steps follow each other in the trace
    starts = sorted(e.start_s for e in four.train_side.train.trace) if four.train_side.train.trace else []
    assert not starts or starts[-1] < four.train_side.train.step_time_s


def test_packed_micro_batches_are_padded_to_what_the_interleaved_schedule_runs():
    """Miles rounds packed micro-batches up to a multiple of microbatch_group_size_per_vp_stage (default pp) and
    fills the gap with dummy copies of the shortest one: the RL step simulates instead of deadlocking."""
    from perfmodel.sim.rl_step import pad_microbatches

    data = copy.deepcopy(BASE)
    data["train"]["layout"] = {"tp": 1, "pp": 4, "ep": data["train"]["layout"]["ep"], "vpp": 2}
    data["train"]["schedule"] = "interleaved"
    data["train"].pop("pipeline_layers", None)
    res = simulate_scenario(build_scenario(RunSpec.model_validate(data))).rl
    assert res.train_side.microbatches_per_rank % 4 == 0
    mbs = [(9000, 3000), (4000, 4000), (2500, 2500)]
    padded = pad_microbatches(mbs, 8)
    # 5 samples (3 of 3000 tokens, 4000, 2500) over 8 micro-batches: one each, and 3 dummies of the shortest
    assert sorted(padded) == sorted([(3000, 3000)] * 3 + [(4000, 4000)] + [(2500, 2500)] * 4)
    assert pad_microbatches(mbs, 3) == mbs
