"""A per-head attention term fitted on one GPU is carried to another by the two GPUs' SM-cycles per second
(docs/kernels.md 'A fit carried to another GPU'): the profiles' numbers follow from their SM counts and peaks."""

from __future__ import annotations

import pytest

from perfmodel.inputs.hardware import HardwareProfile, load_hardware

PER_HEAD = ("attention_decode_kv_head_s", "attention_decode_query_head_s", "attention_prefill_query_head_s")
# dense BF16 FLOP per clock per SM: Ampere 2048 (A100 312 TFLOP/s at 108 SMs x 1.41 GHz), Hopper and Blackwell 4096
# and 8192 (the ratio of peaks within one architecture is the ratio of SM-cycles; only A100 crosses one)
FLOP_PER_CLOCK_PER_SM = {"a100-80gb": 2048, "h100-sxm": 4096, "b200": 8192, "gb200": 8192, "gb300": 8192}


def sm_cycles_per_s(hw: HardwareProfile, hw_id: str) -> float:
    peak = hw.peak_flops["bf16"]
    return peak / FLOP_PER_CLOCK_PER_SM[hw_id]  # = SMs x clock


@pytest.mark.parametrize(("target", "fitted"), [("a100-80gb", "h100-sxm"), ("gb200", "b200"), ("gb300", "b200")])
def test_per_head_terms_scale_with_sm_cycles(target: str, fitted: str) -> None:
    t, f = load_hardware(target), load_hardware(fitted)
    ratio = sm_cycles_per_s(f, fitted) / sm_cycles_per_s(t, target)
    for name in PER_HEAD:
        assert getattr(t, name) == pytest.approx(getattr(f, name) * ratio, rel=0.01), name


def test_a100_takes_longer_per_head_and_gb300_less() -> None:
    """The direction the SM-cycles give: the A100 has fewer, slower SMs than the H100; GB300 more than B200."""
    assert load_hardware("a100-80gb").attention_decode_kv_head_s > load_hardware("h100-sxm").attention_decode_kv_head_s
    assert load_hardware("gb300").attention_decode_kv_head_s < load_hardware("b200").attention_decode_kv_head_s
