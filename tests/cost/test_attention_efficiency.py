"""The flash-attention kernel's rate per GPU (hardware `efficiency.attention_rel_efficiency`): FlashAttention-3's on
Hopper by default, FlashAttention-2's published range on A100."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfmodel.cost.compute import attention_time_s, compute_time_s
from perfmodel.cost.serve.engine import engine_rates
from perfmodel.inputs.hardware import ATTENTION_BWD_REL_EFFICIENCY, ATTENTION_FWD_REL_EFFICIENCY, load_hardware

A100 = load_hardware("a100-80gb")
H100 = load_hardware("h100-sxm")
REPO = Path(__file__).resolve().parents[2]


def test_a100_runs_flash_attention_2_inside_its_published_range() -> None:
    # Dao 2023 (arXiv 2307.08691): FlashAttention-2 reaches 50-73% of the A100's 312 TFLOP/s
    forward_of_peak = A100.attention_fwd_rel_efficiency * A100.gemm_curve("bf16").max_efficiency
    assert 0.50 <= forward_of_peak <= 0.73
    assert forward_of_peak == pytest.approx((0.50 + 0.73) / 2, abs=0.005)  # the range's middle
    assert A100.attention_bwd_rel_efficiency == pytest.approx(
        A100.attention_fwd_rel_efficiency * ATTENTION_BWD_REL_EFFICIENCY / ATTENTION_FWD_REL_EFFICIENCY, abs=0.005)


def test_the_profile_rate_prices_the_forward_and_the_backward() -> None:
    flops = 4e13  # compute-bound: the floor and the per-row time are small beside it
    for backward, rel in ((False, A100.attention_fwd_rel_efficiency), (True, A100.attention_bwd_rel_efficiency)):
        t = attention_time_s(A100, flops, 0.0, backward=backward)
        assert t == pytest.approx(A100.attention_prefill_floor_s + compute_time_s(A100, flops, "bf16", rel))
    # the same math at the default (FlashAttention-3's) rate is faster: A100 pays for its older kernel
    default = dataclasses.replace(A100, attention_fwd_rel_efficiency=ATTENTION_FWD_REL_EFFICIENCY)
    assert attention_time_s(A100, flops, 0.0) / attention_time_s(default, flops, 0.0) == pytest.approx(
        ATTENTION_FWD_REL_EFFICIENCY / A100.attention_fwd_rel_efficiency, rel=0.01)


def test_the_engine_reads_the_same_rate() -> None:
    a100 = engine_rates(A100, "bf16").attn_flops_per_s
    default = engine_rates(dataclasses.replace(A100, attention_fwd_rel_efficiency=ATTENTION_FWD_REL_EFFICIENCY),
                           "bf16").attn_flops_per_s
    assert a100 / default == pytest.approx(A100.attention_fwd_rel_efficiency / ATTENTION_FWD_REL_EFFICIENCY)


def test_a_hardware_file_without_it_takes_flash_attention_3s(tmp_path) -> None:
    assert (H100.attention_fwd_rel_efficiency, H100.attention_bwd_rel_efficiency) == (
        ATTENTION_FWD_REL_EFFICIENCY, ATTENTION_BWD_REL_EFFICIENCY)
    lines = (REPO / "hwprofiles" / "a100-80gb.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "attention_rel_efficiency:" in line)
    path = tmp_path / "my-a100.yaml"
    path.write_text("\n".join(lines[:start] + lines[start + 3:]) + "\n")
    mine = load_hardware(str(path))
    assert (mine.attention_fwd_rel_efficiency, mine.attention_bwd_rel_efficiency) == (
        ATTENTION_FWD_REL_EFFICIENCY, ATTENTION_BWD_REL_EFFICIENCY)


def test_deepseek_v4s_sparse_mla_core_runs_at_its_own_rate_where_a_profile_states_one() -> None:
    """`sparse_mla_forward` / `sparse_mla_backward`: the DSV4 core's own rates (MI355X: Primus' gluon_v3 kernels);
    a profile without them prices the core at its dense flash rates."""
    mi355x = load_hardware("mi355x")
    flops = 4e13
    for backward in (False, True):
        rel = mi355x.attention_sparse_bwd_rel_efficiency if backward else mi355x.attention_sparse_fwd_rel_efficiency
        t = attention_time_s(mi355x, flops, 0.0, backward=backward, sparse=True)
        assert t == pytest.approx(mi355x.attention_prefill_floor_s + compute_time_s(mi355x, flops, "bf16", rel))
        assert t > 2 * attention_time_s(mi355x, flops, 0.0, backward=backward)  # 3-5x the dense kernels' time
    assert H100.attention_sparse_fwd_rel_efficiency == H100.attention_fwd_rel_efficiency
    assert H100.attention_sparse_bwd_rel_efficiency == H100.attention_bwd_rel_efficiency


def test_only_the_dsv4_core_is_priced_as_sparse_mla() -> None:
    from perfmodel.cost.train.attention import attention_work
    from perfmodel.cost.train.work import Shard
    from perfmodel.inputs.model import load_model

    shard = Shard(4096.0, 4096, 1, 1, 1, 1, False, "bf16", "alltoall", "flash", "delayed", "fused",
                  "mbridge-25.11", "single")
    for model, sparse in (("deepseek-v4-flash", True), ("deepseek-v3", False), ("llama3-8b", False)):
        layer = load_model(model).layers[-1]
        cores = [k for k in attention_work(layer.attention, shard).kernels if k.name == "core_attention"]
        assert len(cores) == 1 and cores[0].sparse is sparse, model
