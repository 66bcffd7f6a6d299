"""Per-layer work: FLOP counts, windows, DSV4 hybrid attention scaling, sharding."""

from __future__ import annotations

import pytest

from perfmodel.cost.train.layers import (
    HC_ELEMENTWISE_PASSES_BWD,
    HC_ELEMENTWISE_PASSES_FWD,
    Shard,
    attention_work,
    ffn_work,
    hc_work,
    layer_work,
    mean_keys_per_query,
)
from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.model import load_model


def _core(w) -> float:
    return sum(k.flops for k in w.kernels if k.name == "core_attention")


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama3-8b")


@pytest.fixture(scope="module")
def dsv4():
    return load_model("deepseek-v4-flash")


def test_llama3_8b_layer_flops_by_hand(llama8b):
    s = Shard(tokens=8192, seq_len=8192)
    w = layer_work(llama8b, llama8b.layers[0], s)
    h, q, kv, ffn = 4096, 4096, 1024, 14336
    gemm_per_token = 2 * (h * (q + 2 * kv) + q * h + 3 * h * ffn)  # 2 x layer weights
    core_per_token = 2 * 2 * (8193 / 2) * 32 * 128  # QK^T + PV, mean causal keys (s+1)/2
    assert sum(g.flops for g in w.gemms) / 8192 == pytest.approx(gemm_per_token, rel=1e-9)
    assert _core(w) / 8192 == pytest.approx(core_per_token, rel=1e-9)
    # forward hardware FLOPs per token ~ 2 x params + attention (norm/activation FLOPs are not counted)
    params = llama8b.layers[0].params_active() - llama8b.layers[0].norm_params
    assert (sum(g.flops for g in w.gemms) + _core(w)) / 8192 == pytest.approx(2 * params + core_per_token, rel=1e-6)


def test_mean_keys_causal_and_window():
    assert mean_keys_per_query(8, 0) == pytest.approx(4.5)
    # sliding window: keys per query capped at the window once past it
    assert mean_keys_per_query(100000, 128) == pytest.approx(128, rel=0.001)


def test_sliding_window_caps_attention(llama8b):
    oss = load_model("gpt-oss-120b")
    swa, full = oss.layers[0].attention, oss.layers[1].attention
    assert swa.sliding_window == 128 and full.sliding_window == 0
    short, long = Shard(tokens=4096, seq_len=4096), Shard(tokens=8192, seq_len=8192)
    # per token: windowed attention does not grow with the sequence, full attention doubles
    assert _core(attention_work(swa, long)) / 8192 == pytest.approx(_core(attention_work(swa, short)) / 4096, rel=0.01)
    assert _core(attention_work(full, long)) / 8192 == pytest.approx(
        2 * _core(attention_work(full, short)) / 4096, rel=0.01)


def _dsv4_layer(m, ratio: int):
    return next(layer for layer in m.layers if layer.attention.compress_ratio == ratio)


def test_hca_attends_window_plus_seq_over_128(dsv4):
    a = _dsv4_layer(dsv4, 128).attention
    for seq in (8192, 65536):
        per_token = _core(attention_work(a, Shard(tokens=seq, seq_len=seq))) / seq
        keys = per_token / (2 * a.num_heads * 2 * a.head_dim)
        assert keys == pytest.approx(128 + seq / 256, rel=0.01)  # window + mean causal compressed entries


def test_csa_sparse_attention_saturates_at_topk_and_indexer_grows(dsv4):
    a = _dsv4_layer(dsv4, 4).attention
    assert a.has_indexer and a.index_topk == 512
    keys = {}
    idx = {}
    for seq in (16384, 65536):
        w = attention_work(a, Shard(tokens=seq, seq_len=seq))
        keys[seq] = _core(w) / seq / (2 * a.num_heads * 2 * a.head_dim)
        idx[seq] = sum(k.flops for k in w.kernels if k.name == "indexer_scores_topk") / seq
    assert keys[65536] == pytest.approx(128 + 512, rel=0.02)  # window + top-512 once seq/4 >> 512
    assert keys[16384] < keys[65536] < 128 + 512 + 1
    assert idx[65536] == pytest.approx(4 * idx[16384], rel=0.01)  # the indexer scores all seq/4 entries
    # the lightning indexer scores at index_n_heads x index_head_dim per compressed entry (mean seq/8 causal)
    assert idx[65536] == pytest.approx(2 * 65536 / 8 * a.index_n_heads * (a.index_head_dim + 1), rel=0.01)


def test_swa_only_layer_has_no_compressor(dsv4):
    a = _dsv4_layer(dsv4, 0).attention
    w = attention_work(a, Shard(tokens=4096, seq_len=4096))
    names = {g.name for g in w.gemms} | {k.name for k in w.kernels}
    assert "compressor_kv_gate" not in names and "indexer_scores_topk" not in names


def test_tp_splits_heads_and_cp_splits_queries(llama8b):
    a = llama8b.layers[0].attention
    base = attention_work(a, Shard(tokens=8192, seq_len=8192))
    tp4 = attention_work(a, Shard(tokens=8192, seq_len=8192, tp=4, sequence_parallel=True))
    cp2 = attention_work(a, Shard(tokens=8192, seq_len=8192, cp=2))
    assert _core(tp4) == pytest.approx(_core(base) / 4)
    assert _core(cp2) == pytest.approx(_core(base) / 2)
    assert sum(g.flops for g in tp4.gemms) == pytest.approx(sum(g.flops for g in base.gemms) / 4)
    kinds = [(c.kind, c.op, c.phase) for c in tp4.comms]
    assert kinds.count(("tp", "all_gather", "fwd")) == 1 and kinds.count(("tp", "reduce_scatter", "fwd")) == 1
    assert {c.kind for c in cp2.comms} == {"cp"}


def test_moe_experts_over_ep_and_imbalance():
    m = load_model("qwen3-30b-a3b")
    f = m.layers[0].ffn
    s1 = Shard(tokens=4096, seq_len=4096)
    s8 = Shard(tokens=4096, seq_len=4096, ep=8)
    experts = lambda w: sum(g.flops for g in w.gemms if g.name.startswith("experts"))  # noqa: E731
    e1, e8 = experts(ffn_work(f, s1)), experts(ffn_work(f, s8))
    # each GPU still processes its own tokens x top_k rows (balanced): same FLOPs, 1/8 of the experts each
    assert e8 == pytest.approx(e1)
    assert experts(ffn_work(f, s8, imbalance=1.5)) == pytest.approx(1.5 * e1)
    a2a = [c for c in ffn_work(f, s8).comms if c.kind == "ep_a2a"]
    assert len(a2a) == 4  # dispatch + combine forward, their gradients backward
    # expert FLOPs per token = top_k x 2 x 3 x hidden x expert_ffn
    assert e1 / 4096 == pytest.approx(8 * 2 * 3 * 2048 * 768)


def test_deepep_dispatch_carries_one_copy_per_token(dsv4):
    f = next(layer.ffn for layer in dsv4.layers if layer.ffn.kind == "moe")
    s = Shard(tokens=4096, seq_len=4096, ep=8, moe_dispatcher="deepep")
    a2a = [c for c in ffn_work(f, s).comms if c.kind == "ep_a2a"]
    assert len(a2a) == 4 and all(c.dispatch.dedup and (c.dispatch.top_k, c.dispatch.experts) == (f.top_k, f.num_experts)
                                 for c in a2a)
    assert a2a[1].nbytes == pytest.approx(4096 * f.hidden_size * 2)  # combine: one BF16 row per token
    plain = [c for c in ffn_work(f, Shard(tokens=4096, seq_len=4096, ep=8)).comms if c.kind == "ep_a2a"]
    assert not plain[1].dispatch.dedup and plain[1].nbytes == pytest.approx(f.top_k * a2a[1].nbytes)


def test_mhc_is_memory_bound_over_hc_streams(dsv4):
    s = Shard(tokens=4096, seq_len=4096)
    w = hc_work(dsv4, s)
    assert len(w.kernels) == 1 and not w.gemms
    k = w.kernels[0]
    state = 4096 * 4 * 4096 * 4  # tokens x hc_mult x hidden x FP32
    assert k.hbm_bytes == pytest.approx(HC_ELEMENTWISE_PASSES_FWD * state)
    assert k.bwd_hbm_bytes == pytest.approx(HC_ELEMENTWISE_PASSES_BWD * state)
    # on the trace GPU it reproduces the measured ~3.4 ms forward / ~6.6 ms backward per layer (flash.json)
    hw = load_hardware("mi355x")
    fwd_s = k.hbm_bytes / (hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency)
    bwd_s = k.bwd_hbm_bytes / (hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency)
    assert 3.2e-3 < fwd_s < 3.7e-3 and 6.3e-3 < bwd_s < 7.0e-3
    assert hc_work(load_model("llama3-8b"), s).kernels == ()


