"""Each RL sub-phase's formula (perfmodel/sim/rl_subphases.py, docs/rl-phases.md), the per-framework weight update
path, and how the sub-phases compose the step: in order, summing to it, each on the trace."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from perfmodel.cost.memory.training import training_memory
from perfmodel.cost.serve.weight_update import DISK_WRITE_BYTES_PER_S, weight_update_time
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import build_scenario
from perfmodel.inputs.stack import resolve_stack
from perfmodel.predict import simulate_scenario
from perfmodel.sim import rl_subphases as sp
from tests.sim.gb300_case import gb300_case
from tests.sim.gb300_case import scenario_of as gb300_scenario
from tests.sim.test_rl_step import BASE


def _scn(stack: str = "miles", knobs: dict | None = None, **rl):
    data = copy.deepcopy(BASE)
    data["rl"].update(rl)
    data["stack"] = stack
    scn = build_scenario(RunSpec.model_validate(data))
    return dataclasses.replace(scn, stack=scn.stack.with_knobs(knobs, "test")) if knobs else scn


@pytest.fixture(scope="module")
def miles():
    return _scn(**{"async": False})


def _host_s(scn, nbytes: float) -> float:
    hw = scn.hardware
    return nbytes / (hw.host_link_bytes_per_s * hw.host_link_efficiency)


def test_reward_tail_is_the_last_sample_unless_the_rewards_outlast_the_rollout(miles):
    r = miles.run.rl
    assert sp.reward_tail_s(miles, rollout_time_s=1e6) == pytest.approx(r.reward_host_s)
    # one event loop runs every sample's reward: beyond the rollout's length they show
    total = r.responses_per_step * r.reward_host_s
    assert sp.reward_tail_s(miles, rollout_time_s=total / 4) == pytest.approx(r.reward_host_s + 0.75 * total)


def test_data_to_trainer_is_per_sample_plus_bytes_at_the_serialization_rate(miles):
    st = miles.stack
    assert st.rl_sample_host_s > 0 and st.rl_token_bytes > 0
    got = sp.data_to_trainer_s(miles, samples=256, tokens=1_000_000)
    assert got == pytest.approx(256 * st.rl_sample_host_s + 1e6 * st.rl_token_bytes / st.rl_host_bytes_per_s)
    faster = dataclasses.replace(miles, stack=st.with_knobs({"rl_host_bytes_per_s": 2 * st.rl_host_bytes_per_s}, "t"))
    assert sp.data_to_trainer_s(faster, 256, 1_000_000) < got


def test_weight_restore_and_backup_move_the_local_weights_over_the_host_link(miles):
    w = training_memory(miles).weights_bytes
    assert sp.weight_restore_s(miles) == pytest.approx(_host_s(miles, w))
    assert sp.weight_backup_s(miles) == pytest.approx(_host_s(miles, w))
    off = dataclasses.replace(miles, stack=miles.stack.with_knobs({"rl_weight_restore": False,
                                                                   "rl_weight_backup": False}, "t"))
    assert sp.weight_restore_s(off) == 0.0 and sp.weight_backup_s(off) == 0.0
    # Miles restores the reference's weights before its pass and the actor's after it: two restores
    with_ref = _scn(**{"async": False}, log_probs={"ref_model": True})
    ex = sp.train_path_extras(with_ref, samples=256, tokens=10_000, response_tokens=8_000)
    assert ex.ref_restore_s == ex.actor_restore_s == pytest.approx(sp.weight_restore_s(with_ref))
    assert ex.moves_s == pytest.approx(2 * ex.actor_restore_s + ex.weight_backup_s)


def test_advantages_are_hbm_passes_on_the_gpu_plus_host_time_per_token(miles):
    hw = miles.hardware
    hbm = hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency
    assert sp.advantages_s(miles, 1e6, 8_000_000) == pytest.approx(1e6 * sp.ADVANTAGE_HBM_BYTES_PER_TOKEN / hbm)
    openrlhf = _scn("openrlhf")
    assert openrlhf.stack.rl_advantage_token_s > 0  # a Python loop over the positions, on the CPU
    assert sp.advantages_s(openrlhf, 1e6, 8_000_000) == pytest.approx(
        1e6 * sp.ADVANTAGE_HBM_BYTES_PER_TOKEN / hbm + 8e6 * openrlhf.stack.rl_advantage_token_s)


def test_checkpoint_spreads_weights_and_optimizer_over_its_interval(miles):
    assert sp.checkpoint_s(miles) == 0.0
    every = _scn(checkpoint_every=10)
    assert sp.checkpoint_s(every) == pytest.approx(
        every.model.total_params() * sp.CHECKPOINT_BYTES_PER_PARAM / DISK_WRITE_BYTES_PER_S / 10)
    a = simulate_scenario(miles).rl
    b = simulate_scenario(_scn(**{"async": False}, checkpoint_every=10)).rl
    assert b.step_time_s - a.step_time_s == pytest.approx(sp.checkpoint_s(every), rel=1e-6)


def test_the_driver_work_adds_once_per_step(miles):
    a = simulate_scenario(miles).rl
    b = simulate_scenario(dataclasses.replace(miles, stack=miles.stack.with_knobs(
        {"rl_step_host_s": miles.stack.rl_step_host_s + 2.0}, "t"))).rl
    assert b.step_time_s - a.step_time_s == pytest.approx(2.0, rel=1e-9)
    assert b.phases_s["other"] - a.phases_s["other"] == pytest.approx(2.0, rel=1e-9)


def test_the_sub_phases_run_in_order_and_are_the_step(miles):
    rl = simulate_scenario(miles, record_trace=True).rl
    names = [s.name for s in rl.subphases]
    assert names == ["generate", "reward_tail", "release_and_onload", "data_to_trainer", "ref_restore",
                     "ref_log_probs", "actor_restore", "comm_init", "log_probs", "advantages", "train_comm_init",
                     "actor_train", "weight_backup", "weight_update", "checkpoint", "driver"]
    assert sum(s.seconds for s in rl.subphases) == pytest.approx(rl.step_time_s, rel=1e-9)
    # each phase timer holds exactly its sub-phases
    for phase, seconds in rl.phases_s.items():
        assert sum(s.seconds for s in rl.subphases if s.phase == phase) == pytest.approx(seconds, rel=1e-9)
    # every sub-phase that takes time is on the trace, back to back
    spans = [s for s in rl.spans() if s.track == "sub-phases"]
    assert [s.name for s in spans] == [s.name for s in rl.subphases if s.seconds > 0]
    for a, b in zip(spans, spans[1:]):
        assert b.start_s == pytest.approx(a.start_s + a.dur_s, abs=1e-9)
    parts = [s for s in rl.spans() if s.track == "weight update"]
    assert sum(s.dur_s for s in parts) == pytest.approx(rl.weight_update.total_s, rel=1e-9)


def test_a_sleeping_trainer_re_creates_its_communicators_stage_after_stage():
    """Miles colocated: the first forward pass after the wake creates each stage's TP/CP/EP/ETP communicators in
    turn (plus the pipeline's p2p group once), training its gradient groups; each inside its phase timer."""
    lay = {"tp": 2, "pp": 4, "cp": 2, "ep": 4, "etp": 1, "vpp": 1, "dp": 2}
    data = copy.deepcopy(BASE)
    data["train"]["layout"] = lay
    data["rl"].update({"placement": "colocated", "actor_gpus": 32, "rollout_gpus": 32, "async": False})
    data["rl"]["log_probs"]["ref_model"] = False
    data["stack"] = "miles"
    scn = build_scenario(RunSpec.model_validate(data))
    init = scn.stack.rl_comm_init_s
    assert init > 0
    first, train = sp.comm_reinit_s(scn)
    assert sp.forward_groups(scn) == 3  # tp, cp, ep (etp 1)
    assert first == pytest.approx((4 * 3 + 1) * init)
    # dense gradients over dp x cp = 4, experts' data parallel 8 / 4 = 2, the grad-norm's model-parallel group
    assert train == pytest.approx(3 * init)
    rl = simulate_scenario(scn).rl
    sub = {s.name: s for s in rl.subphases}
    assert sub["comm_init"].seconds == pytest.approx(first) and sub["comm_init"].phase == "log_probs"
    assert sub["train_comm_init"].seconds == pytest.approx(train) and sub["train_comm_init"].phase == "train"
    assert rl.phases_s["log_probs"] == pytest.approx(rl.train_side.log_probs_time_s + first)
    ppo = copy.deepcopy(data)
    ppo["rl"]["algorithm"] = "ppo"
    extras = sp.train_path_extras(build_scenario(RunSpec.model_validate(ppo)), 256, 10**6, 10**5)
    assert extras.comm_init_critic_s == pytest.approx(first + train)  # the critic's own groups, in critic_train
    off = dataclasses.replace(scn, stack=scn.stack.with_knobs({"memory_saver": False}, "t"))
    assert sp.comm_reinit_s(off) == (0.0, 0.0)  # a trainer that never sleeps keeps its groups
    apart = copy.deepcopy(data)
    apart["rl"].update({"placement": "disaggregated", "actor_gpus": 16, "rollout_gpus": 16})
    apart["gpus"] = 32
    apart["train"]["layout"] = {**lay, "dp": 1}
    assert sp.comm_reinit_s(build_scenario(RunSpec.model_validate(apart))) == (0.0, 0.0)
    assert sp.comm_reinit_s(_scn("nemo-rl")) == (0.0, 0.0)  # a stack that keeps its groups: knob 0


def test_async_hides_the_training_side_sub_phases_under_the_rollout():
    rl = simulate_scenario(_scn(**{"async": True})).rl
    sub = {s.name: s.seconds for s in rl.subphases}
    train_path = sum(sub[k] for k in ("data_to_trainer", "ref_restore", "comm_init", "ref_log_probs",
                                      "actor_restore", "log_probs", "advantages", "train_comm_init", "actor_train",
                                      "weight_backup"))
    rollout = sub["generate"] + sub["reward_tail"]
    assert rl.step_time_s == pytest.approx(max(rollout, train_path) + sub["weight_update"] + sub["checkpoint"]
                                           + sub["driver"], rel=1e-9)


def test_the_weight_update_gathers_in_the_trainers_dtype_and_pipelines_where_the_framework_does(miles):
    bf16 = weight_update_time(miles)
    fp32 = weight_update_time(dataclasses.replace(miles, stack=miles.stack.with_knobs(
        {"weight_update_gather_bytes": 4.0}, "t")))
    assert fp32.parts["gather_s"] > 1.5 * bf16.parts["gather_s"]
    ipc = gb300_scenario(gb300_case())  # buckets and their pipelining: the colocated CUDA-IPC path's
    plain = weight_update_time(ipc)
    piped = weight_update_time(dataclasses.replace(ipc, stack=ipc.stack.with_knobs(
        {"weight_update_pipelined": True}, "t")))
    n_c = plain.num_buckets * plain.per_bucket_s
    assert plain.parts["bucket_fixed_s"] == pytest.approx(n_c) and n_c > 0
    assert piped.parts["bucket_fixed_s"] == pytest.approx(max(0.0, n_c - plain.parts["pipeline_s"]))
    assert piped.total_s < plain.total_s


def test_each_framework_states_its_path():
    miles, verl, nemo = (resolve_stack(s) for s in ("miles", "verl", "nemo-rl"))
    assert miles.rl_weight_restore and miles.rl_weight_backup and not miles.weight_update_pipelined
    assert verl.weight_update_gather_bytes == 4.0 and not verl.rl_weight_restore
    assert nemo.weight_update_pipelined and nemo.rl_weight_restore and not nemo.rl_weight_backup
    for st in (miles, verl, nemo, resolve_stack("openrlhf")):
        assert st.rl_step_host_s > 0 and st.rl_token_bytes > 0
        for knob in ("rl_step_host_s", "rl_sample_host_s", "rl_token_bytes"):
            assert "docs/rl-phases.md" in st.sources[knob], (st.id, knob)


def test_the_log_prob_timer_holds_the_reference_pass_where_the_framework_times_them_together():
    """NeMo-RL's policy_and_reference_logprobs times both passes; Miles times them apart (stacks/*.yaml)."""
    for stack, together in (("nemo-rl", True), ("miles", False)):
        res = simulate_scenario(_scn(stack, log_probs={"ref_model": True}))
        ph, m = res.rl.phases_s, res.metrics()
        assert ph["ref_log_probs"] > 0 and m["ref_log_probs_time_s"] == ph["ref_log_probs"]
        expected = ph["log_probs"] + (ph["ref_log_probs"] if together else 0.0)
        assert m["log_probs_time_s"] == pytest.approx(expected, rel=1e-12), stack
