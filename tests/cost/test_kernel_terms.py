"""The kernel-level terms issue 22 added, one formula each: collective floors by ring steps and the engine's
in-graph all-reduce, the grouped GEMM by rows per expert, the DeepEP-style dispatch by SMs and its floors, the
engine's linear by recipe with its activation quantize."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from perfmodel.cost.comm import GroupPlacement, all_gather_s, all_reduce_s, graph_all_reduce_s, reduce_scatter_s
from perfmodel.cost.compute import (
    KERNEL_OVERHEAD_S,
    activation_quant_time_s,
    attention_time_s,
    engine_gemm_rate,
    engine_gemm_time_s,
    expected_tiles,
    gemm_flops,
    gemm_rate,
    grouped_gemm_time_s,
    hbm_rate,
    overlapped_s,
    rows_hit_experts,
)
from perfmodel.cost.dispatch import Dispatch, _hit_probability, dispatch_s, ep_call_floor_s
from perfmodel.inputs.hardware import load_hardware

H100 = load_hardware("h100-sxm")


@pytest.mark.parametrize("n", [2, 4, 8])
def test_a_small_collective_pays_the_base_and_one_step_per_ring_step(n: int) -> None:
    g = GroupPlacement(n, n)
    tiny = 1e-6  # a millionth of a byte: the bandwidth term is negligible
    base, step = H100.collective_latency_scale_up_s, H100.collective_step_latency_scale_up_s
    assert all_reduce_s(H100, tiny, g) == pytest.approx(base + 2 * (n - 1) * step, rel=1e-6)
    assert all_gather_s(H100, tiny, g) == pytest.approx(base + (n - 1) * step, rel=1e-6)
    assert reduce_scatter_s(H100, tiny, g) == pytest.approx(base + (n - 1) * step, rel=1e-6)


def test_across_nodes_each_fabric_pays_its_own_steps() -> None:
    hw = dataclasses.replace(H100, collective_step_latency_scale_out_s=3e-6)
    g = GroupPlacement(16, 8)  # 2 nodes of 8
    expected = hw.collective_latency_scale_out_s + 2 * 7 * hw.collective_step_latency_scale_up_s + 2 * 1 * 3e-6
    assert all_reduce_s(hw, 1.0, g) == pytest.approx(expected, rel=1e-6)


def test_the_engine_all_reduce_pays_the_in_graph_floor_inside_a_node_and_nccl_across() -> None:
    g = GroupPlacement(8, 8)
    assert graph_all_reduce_s(H100, 1e-6, g) == pytest.approx(H100.graph_all_reduce_latency_s, rel=1e-4)
    assert all_reduce_s(H100, 1e-6, g) == pytest.approx(
        H100.collective_latency_scale_up_s + 14 * H100.collective_step_latency_scale_up_s, rel=1e-4)
    nbytes = 2.0**20
    across = GroupPlacement(16, 8)
    assert graph_all_reduce_s(H100, nbytes, across) == all_reduce_s(H100, nbytes, across)
    assert graph_all_reduce_s(H100, nbytes, GroupPlacement(1, 1)) == 0.0


def test_more_gpus_than_the_custom_all_reduce_takes_all_reduce_through_nccl_inside_one_rack() -> None:
    """vLLM's and SGLang's custom all-reduce take 2-8 GPUs: a TP16 engine inside one NVL72 rack pays NCCL's
    latency per step of its ring, an 8-GPU one the in-graph floor."""
    from perfmodel.cost.comm import CUSTOM_ALL_REDUCE_MAX_GPUS

    gb200 = load_hardware("gb200")
    rack16, rack8 = GroupPlacement(16, 16), GroupPlacement(CUSTOM_ALL_REDUCE_MAX_GPUS, CUSTOM_ALL_REDUCE_MAX_GPUS)
    assert rack16.intra and rack8.intra
    assert graph_all_reduce_s(gb200, 1e-6, rack16) == all_reduce_s(gb200, 1e-6, rack16)
    assert graph_all_reduce_s(gb200, 1e-6, rack8) == pytest.approx(gb200.graph_all_reduce_latency_s, rel=1e-4)
    assert graph_all_reduce_s(gb200, 1e-6, rack16) > 5 * graph_all_reduce_s(gb200, 1e-6, rack8)


def test_rows_hit_experts_is_all_of_them_for_many_rows_and_about_the_rows_for_few() -> None:
    assert rows_hit_experts(64, 1e6) == pytest.approx(64)
    assert rows_hit_experts(64, 1) == pytest.approx(1.0)
    assert rows_hit_experts(64, 64) == pytest.approx(64 * (1 - (63 / 64) ** 64))
    assert rows_hit_experts(1, 5) == 1.0 and rows_hit_experts(8, 0) == 0.0


def test_a_grouped_gemm_pays_its_hit_experts_weights_and_whole_tiles() -> None:
    hw = dataclasses.replace(H100, grouped_gemm_overlap_norm=0.0)  # the max of compute and memory (next test)
    n, k, tile = 4096, 2048, hw.grouped_gemm_train_tile_rows
    rate = hw.peak("bf16") * hw.gemm_curve("bf16").max_efficiency * hw.grouped_gemm_rel_efficiency
    # many rows per expert: compute bound, padding to whole tiles of each expert's rows
    rows, hit = 64 * 1000.0, 64.0
    padded = hit * math.ceil(1000 / tile) * tile
    assert grouped_gemm_time_s(hw, rows, hit, n, k, "bf16") == pytest.approx(
        hw.grouped_gemm_fixed_s + gemm_flops(padded, n, k) / rate)
    # one row on each of 4 experts: memory bound on the 4 weights read; experts without rows cost nothing
    few = grouped_gemm_time_s(hw, 4.0, 4.0, n, k, "bf16")
    weights = 4 * n * k * 2.0
    assert few == pytest.approx(hw.grouped_gemm_fixed_s + (weights + 4 * k * 2.0 + 4 * n * 2.0) / hbm_rate(hw))
    assert grouped_gemm_time_s(hw, 4.0, 8.0, n, k, "bf16") > few  # spread over more experts: more weights read


def test_a_grouped_gemms_compute_and_memory_combine_as_their_p_norm() -> None:
    """Near the ridge a grouped kernel's compute and weight stream do not overlap fully: the time is the p-norm
    of the two (H100's fitted p 1.5: up to 2^(1/1.5) = 1.59x the max at the ridge), the max far from it, the max
    at p 0 and the sum at p 1."""
    assert overlapped_s(3.0, 1.0, 0.0) == 3.0 and overlapped_s(3.0, 1.0, 1.0) == pytest.approx(4.0)
    assert overlapped_s(2.0, 2.0, 1.5) == pytest.approx(2.0 * 2 ** (1 / 1.5))
    assert overlapped_s(1.0, 3.0, 2.0) == pytest.approx(math.sqrt(10.0)) == overlapped_s(3.0, 1.0, 2.0)
    assert overlapped_s(1000.0, 1.0, 1.5) == pytest.approx(1000.0, rel=1e-4) and overlapped_s(0.0, 5.0, 1.5) == 5.0
    assert H100.grouped_gemm_overlap_norm == 1.5 and load_hardware("b200").grouped_gemm_overlap_norm == 2.5
    hw0 = dataclasses.replace(H100, grouped_gemm_overlap_norm=0.0)
    n, k, hit = 4096, 2048, 64.0
    for rows in (64.0, 64 * 300.0, 64 * 4000.0):  # memory bound, near the ridge, compute bound
        mem_s = (rows * k * 2 + hit * n * k * 2 + rows * n * 2) / hbm_rate(H100)
        peak_s = grouped_gemm_time_s(hw0, rows, hit, n, k, "bf16") - hw0.grouped_gemm_fixed_s
        comp_s = peak_s if peak_s > mem_s * (1 + 1e-9) else None
        got = grouped_gemm_time_s(H100, rows, hit, n, k, "bf16") - H100.grouped_gemm_fixed_s
        assert peak_s <= got <= peak_s * 2 ** (1 / 1.5) + 1e-15
        if comp_s is not None:
            assert got == pytest.approx(overlapped_s(comp_s, mem_s, 1.5))


def test_random_routing_pays_the_tiles_of_each_experts_random_share() -> None:
    """Rows routed at random leave some experts a partly filled extra tile: at 256 rows an expert on average and
    128-row tiles about half the experts take a third tile (an H200 ran such a layer 1.27-1.35x the balanced one,
    studies/kernels/h200/README.md). `expected_tiles` against a simulation of the routing."""
    rng = random.Random(7)
    for mean, tile, experts in ((256, 128, 128), (0.5, 16, 64), (30, 16, 64), (1024, 128, 32), (3, 1, 8)):
        rows = int(mean * experts)
        draws = []
        for _ in range(40):
            counts = [0] * experts
            for _ in range(rows):
                counts[rng.randrange(experts)] += 1
            draws.append(sum(math.ceil(c / tile) for c in counts) / experts)
        assert expected_tiles(mean, tile, experts) == pytest.approx(sum(draws) / len(draws), rel=0.01)
    assert expected_tiles(3.0, 1) == 3.0 and expected_tiles(0.0, 128) == 0.0
    # a compute-bound grouped GEMM at 640 rows an expert: balanced, five tiles each; random, about 5.5
    hw, rows, experts = dataclasses.replace(H100, grouped_gemm_overlap_norm=0.0), 640 * 64.0, 64.0
    even = grouped_gemm_time_s(hw, rows, experts, 4096, 4096, "bf16") - hw.grouped_gemm_fixed_s
    spread = grouped_gemm_time_s(hw, rows, experts, 4096, 4096, "bf16", experts=experts) - hw.grouped_gemm_fixed_s
    assert spread / even == pytest.approx(expected_tiles(640, 128, 64) / 5, rel=1e-9)
    assert 1.08 < spread / even < 1.12


def test_the_engines_fused_moe_runs_at_its_own_efficiency() -> None:
    """A compute-bound grouped GEMM in the engine runs at `grouped_gemm_engine_rel_efficiency` (CDNA: AITER's fused
    MoE at 0.45 of the dense rate); a profile that states none prices the engine's like the training kernel."""
    mi355x = dataclasses.replace(load_hardware("mi355x"), grouped_gemm_overlap_norm=0.0)
    rows, hit, n, k = 64 * 4096.0, 64.0, 4096, 4096

    def compute_s(hw, engine: bool) -> float:
        return grouped_gemm_time_s(hw, rows, hit, n, k, "bf16", engine=engine) - hw.grouped_gemm_fixed_s

    assert mi355x.grouped_gemm_engine_rel_efficiency == 0.45 and mi355x.grouped_gemm_rel_efficiency == 1.0
    assert compute_s(mi355x, True) == pytest.approx(compute_s(mi355x, False) / 0.45, rel=1e-12)
    assert H100.grouped_gemm_engine_rel_efficiency == H100.grouped_gemm_rel_efficiency
    assert compute_s(H100, True) == compute_s(H100, False)


def test_a_sequential_expert_loop_pays_each_hit_expert() -> None:
    cpu = load_hardware("cpu-local")
    one = grouped_gemm_time_s(cpu, 64.0, 1.0, 256, 256, "bf16")
    eight = grouped_gemm_time_s(cpu, 64.0, 8.0, 256, 256, "bf16")
    assert eight - one == pytest.approx(7 * cpu.grouped_gemm_per_expert_s, rel=0.05)


def test_grouped_wgrad_writes_each_hit_experts_gradient() -> None:
    hw = dataclasses.replace(H100, grouped_gemm_fixed_s=0.0, grouped_gemm_overlap_norm=0.0)
    rows, hit, n, k = 8.0, 8.0, 4096, 4096  # memory bound: the gradients written dominate
    t = grouped_gemm_time_s(hw, rows, hit, n, k, "bf16", wgrad=True, out_bytes_per_element=4.0)
    assert t == pytest.approx((rows * (k + n) * 2.0 + hit * k * n * 4.0) / hbm_rate(hw))


def test_a_deepep_dispatch_is_its_floor_plus_bytes_at_the_slower_of_its_sms_and_the_link() -> None:
    g = GroupPlacement(8, 8)
    d = Dispatch(4096, 7168, 8, 256, 1.0, "deepep")
    moved = d.send_bytes * 7 * _hit_probability(256, 8, 32)
    sms = H100.ep_units * H100.ep_dispatch_unit_bytes_per_s
    link = H100.scale_up_gpu_bytes_per_s * H100.all_to_all_efficiency_scale_up
    assert dispatch_s(H100, d, g) == pytest.approx(H100.ep_dispatch_floor_s + moved / min(sms, link))
    combine = dataclasses.replace(d, elem_bytes=2.0, combine=True)
    sms_c = H100.ep_units * H100.ep_combine_unit_bytes_per_s
    assert dispatch_s(H100, combine, g) == pytest.approx(H100.ep_combine_floor_s + 2 * moved / min(sms_c, link))
    many_sms = dataclasses.replace(H100, ep_units=1000)  # then the link bounds it
    assert dispatch_s(many_sms, d, g) == pytest.approx(H100.ep_dispatch_floor_s + moved / link)


def test_the_plain_all_to_all_dispatcher_keeps_the_nccl_floor() -> None:
    g = GroupPlacement(8, 8)
    d = Dispatch(16, 7168, 8, 256, 1.0)
    assert dispatch_s(H100, d, g) < H100.ep_dispatch_floor_s  # small NCCL all-to-all: microseconds, not DeepEP's
    assert dispatch_s(H100, d, g) > H100.all_to_all_latency_scale_up_s


def test_a_collective_takes_the_faster_of_the_two_protocols() -> None:
    g = GroupPlacement(8, 8)
    f, extra = H100.small_protocol_bw_fraction, H100.small_protocol_bulk_extra_latency_s
    fixed = all_reduce_s(H100, 1e-9, g)

    def transfer(nbytes: float) -> float:  # the bulk protocol's transfer time at the full bus bandwidth
        return 2 * 7 / 8 * nbytes / (H100.scale_up_gpu_bytes_per_s * H100.collective_bus_efficiency_scale_up)

    small, large = 4096.0, 2.0**30
    assert all_reduce_s(H100, small, g) == pytest.approx(fixed + transfer(small) / f)  # low-latency protocol
    assert all_reduce_s(H100, large, g) == pytest.approx(fixed + extra + transfer(large))  # bulk protocol
    crossover = extra * f / (1 - f)  # the transfer time where both protocols take as long
    mid = crossover / transfer(1.0)
    assert all_reduce_s(H100, mid, g) == pytest.approx(fixed + crossover / f)
    assert all_reduce_s(H100, mid, g) > fixed + transfer(mid) * 1.5  # mid-size: well above the one-protocol line
    mesh = load_hardware("mi355x")  # no mid-size table: one protocol
    assert mesh.small_protocol_bw_fraction == 1.0 and mesh.small_protocol_bulk_extra_latency_s == 0.0


@pytest.mark.parametrize("recipe,rel", [("fp8", "engine_gemm_fp8_rel_efficiency"),
                                        ("fp8_block", "engine_gemm_fp8_block_rel_efficiency")])
def test_an_engine_fp8_linear_runs_at_its_recipes_rate_after_quantizing_its_activations(recipe: str, rel: str) -> None:
    hw = load_hardware("b200")
    m, n, k = 8192.0, 8192.0, 8192.0
    flops = gemm_flops(m, n, k)
    rate = gemm_rate(hw, "fp8", flops, shape_factor=False) * getattr(hw, rel)
    assert engine_gemm_rate(hw, recipe, flops) == pytest.approx(rate)
    quant = hw.engine_quant_fixed_s + m * k * (2.0 + 1.0) / hbm_rate(hw)  # BF16 in, FP8 out
    assert activation_quant_time_s(hw, m, k, recipe) == pytest.approx(quant)
    assert engine_gemm_time_s(hw, m, n, k, recipe) == pytest.approx(KERNEL_OVERHEAD_S + flops / rate + quant)
    # one token: the FP8 weights' read, the GEMM's floor and the quantize's floor
    small = engine_gemm_time_s(hw, 1.0, n, k, recipe)
    assert small == pytest.approx(KERNEL_OVERHEAD_S + (k * n + k + 2.0 * n) / hbm_rate(hw)
                                  + hw.engine_quant_fixed_s + k * 3.0 / hbm_rate(hw))


def test_a_bf16_engine_linear_quantizes_nothing_and_a_profile_without_a_quantize_kernel_neither() -> None:
    hw = H100
    assert activation_quant_time_s(hw, 4096, 4096, "bf16") == 0.0
    assert engine_gemm_rate(hw, "bf16") == gemm_rate(hw, "bf16", None, shape_factor=False)
    none = dataclasses.replace(hw, engine_quant_fixed_s=0.0)
    assert activation_quant_time_s(none, 4096, 4096, "fp8_block") == 0.0
    assert engine_gemm_time_s(none, 4096, 4096, 4096, "fp8_block") < engine_gemm_time_s(hw, 4096, 4096, 4096,
                                                                                        "fp8_block")


def test_a_flash_attention_forward_pays_its_time_per_query_row_and_head_and_its_backward_does_not() -> None:
    hw = load_hardware("h100-sxm")
    flops, nbytes, rows_heads = 4e12, 1e8, 8192 * 32
    base = attention_time_s(hw, flops, nbytes)
    fwd = attention_time_s(hw, flops, nbytes, query_heads=rows_heads)
    assert hw.attention_prefill_query_head_s > 0
    assert fwd - base == pytest.approx(rows_heads * hw.attention_prefill_query_head_s)
    assert attention_time_s(hw, flops, nbytes, backward=True, query_heads=rows_heads) == \
        pytest.approx(attention_time_s(hw, flops, nbytes, backward=True))


def test_a_deepep_dispatchs_host_round_trip_runs_at_the_host_cpus_pace() -> None:
    # DeepEP's dispatch waits on the CPU for the receive counts, allocates and launches (csrc/deep_ep.cpp); its
    # combine does not: on a Grace (2.75x an x86's host time) only the dispatch's share above the combine grows
    g = GroupPlacement(8, 8)
    d = Dispatch(64, 7168, 8, 256, 1.0, "deepep")
    combine = dataclasses.replace(d, elem_bytes=2.0, combine=True)
    grace = dataclasses.replace(H100, host_op_time_factor=2.75)
    host = H100.ep_dispatch_floor_s - H100.ep_combine_floor_s
    assert host > 0
    assert dispatch_s(grace, d, g) - dispatch_s(H100, d, g) == pytest.approx(1.75 * host)
    assert dispatch_s(grace, combine, g) == pytest.approx(dispatch_s(H100, combine, g))
    assert ep_call_floor_s(H100) == pytest.approx(H100.ep_dispatch_floor_s)
