"""RL step composition: colocated vs disaggregated vs async, PPO and reference passes, the breakdown and the
GPU-idle accounting, on the seed run (DeepSeek-V4-Flash GRPO on 4 MI355X nodes)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from perfmodel.inputs.plan import load_plan
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import build_scenario
from perfmodel.predict import simulate_scenario
from tests.conftest import REPO

SEED = load_plan(REPO / "examples" / "seed-mi355x-dsv4.yaml")
BASE = SEED.model_dump(mode="json", by_alias=True, include={"kind", "hardware", "gpus", "model", "train", "rl"})
SEED_SCN = build_scenario(RunSpec.model_validate(BASE))


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
                                             + p["weight_update"] + p["other"], rel=1e-9)
    assert sync.offload_s == 0.0
    # the sub-phases, in order, are the step
    assert sum(sp.seconds for sp in sync.subphases) == pytest.approx(sync.step_time_s, rel=1e-9)


def test_async_overlaps_rollout_with_training(sync, asyn):
    p = asyn.phases_s
    sub = {sp.name: sp.seconds for sp in asyn.subphases}
    fixed = sub["driver"] + sub["checkpoint"]
    train_path = p["log_probs"] + p["train"] + p["other"] - fixed
    assert asyn.step_time_s == pytest.approx(max(p["rollout"], train_path) + p["weight_update"] + fixed, rel=1e-9)
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
    assert p["other"] >= coloc.offload_s
    assert coloc.step_time_s == pytest.approx(p["rollout"] + p["log_probs"] + p["train"] + p["weight_update"]
                                              + p["other"], rel=1e-9)
    assert "waiting_on_other_side" not in coloc.idle_gpu_s
    traced = simulate_scenario(build_scenario(RunSpec.model_validate(data)), record_trace=True).rl
    phase = {sp.name: sp for sp in traced.spans() if sp.group == "rl step"}
    sub = {sp.name: sp.seconds for sp in coloc.subphases}
    assert phase["log_probs"].start_s == pytest.approx(p["rollout"] + coloc.offload_s + sub["data_to_trainer"]
                                                       + sub["actor_restore"])
    update = phase["update_weights"]
    assert update.start_s + update.dur_s == pytest.approx(coloc.step_time_s)


def test_reference_pass_and_ppo_critic_add_time(sync):
    data = copy.deepcopy(BASE)
    data["rl"].update(**{"async": False})
    data["rl"]["log_probs"] = {"ref_model": True}
    with_ref = simulate_scenario(build_scenario(RunSpec.model_validate(data))).rl
    assert with_ref.phases_s["ref_log_probs"] == pytest.approx(sync.phases_s["log_probs"], rel=1e-6)


def test_ppo_runs_miles_critic_before_the_actor(sync):
    """Miles' PPO (docs/rl-phases.md, Miles 4.3-4.4): the critic is the actor's model with a value head (no
    vocabulary head, no MTP) on the actor's GPUs; it wakes, computes values over the rollout, trains and sleeps,
    then the actor does its log-prob pass and training."""
    from perfmodel.cost.memory.training import training_memory

    data = copy.deepcopy(BASE)
    data["rl"].update(**{"async": False}, algorithm="ppo")
    scn = build_scenario(RunSpec.model_validate(data))
    ppo = simulate_scenario(scn, record_trace=True).rl
    side, grpo = ppo.train_side, sync.train_side
    assert side.values is not None and side.critic is not None
    # the value pass is a forward over the rollout without the 129k-vocabulary head: cheaper than the log-probs
    assert 0.5 * grpo.log_probs_time_s < side.values.step_time_s < grpo.log_probs_time_s
    assert 0.5 * grpo.train.step_time_s < side.critic.step_time_s < grpo.train.step_time_s
    # its weights and optimizer state move on and off the GPUs once each per step, over the host link
    critic = dataclasses.replace(scn, model=scn.model.as_critic())
    tm = training_memory(critic)
    host = scn.hardware.host_link_bytes_per_s * scn.hardware.host_link_efficiency
    assert side.critic_swap_s == pytest.approx(2 * (tm.weights_bytes + tm.optimizer_bytes) / host, rel=1e-9)
    assert ppo.phases_s["train"] == pytest.approx(grpo.train.step_time_s + side.values.step_time_s
                                                  + side.critic.step_time_s + side.critic_swap_s, rel=1e-9)
    assert ppo.step_time_s == pytest.approx(sum(ppo.phases_s.values()), rel=1e-9)
    assert ppo.breakdown_s["offload"] == pytest.approx(side.critic_swap_s, rel=1e-9)  # disaggregated: no other
    phases = {sp.name: sp for sp in ppo.spans() if sp.track == "phases"}
    assert phases["critic_train"].start_s + phases["critic_train"].dur_s == pytest.approx(phases["log_probs"].start_s)
    # a stack that keeps both models resident moves nothing
    resident = dataclasses.replace(scn, stack=scn.stack.with_knobs({"memory_saver": False}, "test"))
    assert simulate_scenario(resident).rl.train_side.critic_swap_s == 0.0


def test_the_critic_model_has_a_value_head():
    m = SEED_SCN.model
    c = m.as_critic()
    assert c.head_size == 1 and c.mtp_layers == () and not c.tie_word_embeddings and c.id != m.id
    assert c.total_params() == m.total_params() - m.lm_head_params() + m.hidden_size
    from perfmodel.cost.train.flops import head_model_flops_fwd

    assert head_model_flops_fwd(c) == 2.0 * m.hidden_size


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


def test_ppo_without_a_memory_saver_keeps_the_critic_resident():
    from perfmodel.cost.memory.training import training_memory

    data = copy.deepcopy(BASE)
    grpo = build_scenario(RunSpec.model_validate(data))
    data["rl"]["algorithm"] = "ppo"
    ppo = build_scenario(RunSpec.model_validate(data))
    parked = training_memory(ppo)  # the seed's stack parks each model while the other runs
    assert ppo.stack.memory_saver and parked.total_bytes == training_memory(grpo).total_bytes
    resident = training_memory(dataclasses.replace(ppo, stack=ppo.stack.with_knobs({"memory_saver": False}, "t")))
    for part in ("weights_bytes", "grads_bytes", "optimizer_bytes", "optimizer_host_bytes"):
        assert getattr(resident, part) == pytest.approx(2 * getattr(parked, part)), part
    assert resident.activations_bytes == parked.activations_bytes
