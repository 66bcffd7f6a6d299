"""The engine's dense projection GEMMs: a roofline over their weights, or, where a stack release states the measured
time of one call (`rollout_rocm_dense_gemm_call_s`), at least the forward's calls x that time, with the kernel floors
the engine already counts for those calls taken out once."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from perfmodel.cost.compute import roofline_s
from perfmodel.cost.serve.decode_kernels import dense_gemm_calls
from perfmodel.cost.serve.engine import EngineCost
from perfmodel.inputs.case import load_case
from perfmodel.inputs.scenario import build_scenario
from perfmodel.inputs.stack import resolve_stack
from tests.conftest import write_yaml

SERVE = {
    "id": "serve-mi325x-dsr1", "source": "test", "kind": "serve", "hardware": "mi325x", "stack": "sglang@0.5.9",
    "gpus": 8, "model": {"id": "deepseek-v3"},
    "serve": {"engine_gpus": 8, "tp": 8, "precision": "fp8", "kv_cache_dtype": "fp8", "concurrency": 4,
              "requests": 40, "input_tokens": 1024, "output_tokens": 1024},
    "measured": {"tpot_mean_ms": 24.03},
}


def _cost(tmp_path: Path, **change: object) -> EngineCost:
    d = copy.deepcopy(SERVE)
    serve = change.pop("serve", {})
    d.update(change)
    d["serve"].update(serve)
    return EngineCost(build_scenario(load_case(write_yaml(tmp_path / "c.yaml", d))))


def _roofline(cost: EngineCost, tokens: float) -> float:
    return roofline_s(cost.dense_bytes, cost.bw, tokens * cost.dense_flops_per_token, cost.peak_gemm)


def test_deepseek_v3_runs_the_traces_189_dense_gemm_calls(tmp_path: Path) -> None:
    """3 per MLA layer (q_a, kv_a, output) over 61 layers and 2 per dense MLP over 3: the InferenceX #863 count."""
    assert dense_gemm_calls(_cost(tmp_path).model) == 3 * 61 + 2 * 3 == 189


def test_a_release_with_a_measured_call_time_prices_the_calls_less_their_floors(tmp_path: Path) -> None:
    cost = _cost(tmp_path)
    call_s = resolve_stack("sglang@0.5.9").rollout_rocm_dense_gemm_call_s
    assert call_s == pytest.approx(62.9e-6)
    floor = cost.params.kernel_floor_s
    measured = 189 * (call_s - floor) * cost.compute_scale
    assert cost.dense_gemm_s(4) == pytest.approx(measured)  # decode: the calls bind, not the weights' bytes
    assert cost.dense_gemm_s(4) > 10 * _roofline(cost, 4)
    # the calls and the floors floor_s counts for them come to calls x the measured time
    assert cost.dense_gemm_s(4) + 189 * floor * cost.compute_scale == pytest.approx(189 * call_s)
    assert cost.dense_gemm_s(65536) == pytest.approx(_roofline(cost, 65536))  # a long prefill: its FLOPs bind
    step = cost.step_breakdown(4, 1500)
    assert step["dense_gemm_s"] == pytest.approx(measured)
    assert step["total_s"] == pytest.approx(sum(v for k, v in step.items() if k.endswith("_s") and k != "total_s"))


def test_releases_without_a_measured_call_time_bf16_engines_and_cuda_keep_the_roofline(tmp_path: Path) -> None:
    later = _cost(tmp_path, stack="sglang@0.5.19")
    assert later.dense_gemm_s(4) == pytest.approx(_roofline(later, 4))
    bf16 = _cost(tmp_path, serve={"precision": "bf16", "kv_cache_dtype": "bf16"})
    assert bf16.dense_gemm_s(4) == pytest.approx(_roofline(bf16, 4))
    slower = _cost(tmp_path)
    assert slower.dense_gemm_s(4) > later.dense_gemm_s(4)
    cuda = _cost(tmp_path, hardware="h200")  # the release's CUDA build runs DeepGEMM, not aiter's measured GEMM
    assert cuda.dense_gemm_s(4) == pytest.approx(_roofline(cuda, 4))
