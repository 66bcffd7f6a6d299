"""Model FLOPs per token: the Megatron-Bridge convention against its published numbers
(docs/reference/hardware.md 3e)."""

from __future__ import annotations

import pytest

from perfmodel.cost.train.flops import model_flops_per_token
from perfmodel.inputs.model import load_model

# (model, seq_len, tokens/s/GPU, model TFLOP/s/GPU) from Megatron-Bridge performance-summary (S17)
PUBLISHED = [
    ("llama3-8b", 8192, 30624, 1576),  # DGX-B200 FP8-CS
    ("llama3-8b", 8192, 14451, 744),  # DGX-H100
    ("llama3-70b", 8192, 1602, 719),  # DGX-H100
    ("llama3.1-405b", 8192, 661, 1667),  # DGX-B200
    ("llama3.1-405b", 8192, 292, 737),  # DGX-H100
    ("deepseek-v3", 4096, 2139, 557),  # DGX-B200 FP8-MX
    ("qwen3-30b-a3b", 4096, 9299, 214),  # DGX-B200
    ("qwen3-30b-a3b", 4096, 5275, 121),  # DGX-H100
    ("qwen3-235b-a22b", 4096, 3269, 484),  # DGX-B200
    ("gpt-oss-120b", 4096, 8213, 223),  # DGX-B200 BF16
    ("gpt-oss-120b", 4096, 5630, 153),  # DGX-H100
]


@pytest.mark.parametrize(("model_id", "seq_len", "tokens_per_s", "tflops"), PUBLISHED)
def test_reproduces_megatron_bridge_model_tflops(model_id, seq_len, tokens_per_s, tflops):
    published = tflops * 1e12 / tokens_per_s
    assert model_flops_per_token(load_model(model_id), seq_len) == pytest.approx(published, rel=0.05)


# gpt-oss-120b at 4096 in the Megatron-Bridge archive (docs/perf-archive.md, studies/validation/mbridge-archive):
# (release, tokens/s/GPU, model TFLOP/s/GPU) on either side of the formula change of NeMo 26.06 (PR #3947)
GPT_OSS_ARCHIVE = [("26.04", 15938, 433, "mbridge-25.11"), ("26.04.01", 16640, 452, "mbridge-25.11"),
                   ("26.06", 28947, 943, "mbridge-26.06"), ("26.08", 28672, 934, "mbridge-26.06")]


@pytest.mark.parametrize(("release", "tokens_per_s", "tflops", "convention"), GPT_OSS_ARCHIVE)
def test_the_flops_convention_follows_the_release(release, tokens_per_s, tflops, convention):
    """From 26.06 a quick-GELU GLU counts 3 matrices and a 128-token window its average context: 27.2 -> 32.6
    GFLOP per token, as the archive's rows print; the release's stack profile carries the convention."""
    from perfmodel.inputs.stack import resolve_stack

    assert resolve_stack(f"megatron-bridge@{release}").flops_convention == convention
    got = model_flops_per_token(load_model("gpt-oss-120b"), 4096, convention=convention)
    assert got == pytest.approx(tflops * 1e12 / tokens_per_s, rel=0.01)


def test_the_new_convention_changes_only_non_silu_glus_and_windows():
    for model_id in ("llama3-70b", "deepseek-v3", "qwen3-30b-a3b"):
        m = load_model(model_id)
        assert model_flops_per_token(m, 4096, convention="mbridge-26.06") == model_flops_per_token(m, 4096)


def test_llama3_8b_is_six_params_plus_attention():
    m = load_model("llama3-8b")
    s = 8192
    body = sum(layer.params_active() - layer.norm_params for layer in m.layers)
    head = m.vocab_size * m.hidden_size
    attention = 32 * 2 * 2 * (s / 2) * 32 * 128  # layers x (QK + PV) x 2 FLOP x s/2 causal keys x q dims
    forward = 2 * (body + head) + attention
    assert model_flops_per_token(m, s) == pytest.approx(3 * forward, rel=1e-3)


def test_attention_term_grows_with_sequence():
    m = load_model("llama3-8b")
    assert model_flops_per_token(m, 16384) > model_flops_per_token(m, 8192)


def test_mtp_counted_for_deepseek():
    m = load_model("deepseek-v3")
    assert model_flops_per_token(m, 4096) > model_flops_per_token(m, 4096, include_mtp=False)
