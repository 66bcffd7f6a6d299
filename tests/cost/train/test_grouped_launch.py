"""TransformerEngine's GroupedLinear runs one cuBLASLt GEMM per local expert over a few streams (the stack's
`grouped_gemm_launch: multi_stream`): each expert that gets rows adds the profile's measured per-expert time to the
grouped kernel; a single-launch grouped GEMM (the op fuser's fused grouped MLP, torch._grouped_mm, Primus-Turbo's
CK kernel) and the engines' fused MoE do not."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.cost.compute import grouped_gemm_time_s, rows_hit_experts
from perfmodel.cost.train.timing import time_work
from perfmodel.cost.train.work import Gemm, Work
from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.stack import StackOptions, resolve_stack
from tests.conftest import hardware_file_without

H100 = load_hardware("h100-sxm")


def test_the_per_expert_time_is_te_2_7s_measured_loop_on_hopper() -> None:
    # TransformerEngine PR #2045: 8 -> 16 experts at 32,768 tokens cost the loop 21.9 us, the single launch 3.5
    assert H100.grouped_gemm_train_per_expert_s == pytest.approx((21.9e-6 - 3.5e-6) / 8, rel=0.01)
    assert load_hardware("mi355x").grouped_gemm_train_per_expert_s == 0.0  # Primus-Turbo's CK grouped GEMM


def test_each_hit_expert_adds_its_launch_to_a_multi_stream_grouped_gemm_only() -> None:
    rows, experts = 4096.0, 16.0
    hit = rows_hit_experts(experts, rows)
    single = grouped_gemm_time_s(H100, rows, hit, 1536, 2048, "bf16", experts=experts)
    multi = grouped_gemm_time_s(H100, rows, hit, 1536, 2048, "bf16", experts=experts, multi_stream=True)
    assert multi - single == pytest.approx(hit * H100.grouped_gemm_train_per_expert_s)
    engine = grouped_gemm_time_s(H100, rows, hit, 1536, 2048, "bf16", engine=True, experts=experts)
    assert engine == grouped_gemm_time_s(H100, rows, hit, 1536, 2048, "bf16", engine=True, experts=experts,
                                         multi_stream=False)


def test_a_layers_forward_input_and_weight_gradients_each_pay_it() -> None:
    w = Work(gemms=[Gemm("fc1", 256.0, 1536, 2048, batch=16, grouped=True)])
    hit = rows_hit_experts(16, 256.0 * 16)
    one, loop = time_work(H100, w, {}), time_work(H100, w, {}, multi_stream=True)
    per_call = hit * H100.grouped_gemm_train_per_expert_s
    assert (loop.fwd - one.fwd, loop.bwd_in - one.bwd_in, loop.bwd_w - one.bwd_w) == pytest.approx(
        (per_call, per_call, per_call))


def test_stacks_say_how_their_experts_launch() -> None:
    assert resolve_stack("megatron-bridge").grouped_gemm_launch == "multi_stream"
    assert resolve_stack("primus").grouped_gemm_launch == resolve_stack("torchtitan").grouped_gemm_launch == "single"
    st = resolve_stack("megatron-bridge@26.08", StackOptions(grouped_gemm_launch="single"), "case.yaml")
    assert st.grouped_gemm_launch == "single"
    with pytest.raises(ValueError):
        StackOptions(grouped_gemm_launch="per_expert")


def test_a_hardware_file_without_it_has_none(tmp_path) -> None:
    path = hardware_file_without(tmp_path, "h100-sxm", "train_per_expert_s")
    assert load_hardware(path).grouped_gemm_train_per_expert_s == 0.0
    assert dataclasses.replace(H100, grouped_gemm_train_per_expert_s=0.0) != H100
