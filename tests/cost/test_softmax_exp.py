"""The attention softmax's exponentials (cost/compute.py softmax_exp_s): where a profile gives them a rate
(Blackwell: the second attention MMA waits for them) every score pays one, in the training core forward and
backward and in the engine's prefill; where it gives none (Hopper: hidden under the MMAs) nothing changes."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.cost.compute import attention_time_s, softmax_exp_s
from perfmodel.cost.serve.engine import EngineCost, rollout_params_for
from perfmodel.cost.train.attention import attention_work, mean_keys_per_query
from perfmodel.cost.train.work import Shard
from perfmodel.inputs.case import load_case
from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.model import load_model
from perfmodel.inputs.scenario import build_scenario
from tests.conftest import REPO

B200, GB200, GB300, H100 = (load_hardware(h) for h in ("b200", "gb200", "gb300", "h100-sxm"))


def test_each_score_pays_one_exponential_at_the_profiles_rate_and_none_without_one() -> None:
    scores = 3e12
    assert softmax_exp_s(B200, scores) == pytest.approx(scores / B200.attention_softmax_exp_per_s)
    assert softmax_exp_s(H100, scores) == 0.0 == H100.attention_softmax_exp_per_s
    assert softmax_exp_s(B200, 0.0) == 0.0
    # Blackwell Ultra doubles the SFU's exponentials (NVIDIA's MUFU.EX2 benchmark: 10,024 vs 4,943 G/s)
    assert softmax_exp_s(GB200, scores) / softmax_exp_s(GB300, scores) == pytest.approx(2.03, abs=0.01)


@pytest.mark.parametrize("backward", [False, True])
def test_a_compute_bound_flash_core_adds_its_exponentials_forward_and_backward(backward: bool) -> None:
    flops, nbytes, scores = 4e12, 1e6, 4e12 / 512  # head_dim 128: 4 x 128 FLOPs per score
    with_exp = attention_time_s(B200, flops, nbytes, backward=backward, scores=scores)
    without = attention_time_s(B200, flops, nbytes, backward=backward)
    assert with_exp - without == pytest.approx(scores / B200.attention_softmax_exp_per_s)
    assert attention_time_s(H100, flops, nbytes, backward=backward, scores=scores) == \
        pytest.approx(attention_time_s(H100, flops, nbytes, backward=backward))


def test_the_training_core_counts_its_causal_scores_per_local_head() -> None:
    model = load_model("llama3-8b")
    a = model.layers[0].attention
    s = Shard(tokens=2 * 8192, seq_len=8192, tp=2)
    core = next(k for k in attention_work(a, s).kernels if k.name == "core_attention")
    assert core.scores == pytest.approx(s.tokens * mean_keys_per_query(8192, 0) * a.num_heads / 2)
    assert core.scores > 0


def test_the_engine_prefill_pays_each_causal_score_of_each_layer_once() -> None:
    """An MLA engine (DeepSeek-R1, one TP8 engine on B200): every layer's query heads on the GPU score every earlier
    prompt token, p (p + 1) / 2 pairs per prompt."""
    scn = build_scenario(load_case(REPO / "studies" / "validation" / "sglang-serving" / "cases"
                                   / "serve-b200-dsr1-fp8-tp8-1k1k-c64.yaml"))
    device_bound = dataclasses.replace(rollout_params_for(scn), prefill_kernel_host_s=0.0)  # no issue-time floor
    cost = EngineCost(scn, device_bound)
    without = EngineCost(scn, device_bound)
    without.hw = dataclasses.replace(cost.hw, attention_softmax_exp_per_s=0.0)
    g = cost.geo
    heads = sum(layer.attention.num_heads / g.attn_tp for layer in cost.model.layers) / g.attn_dp
    prompts = [300, 1000, 1000]
    scores = heads * sum(p * (p + 1) / 2 for p in prompts)
    assert cost.prefill_s(prompts) - without.prefill_s(prompts) == pytest.approx(
        scores / cost.hw.attention_softmax_exp_per_s * cost.compute_scale)
