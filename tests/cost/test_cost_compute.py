"""GEMM and memory-bound roofline limits."""

from __future__ import annotations

import re

import pytest

from perfmodel.cost.compute import (
    KERNEL_OVERHEAD_S,
    PRODUCTION_SHAPE_FACTOR,
    attention_time_s,
    gemm_flops,
    gemm_hbm_bytes,
    gemm_time_s,
    memory_bound_time_s,
    quantize_hbm_bytes,
)
from perfmodel.inputs.hardware import load_hardware


@pytest.fixture(scope="module")
def hw():
    return load_hardware("mi355x")


def test_large_gemm_reaches_max_efficiency(hw):
    m = n = k = 16384
    t = gemm_time_s(hw, m, n, k, "bf16")
    achieved = gemm_flops(m, n, k) / t / hw.peak("bf16")
    # the best-shape (MAMF) efficiency times the training-shape factor
    assert achieved == pytest.approx(hw.gemm_curve("bf16").max_efficiency * PRODUCTION_SHAPE_FACTOR, rel=0.002)


def test_small_gemm_is_memory_bound_and_pays_its_fixed_time_beside_the_stream(hw):
    # a GEMV-like shape: 33 MFLOP over 33 MB of weights; the kernel's fixed time does not hide under the stream
    t = gemm_time_s(hw, 1, 4096, 4096, "bf16")
    c = hw.gemm_curve("bf16")
    fixed = c.half_flops / (hw.peak("bf16") * c.max_efficiency * PRODUCTION_SHAPE_FACTOR)
    assert t == pytest.approx(fixed + memory_bound_time_s(hw, gemm_hbm_bytes(1, 4096, 4096, "bf16")))
    assert gemm_flops(1, 4096, 4096) / t < 0.01 * hw.peak("bf16")
    # compute-bound, the same fixed time is the curve's: a large GEMM is priced as it was
    m = 8192
    assert gemm_time_s(hw, m, m, m, "bf16") == pytest.approx(
        gemm_flops(m, m, m) / (hw.peak("bf16") * c.efficiency(gemm_flops(m, m, m)) * PRODUCTION_SHAPE_FACTOR))


def test_tiny_gemm_pays_the_fixed_cost(hw):
    # far below half_flops the curve leaves ~half_flops / (peak x max) per kernel (a few microseconds)
    t = gemm_time_s(hw, 64, 64, 64, "bf16")
    c = hw.gemm_curve("bf16")
    assert t == pytest.approx(c.half_flops / (hw.peak("bf16") * c.max_efficiency * PRODUCTION_SHAPE_FACTOR), rel=0.01)
    assert 1e-6 < t < 10e-6


def test_fp8_faster_for_large_gemm_but_pays_a_serial_quantize_kernel(hw):
    assert gemm_time_s(hw, 8192, 8192, 8192, "fp8") < gemm_time_s(hw, 8192, 8192, 8192, "bf16")
    # activations stay BF16 and are cast first, in a kernel of their own: read BF16, write FP8
    assert quantize_hbm_bytes(8192, 4096, "bf16") == 0.0
    assert quantize_hbm_bytes(8192, 4096, "fp8") == pytest.approx(8192 * 4096 * 3)
    # the cast does not hide under a compute-bound GEMM: it adds its full memory time
    m, n, k = 16384, 8192, 8192
    flops_only = gemm_flops(m, n, k) / (
        hw.peak("fp8") * hw.gemm_curve("fp8").efficiency(gemm_flops(m, n, k)) * PRODUCTION_SHAPE_FACTOR)
    cast = memory_bound_time_s(hw, quantize_hbm_bytes(m, k, "fp8"), kernels=1)
    assert gemm_time_s(hw, m, n, k, "fp8") == pytest.approx(flops_only + cast, rel=1e-9)


def test_grouped_gemm_runs_at_one_group_efficiency(hw):
    one = gemm_time_s(hw, 256, 4096, 2048, "bf16")
    assert gemm_time_s(hw, 256, 4096, 2048, "bf16", batch=32) == pytest.approx(32 * one, rel=1e-9)
    assert gemm_time_s(hw, 256 * 32, 4096, 2048, "bf16") < 32 * one  # one big GEMM is more efficient


def test_memory_bound_time(hw):
    assert memory_bound_time_s(hw, 0) == 0.0
    nbytes = 6e9
    assert memory_bound_time_s(hw, nbytes) == pytest.approx(nbytes / (hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency))
    assert memory_bound_time_s(hw, nbytes, kernels=2) == pytest.approx(
        memory_bound_time_s(hw, nbytes) + 2 * KERNEL_OVERHEAD_S)


def test_attention_kernel_is_slower_than_a_gemm_of_equal_flops(hw):
    flops = 1e12
    g = flops / (hw.peak("bf16") * hw.gemm_curve("bf16").efficiency(flops))
    assert attention_time_s(hw, flops, 0.0) > g
    assert attention_time_s(hw, flops, 0.0, backward=True) > attention_time_s(hw, flops, 0.0)


def test_one_hbm_rate_and_no_gpu_arithmetic_in_sim() -> None:
    """Effective HBM bandwidth is computed once (cost/compute.py::hbm_rate); sim/ prices nothing itself."""
    from perfmodel.cost.compute import hbm_rate, roofline_s
    from tests.conftest import REPO

    hw = load_hardware("h100-sxm")
    assert hbm_rate(hw) == hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency
    assert roofline_s(10.0, 2.0, 3.0, 1.0) == 5.0 and roofline_s(1.0, 2.0, 3.0, 1.0) == 3.0
    readers = {str(p.relative_to(REPO)) for p in (REPO / "perfmodel").rglob("*.py")
               if "hbm_bandwidth_bytes_per_s" in p.read_text(encoding="utf-8")}
    # the profile file's schema and the profile, the one rate, and `perfmodel hardware` printing the profile
    assert readers == {"perfmodel/inputs/hardware_file.py", "perfmodel/inputs/hardware.py",
                       "perfmodel/cost/compute.py", "perfmodel/commands/hardware.py"}
    for p in (REPO / "perfmodel" / "sim").glob("*.py"):
        uses = re.findall(r"\w\.\w*efficiency\b", p.read_text(encoding="utf-8"))  # hw.hbm_efficiency, ...
        assert not uses, f"sim/{p.name} prices with a hardware efficiency: {uses}"
