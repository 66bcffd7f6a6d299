"""What each runtime knob of a stack does to the priced step, checked against hand arithmetic on small runs: host
time as a floor (GPU) or added (CPU), CUDA graphs, the optimizer's host time, padding vs packing, the rollout
engine's host costs and multiplier, the memory saver and the weight update's fixed and per-tensor costs."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.cost.serve.engine import EngineCost
from perfmodel.cost.serve.refit_anchors import ATTENTION_TENSORS, MLP_TENSORS, MODEL_END_TENSORS, NORM_TENSORS
from perfmodel.cost.serve.weight_update import weight_update_time
from perfmodel.cost.train.moe import MoEAssumptions
from perfmodel.cost.train.stage import chunk_cost, optimizer_step_s
from perfmodel.inputs.plan import load_plan
from perfmodel.inputs.scenario import Scenario, build_scenario
from perfmodel.predict import simulate_scenario
from tests.conftest import REPO

PLANS = REPO / "studies" / "calibration-loop" / "plans"


def _scn(plan: str = "loop-pp1-fp8-b256-r3", **knobs) -> Scenario:
    scn = build_scenario(load_plan(PLANS / f"{plan}.yaml"))
    return dataclasses.replace(scn, stack=scn.stack.with_knobs(knobs, "test")) if knobs else scn


def test_host_time_adds_on_a_cpu_and_is_a_floor_on_a_gpu() -> None:
    a = MoEAssumptions()
    layers = 2  # the loop's Llama: two dense layers, all on virtual stage 0
    add = chunk_cost(_scn(host_device_overlap=False, host_op_time_scale=1.0), 0, 64 * 9, 9)
    none = chunk_cost(_scn(host_device_overlap=False, host_op_time_scale=0.0), 0, 64 * 9, 9)
    assert add.fwd_compute_s - none.fwd_compute_s == pytest.approx(layers * a.dense_host_fwd_s, rel=1e-9)
    assert add.bwd_input_s - none.bwd_input_s == pytest.approx(layers * a.dense_host_bwd_s, rel=1e-9)
    # overlapped: a layer takes max(device, host), so tiny layers cost exactly their host time each
    floor = chunk_cost(_scn(host_device_overlap=True, host_op_time_scale=100.0), 0, 64 * 9, 9)
    per_layer = 100.0 * a.dense_host_fwd_s
    assert none.fwd_compute_s < floor.fwd_compute_s <= layers * per_layer + none.fwd_compute_s
    graphs = chunk_cost(_scn(host_device_overlap=False, cuda_graph_scope="full_iteration"), 0, 64 * 9, 9)
    assert graphs.fwd_compute_s == pytest.approx(none.fwd_compute_s, rel=1e-9)  # a graph issues no ops
    # TransformerEngine's attention graphs: the dense layer's host issues only its MLP block's ops (22 of 101)
    attn = chunk_cost(_scn(host_device_overlap=False, cuda_graph_scope="attn"), 0, 64 * 9, 9)
    assert attn.fwd_compute_s - none.fwd_compute_s == pytest.approx(layers * a.dense_host_fwd_s * 22 / 101, rel=1e-9)


def test_compute_multiplier_scales_compute_not_host_time() -> None:
    base = chunk_cost(_scn(host_op_time_scale=0.0), 0, 64 * 9, 9)
    slow = chunk_cost(_scn(host_op_time_scale=0.0, train_compute_scale=3.0), 0, 64 * 9, 9)
    assert slow.fwd_compute_s == pytest.approx(3.0 * base.fwd_compute_s, rel=1e-9)
    assert slow.bwd_weight_s == pytest.approx(3.0 * base.bwd_weight_s, rel=1e-9)


def test_optimizer_host_time_adds_once_per_step() -> None:
    assert optimizer_step_s(_scn(optimizer_host_s=0.25), 0) - optimizer_step_s(_scn(), 0) == pytest.approx(0.25)


def test_padding_to_the_longest_sample_costs_more_than_packing() -> None:
    plan = "loop-pp1-bf16-b512-r6"  # responses up to 6 tokens, 3.7 on average: the longest is 11 of about 9
    # compute made to dominate the host time (a CPU's tiny layers are host-bound otherwise)
    packed = simulate_scenario(_scn(plan, pack_sequences=True, train_compute_scale=100.0)).metrics()
    padded = simulate_scenario(_scn(plan, pack_sequences=False, train_compute_scale=100.0)).metrics()
    assert padded["train_time_s"] > 1.1 * packed["train_time_s"]
    assert padded["rollout_time_s"] == pytest.approx(packed["rollout_time_s"])  # the rollout is not the trainer's


def test_rollout_host_costs_and_multiplier() -> None:
    base = EngineCost(_scn(rollout_request_host_s=0.0, rollout_token_host_s=0.0, rollout_decode_host_s=0.0))
    host = EngineCost(_scn(rollout_request_host_s=2e-3, rollout_token_host_s=1e-3, rollout_decode_host_s=0.01))
    # a decode step: its fixed host time + per running request; a prefill: per request admitted
    assert host.decode_base(256) - base.decode_base(256) == pytest.approx(256 * 1e-3 + 0.01)
    assert host.prefill_s([5] * 64) - base.prefill_s([5] * 64) == pytest.approx(64 * 2e-3)
    slow = EngineCost(_scn(rollout_compute_scale=2.0, rollout_token_host_s=0.0, rollout_decode_host_s=0.0))
    assert slow.gemm_s(256) == pytest.approx(2.0 * base.gemm_s(256))
    assert slow.floor_s() == pytest.approx(2.0 * base.floor_s())


def test_memory_saver_and_the_weight_update_fixed_and_per_tensor_costs() -> None:
    scn = _scn(memory_saver=False, weight_update_fixed_s=0.8, weight_update_tensor_s=0.0)
    wu = weight_update_time(scn)
    assert wu.after_rollout_s == 0.0 and "trainer_sleep_s" not in wu.parts
    fixed = wu.parts["pause_flush_s"] + wu.parts["resume_s"] + (wu.parts["post_process_s"] - _post_hbm(wu))
    assert fixed == pytest.approx(0.8)
    saver = weight_update_time(_scn(memory_saver=True))
    assert saver.after_rollout_s > 0 and saver.parts["trainer_sleep_s"] > 0
    layers = scn.model.num_layers
    tensors = MODEL_END_TENSORS + layers * (ATTENTION_TENSORS + NORM_TENSORS + MLP_TENSORS)
    per = weight_update_time(_scn(memory_saver=False, weight_update_tensor_s=0.01))
    assert per.parts["tensors_s"] == pytest.approx(0.01 * tensors)
    moe = build_scenario(load_plan(PLANS / "loop-ep2-fp8-b512-r3.yaml"))
    moe = dataclasses.replace(moe, stack=moe.stack.with_knobs({"weight_update_tensor_s": 1.0}, "test"))
    f = moe.model.layers[0].ffn
    expect = MODEL_END_TENSORS + moe.model.num_layers * (ATTENTION_TENSORS + NORM_TENSORS + 1
                                                         + MLP_TENSORS * (f.num_experts + f.num_shared_experts))
    assert weight_update_time(moe).parts["tensors_s"] == pytest.approx(expect)


def _post_hbm(wu) -> float:
    """The post-process part that is an HBM pass, not a fixed call: total post-process minus its fixed share."""
    scn = _scn(memory_saver=False, weight_update_fixed_s=0.0)
    return weight_update_time(scn).parts["post_process_s"]


def test_an_eager_prefill_forward_takes_at_least_its_kernels_issue_time() -> None:
    """EngineCost.prefill_s: each chunk's forward is the longer of its device time and kernels x layers x the
    stack's per-kernel host time (scaled by the host CPU's factor); the batch's scheduling time adds after."""
    base = EngineCost(_scn(rollout_prefill_kernel_host_s=0.0, rollout_request_host_s=0.0))
    chunk = base.params.chunked_prefill_tokens
    prompts = [chunk, chunk, 5]  # three forwards: two full chunks and a short one
    host = 3 * base.params.prefill_host_overhead_s
    kernels = base.kernels_per_layer * base.n_layers * base.hw.host_op_time_factor
    per_kernel = 10 * base.prefill_s(prompts) / kernels  # each forward's issue above the whole prefill's device time
    eager = EngineCost(_scn(rollout_prefill_kernel_host_s=per_kernel, rollout_request_host_s=0.0))
    assert eager.prefill_s(prompts) == pytest.approx(3 * per_kernel * kernels + host)
    # where the device is slower than the issue, the issue hides under it
    hidden = EngineCost(_scn(rollout_prefill_kernel_host_s=1e-12, rollout_request_host_s=0.0))
    assert hidden.prefill_s(prompts) == pytest.approx(base.prefill_s(prompts))
