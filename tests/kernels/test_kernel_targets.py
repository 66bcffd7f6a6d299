"""Issue 22's kernel targets as a guard: every lane's pooled median inside its band over aiconfigurator-core's
measured tables, and on the NVIDIA GPUs only the cells the note names outside theirs (a change that moves another
cell out fails here; one that brings a named cell in is told to drop it from the list)."""

from __future__ import annotations

import pytest

from perfmodel.kernels.aiconfigurator import default_tables_dir
from perfmodel.kernels.check import ALL, LaneStats, check_rows, target_band, target_misses
from perfmodel.kernels.load import load_tables

NVIDIA = {"a100-80gb", "h100-sxm", "h200", "b200", "gb200", "gb300"}
# (lane, GPU, regime) outside the band, each with why (the note on issue 22): none is fitted to its own GPU's rows.
KNOWN_MISSES = {
    # GB300 runs its GEMM and attention lanes about 1.1x GB200 in its own tables at the same datasheet peaks;
    # Azure's one-harness FP8 GEMM (1.17x, on a newer CUDA) is not what the published GB300 runs show (hwprofiles)
    ("attention_prefill train", "gb300", "bulk"),
    ("gemm fp8 engine", "gb300", "bulk"),
    ("gemm fp8_block engine", "gb300", "bulk"),
    # A100 (Ampere) takes Hopper's fitted kernel terms (its per-head attention work carried by SM-cycles per second,
    # docs/kernels.md), an assumption its rows reject for NCCL's small-message floor (the fabric's, not the clock's)
    # and for the engines' fused MoE, which run slower than Hopper's
    ("all_gather nccl", "a100-80gb", "small"),
    ("all_gather nccl", "a100-80gb", "bulk"),
    ("all_reduce graph", "a100-80gb", "small"),
    ("all_to_all nccl", "a100-80gb", "small"),
    ("reduce_scatter nccl", "a100-80gb", "small"),
    ("grouped_gemm engine", "a100-80gb", "bulk"),
    ("grouped_gemm train", "a100-80gb", "bulk"),
}


def test_the_bands_are_the_issues() -> None:
    assert target_band("gemm bf16 engine", "bulk") == (0.87, 1.15)
    assert target_band("ep_dispatch normal", "bulk") == target_band("ep_combine normal", "bulk") == (0.7, 1.4)
    assert target_band("ep_dispatch normal", "small") == (0.67, 1.5)
    assert target_band("gemm fp8 engine", "large") is None
    inside, outside = (LaneStats("gemm fp8 engine", ALL, "bulk", 10, m, 0.1, m, m) for m in (1.1, 1.2))
    assert target_misses([inside, outside]) == [outside]


@pytest.fixture(scope="module")
def stats() -> list[LaneStats]:
    root = default_tables_dir()
    if root is None:
        pytest.skip("aiconfigurator-core's tables are not installed (scripts/install-test-deps.sh installs them)")
    rows, _ = load_tables([root], rows_per_table=3000)
    return check_rows(rows).stats()


def test_every_lane_is_inside_its_band_pooled_over_the_gpus(stats: list[LaneStats]) -> None:
    assert [(s.lane, s.regime, round(s.median, 3)) for s in target_misses(stats) if s.hardware == ALL] == []


def test_on_nvidia_only_the_named_cells_are_outside_their_bands(stats: list[LaneStats]) -> None:
    misses = {(s.lane, s.hardware, s.regime) for s in target_misses(stats) if s.hardware in NVIDIA}
    assert misses - KNOWN_MISSES == set(), "a cell moved out of its band"
    assert KNOWN_MISSES - misses == set(), "a named cell is inside its band now: drop it from KNOWN_MISSES"
