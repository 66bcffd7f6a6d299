"""The simulator interface: chunk costs, p2p, gradient sync, optimizer step."""

from __future__ import annotations

import copy

import pytest

from perfmodel.cost.train.flops import model_flops_per_token
from perfmodel.cost.train.moe import MoEAssumptions
from perfmodel.cost.train.stage import (
    ChunkCost,
    chunk_cost,
    dp_grad_sync_s,
    optimizer_params_per_gpu,
    optimizer_step_s,
    p2p_time_s,
)
from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.scenario import build_scenario
from perfmodel.memo import Memo


def _scn(d: dict):
    return build_scenario(ValidationCase.model_validate(d))


@pytest.fixture
def llama70b(case_dict):  # H100, TP4 PP8 VPP5, FP8
    return _scn(case_dict)


@pytest.fixture
def dsv4(rl_case_dict):  # GB300, TP2 PP8 CP2 EP4, full recompute, optimizer offload 1.0
    return _scn(rl_case_dict)


def _tokens(scn) -> int:
    return scn.train.micro_batch * scn.train.seq_len


def test_chunk_cost_fields(llama70b):
    memo = Memo()
    c = chunk_cost(llama70b, 3, _tokens(llama70b), llama70b.train.seq_len, memo=memo)
    assert isinstance(c, ChunkCost)
    assert c.fwd_compute_s > 0 and c.bwd_input_s > 0 and c.bwd_weight_s > 0
    assert c.recompute_s == 0.0  # recompute: none
    assert set(c.fwd_comm_s) == {"tp", "cp", "ep_a2a"} and c.fwd_comm_s["tp"] > 0
    assert c.fwd_comm_s["cp"] == 0 and c.fwd_comm_s["ep_a2a"] == 0
    # backward ~ 2 x forward (attention 2.5 x), W about the GEMM half
    total_bwd = c.bwd_input_s + c.bwd_weight_s
    assert 1.6 * c.fwd_compute_s < total_bwd < 3.0 * c.fwd_compute_s
    assert chunk_cost(llama70b, 3, _tokens(llama70b), llama70b.train.seq_len, memo=memo) is c  # the caller's memo
    assert chunk_cost(llama70b, 3, _tokens(llama70b), llama70b.train.seq_len) == c  # a fresh one: same numbers


def test_first_and_last_virtual_stage(llama70b):
    t, s = _tokens(llama70b), llama70b.train.seq_len
    n = len(llama70b.stage_layers)
    mid = [chunk_cost(llama70b, v, t, s) for v in range(1, n - 1)
           if llama70b.stage_layers[v] == llama70b.stage_layers[0]]
    first, last = chunk_cost(llama70b, 0, t, s), chunk_cost(llama70b, n - 1, t, s)
    assert mid and first.fwd_compute_s > mid[0].fwd_compute_s  # embedding
    assert last.p2p_bytes == 0.0 and first.p2p_bytes > 0
    # [s/tp, b, h] BF16 under sequence parallel
    assert first.p2p_bytes == pytest.approx(8192 / 4 * 8192 * 2)


def test_model_flops_sum_to_the_convention(llama70b):
    t, s = _tokens(llama70b), llama70b.train.seq_len
    lay = llama70b.layout
    per_gpu = sum(chunk_cost(llama70b, v, t, s).model_flops for v in range(len(llama70b.stage_layers)))
    assert per_gpu * lay.tp * lay.cp == pytest.approx(model_flops_per_token(llama70b.model, s) * t, rel=1e-9)


def test_dsv4_chunk(dsv4):
    t, s = _tokens(dsv4), dsv4.train.seq_len
    c = chunk_cost(dsv4, 2, t, s)
    # full recompute replays the forward compute of every layer
    assert c.recompute_s == pytest.approx(c.fwd_compute_s, rel=0.01)
    assert c.fwd_comm_s["ep_a2a"] > 0 and c.fwd_comm_s["tp"] > 0
    assert c.bwd_comm_s["tp"] > c.fwd_comm_s["tp"]  # the replayed forward collectives
    # p2p: [s/(cp tp), b, hc_mult, h] BF16
    m = dsv4.model
    assert c.p2p_bytes == pytest.approx(s / 2 / 2 * m.hc_mult * m.hidden_size * 2)
    last = chunk_cost(dsv4, len(dsv4.stage_layers) - 1, t, s)
    assert last.model_flops > 0 and last.p2p_bytes == 0.0


def test_hash_layers_cost_more_than_balanced(dsv4):
    t, s = _tokens(dsv4), dsv4.train.seq_len
    assert dsv4.model.layers[0].ffn.hash_routed
    gpu = {"layer_host_fwd_s": 0.0, "layer_host_bwd_s": 0.0}  # the GPU side alone, without the host floor
    zipfy = chunk_cost(dsv4, 0, t, s, MoEAssumptions(zipf_s=1.3, **gpu))
    mild = chunk_cost(dsv4, 0, t, s, MoEAssumptions(zipf_s=0.6, **gpu))
    assert zipfy.fwd_compute_s > mild.fwd_compute_s
    assert zipfy.fwd_comm_s["ep_a2a"] > mild.fwd_comm_s["ep_a2a"]
    skewed = chunk_cost(dsv4, 4, t, s, MoEAssumptions(balance_factor=1.5, **gpu))
    assert skewed.fwd_compute_s > chunk_cost(dsv4, 4, t, s, MoEAssumptions(**gpu)).fwd_compute_s


def test_moe_layers_take_at_least_the_hosts_time(dsv4):
    """Host floor: a tiny micro-batch's layers cannot run faster than the host issues their ops."""
    tiny = chunk_cost(dsv4, 1, 64, 64)
    n_moe = sum(1 for layer in dsv4.model.layers[: dsv4.stage_layers[0] + dsv4.stage_layers[1]][dsv4.stage_layers[0]:]
                if layer.ffn.kind == "moe")
    moe = MoEAssumptions()
    assert tiny.fwd_compute_s + sum(tiny.fwd_comm_s.values()) >= n_moe * moe.layer_host_fwd_s * 0.999
    off = chunk_cost(dsv4, 1, 64, 64, MoEAssumptions(layer_host_fwd_s=0.0, layer_host_bwd_s=0.0))
    assert off.fwd_compute_s < tiny.fwd_compute_s


def test_selective_recompute_is_attention_only(case_dict):
    case_dict["train"]["recompute"] = "selective"
    scn = _scn(case_dict)
    c = chunk_cost(scn, 2, _tokens(scn), scn.train.seq_len)
    assert 0 < c.recompute_s < 0.5 * c.fwd_compute_s


def test_p2p_time_intra_vs_inter(llama70b, case_dict):
    nbytes = 32e6
    # TP4 x CP1 x DP2 = stride 8: the next stage sits on the next 8-GPU node
    inter = p2p_time_s(llama70b, nbytes)
    hw = llama70b.hardware
    assert inter == pytest.approx(
        hw.collective_latency_scale_out_s + nbytes / (hw.nic_bytes_per_s * hw.collective_bus_efficiency_scale_out))
    d = copy.deepcopy(case_dict)
    d["gpus"] = 32
    d["train"]["layout"].update(tp=2, pp=16, vpp=1, dp=1)
    d["train"]["schedule"] = "1f1b"
    intra = p2p_time_s(_scn(d), nbytes)
    assert intra < inter


def test_grad_sync_and_param_gather(llama70b, case_dict):
    grad, gather = dp_grad_sync_s(llama70b, 0)
    assert grad > 0 and gather > 0  # distributed optimizer: reduce-scatter + all-gather
    d = copy.deepcopy(case_dict)
    d["train"]["distributed_optimizer"] = False
    g2, p2 = dp_grad_sync_s(_scn(d), 0)
    assert p2 == 0.0 and g2 > grad  # all-reduce moves twice the bytes of a reduce-scatter


def test_optimizer_step_and_offload(llama70b, dsv4):
    hw = llama70b.hardware
    n = optimizer_params_per_gpu(llama70b, 1)
    assert optimizer_step_s(llama70b, 1) == pytest.approx(
        n * 30 / (hw.hbm_bandwidth_bytes_per_s * hw.optimizer_hbm_efficiency))
    # DSV4 case offloads the whole optimizer to the host: far slower than an on-GPU step of the same shard
    on_gpu = optimizer_params_per_gpu(dsv4, 0) * 30 / (
        dsv4.hardware.hbm_bandwidth_bytes_per_s * dsv4.hardware.optimizer_hbm_efficiency)
    assert optimizer_step_s(dsv4, 0) > 50 * on_gpu


def test_stage_params_cover_the_model(rl_case_dict):
    from perfmodel.cost.params import stage_params

    d = rl_case_dict
    d["train"]["layout"] = {"tp": 1, "cp": 1, "pp": 8, "ep": 1, "etp": 1, "vpp": 1, "dp": 4}
    scn = _scn(d)
    total = sum(stage_params(scn, p).dense + stage_params(scn, p).expert for p in range(8))
    assert total == pytest.approx(scn.model.total_params(include_mtp=True))
    d["train"]["layout"] = {"tp": 2, "cp": 1, "pp": 8, "ep": 2, "etp": 1, "vpp": 1, "dp": 2}
    sharded = _scn(d)
    p0, q0 = stage_params(scn, 3), stage_params(sharded, 3)
    assert q0.expert == pytest.approx(p0.expert / 2)
    assert p0.dense / 2 < q0.dense < p0.dense  # TP splits most, not all (norms, latent KV side, router)
