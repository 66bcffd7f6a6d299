"""Attention blocks (GQA/MHA, MLA, DeepSeek-V4 hybrid) as work lists for one GPU and one micro-batch.

Flash-style cost: core FLOPs = 2 x (QK^T + PV) over the keys each query sees (causal pairs, capped by a
sliding window, plus compressed entries for DSV4), split over TP heads and CP query shards; K/V are read once.
See `layers.py` for the shared conventions (backward factors, sharding, recompute).
"""

from __future__ import annotations

from perfmodel.cost.dtypes import dtype_bytes
from perfmodel.cost.train.work import (
    ACT_BYTES,
    CORE_ATTN,
    FP32_BYTES,
    INDEXER_BWD_FACTOR,
    MLA_UP_PROJ,
    Builder,
    Kernel,
    Shard,
    Work,
    cp_exchange,
    tp_block,
)
from perfmodel.inputs.model import AttentionSpec

# ---------------------------------------------------------------------------------------------------------------
# Keys per query


def mean_keys_per_query(
    seq_len: int, window: int = 0, ratio: int = 0, topk: int = 0, include_window: bool = True
) -> float:
    """Mean number of keys a causal query attends to, over positions p = 1..seq_len: min(p, window) raw keys
    (all p when window is 0) plus the compressed entries visible at p (floor(p / ratio)), capped at topk when the
    entries are selected sparsely. include_window=False counts only the compressed part. Closed-form integer
    sums: exact, and no cache needed."""
    n = int(seq_len)
    total = 0
    if include_window:
        w = int(window)
        total += n * (n + 1) // 2 if not w or n <= w else w * (w + 1) // 2 + (n - w) * w
    if ratio:
        r, k = int(ratio), int(topk)
        q, rem = divmod(n, r)  # floor(p / r) = j for r of the p's each, j = 1..q-1; rem + 1 of them reach q
        if not k or q <= k:
            total += r * q * (q - 1) // 2 + q * (rem + 1)
        else:  # entries beyond k are capped at k
            total += r * k * (k - 1) // 2 + k * (n - k * r + 1)
    return total / n


# ---------------------------------------------------------------------------------------------------------------
# Attention


def flash_core(rows: float, tokens: float, seq_len: int, heads: float, kv_heads: float, d: int, dv: int,
               window: int = 0) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of a causal flash-attention forward on one GPU: `rows` queries of sequences of
    `seq_len` against their keys (`tokens` of K/V read once), `heads` query and `kv_heads` K/V heads of dims
    d (QK) and dv (PV). The training GQA core and `perfmodel kernels check` price with it."""
    keys = mean_keys_per_query(seq_len, window)
    flops = 2.0 * rows * keys * heads * (d + dv)
    nbytes = (rows * heads * (d + dv) + tokens * kv_heads * (d + dv)) * ACT_BYTES
    return flops, nbytes


def materialized_core(b: Builder, s: Shard, heads_local: float, d: int, dv: int) -> None:
    """Unfused core attention (Megatron's local DotProductAttention, Korthikanti et al. 2022 section 4.1): per
    sequence and local head a batched QK^T GEMM writes the full s x s scores (masking happens after, so every
    pair is computed), a fused scale-mask-softmax reads and writes them (BF16), and a batched GEMM multiplies
    the probabilities by V. Backward: two gradients per GEMM and the softmax backward (reads its output and
    the incoming gradient, writes the score gradient). Selective recompute replays all three. Queries of this
    CP rank against the keys of the whole sequence."""
    q = s.seq_len / s.cp
    batch = max(1, round(s.sequences * heads_local))
    scores = batch * q * s.seq_len
    b.gemm("scores_qk", q, s.seq_len, d, batch=batch, core=True)
    b.kernels.append(Kernel("scale_mask_softmax", "mem", 0.0, scores * 2 * ACT_BYTES, 0.0, scores * 3 * ACT_BYTES,
                            module=CORE_ATTN))
    b.gemm("probs_v", q, dv, s.seq_len, batch=batch, core=True)


def _gqa(b: Builder, a: AttentionSpec, s: Shard) -> None:
    h, tp, prec = a.hidden_size, s.tp, s.precision
    hl = a.num_heads / tp
    kvl = a.num_kv_heads / tp if a.num_kv_heads >= tp else 1.0
    d, dv = a.head_dim, a.v_head_dim
    rows = s.t_cp
    b.gemm("qkv", rows, hl * d + kvl * (d + dv), h, dtype=prec)
    rope = rows * (hl + kvl) * d * ACT_BYTES * 2
    b.mem("rope", rope * (2 if a.qk_norm else 1), kernels=2 if a.qk_norm else 1)
    if s.attention_kernel == "materialized":
        materialized_core(b, s, hl, d, dv)
    else:
        b.attn("core_attention", *flash_core(rows, s.tokens, s.seq_len, hl, kvl, d, dv, a.sliding_window),
               query_heads=rows * hl, scores=rows * mean_keys_per_query(s.seq_len, a.sliding_window) * hl)
    b.gemm("o_proj", rows, h, hl * dv, dtype=prec)
    tp_block(b, s, h)
    kv_full = s.tokens * kvl * (d + dv) * ACT_BYTES
    if a.sliding_window and a.sliding_window * s.cp < s.seq_len:
        kv_full = min(kv_full, s.cp * s.sequences * a.sliding_window * kvl * (d + dv) * ACT_BYTES)
    cp_exchange(b, s, kv_full)


def _mla(b: Builder, a: AttentionSpec, s: Shard) -> None:
    h, tp, prec = a.hidden_size, s.tp, s.precision
    hl = a.num_heads / tp
    r, c, rope, dqk, dv = a.q_lora_rank, a.kv_lora_rank, a.qk_rope_head_dim, a.head_dim, a.v_head_dim
    down_rows = s.t_sp  # duplicated down projections on the sequence-parallel rows
    rows = s.t_cp
    if r:
        b.gemm("q_a", down_rows, r, h, dtype=prec)
    b.gemm("kv_a", down_rows, c + rope, h, dtype=prec)
    b.mem("latent_norms", down_rows * (r + c) * ACT_BYTES * 2, kernels=2)
    with b.within(MLA_UP_PROJ):  # Megatron MLA qkv_up_proj_and_rope_apply: up projections and RoPE
        if r:
            b.gemm("q_b", rows, hl * dqk, r, dtype=prec)
        else:
            b.gemm("q", rows, hl * dqk, h, dtype=prec)
        b.gemm("kv_b", rows, hl * (dqk - rope + dv), c, dtype=prec)
        b.mem("rope", rows * (hl + 1) * rope * ACT_BYTES * 2)
    keys = mean_keys_per_query(s.seq_len, a.sliding_window)
    flops = 2.0 * rows * keys * hl * (dqk + dv)
    nbytes = (rows * hl * (dqk + dv) + s.tokens * hl * (dqk + dv)) * ACT_BYTES
    b.attn("core_attention", flops, nbytes, query_heads=rows * hl, scores=rows * keys * hl)
    b.gemm("o_proj", rows, h, hl * dv, dtype=prec)
    latent = (r + c + rope) * ACT_BYTES if s.sequence_parallel else None
    tp_block(b, s, h, latent)
    cp_exchange(b, s, s.tokens * hl * (dqk + dv) * ACT_BYTES)


def _dsv4(b: Builder, a: AttentionSpec, s: Shard) -> None:
    """DeepSeek-V4 hybrid attention (docs/reference/dsv4-flash-and-miles.md 1.3): one latent KV head of dim head_dim
    shared by all heads (MQA), a raw sliding window on every layer, plus CSA (ratio 4: compressor + lightning indexer
    + top-k sparse attention) or HCA (ratio 128: dense over the compressed entries); grouped output projection."""
    h, tp, prec = a.hidden_size, s.tp, s.precision
    hl = a.num_heads / tp
    hd, r, ratio, w = a.head_dim, a.q_lora_rank, a.compress_ratio, a.sliding_window
    rows = s.t_cp
    b.gemm("wq_a", rows, r, h, dtype=prec)
    b.gemm("wkv", rows, hd, h, dtype=prec)
    b.mem("q_kv_norms", rows * (r + hd) * ACT_BYTES * 2, kernels=2)
    with b.within(MLA_UP_PROJ):  # taken as MLA's: the query up projection and RoPE
        b.gemm("wq_b", rows, hl * hd, r, dtype=prec)
        b.mem("rope", rows * (hl + 1) * a.qk_rope_head_dim * ACT_BYTES * 2)
    kv_entries = s.tokens  # latent KV rows (window source)
    cp_bytes = s.cp * s.sequences * w * hd * ACT_BYTES  # window boundary from the neighbouring rank
    if ratio:
        coff = 2 if ratio == 4 else 1  # overlapping windows for ratio 4 (inputs/model_spec.py _compressor_params)
        b.gemm("compressor_kv_gate", rows, coff * hd, h, batch=2, dtype=prec)
        b.mem("compressor_pool", rows * 2 * coff * hd * ACT_BYTES + rows / ratio * hd * ACT_BYTES)
        kv_entries = s.tokens / ratio
        cp_bytes += s.tokens / ratio * hd * ACT_BYTES
    topk = a.index_topk if a.has_indexer else 0
    if a.has_indexer:
        ih, ihd = a.index_n_heads, a.index_head_dim
        idt = "fp8" if s.precision == "fp8" else "bf16"
        b.gemm("indexer_wq_b", rows, ih * ihd, r, dtype=prec)
        b.gemm("indexer_weights", rows, ih, h, dtype=prec)
        b.gemm("indexer_compressor", rows, 2 * ihd, h, batch=2, dtype=prec)
        b.mem("indexer_compressor_pool", rows * 4 * ihd * ACT_BYTES + rows / ratio * ihd * ACT_BYTES)
        keys_idx = mean_keys_per_query(s.seq_len, 0, ratio, 0, include_window=False)
        q = dtype_bytes(idt)
        flops = 2.0 * rows * keys_idx * ih * (ihd + 1)  # q.k per index head, then the weighted sum over heads
        nbytes = rows * ih * ihd * q + s.tokens / ratio * ihd * q + rows * keys_idx * FP32_BYTES * 2 + rows * topk * 4
        b.attn("indexer_scores_topk", flops, nbytes, idt, INDEXER_BWD_FACTOR, core=False)
        cp_bytes += s.tokens / ratio * ihd * ACT_BYTES
    keys = mean_keys_per_query(s.seq_len, w, ratio, topk)
    flops = 2.0 * rows * keys * hl * (hd + hd)  # QK^T and PV over the shared 512-dim latent
    # KV entries read once per CP rank's pass and reused from L2 across neighbouring queries (FlashMLA's
    # sparse kernels run compute-bound), plus the gathered indices.
    nbytes = rows * hl * hd * 2 * ACT_BYTES + kv_entries * hd * ACT_BYTES + rows * topk * 4
    b.attn("core_attention", flops, nbytes, query_heads=rows * hl, scores=rows * keys * hl, sparse=True)
    groups_local = a.o_groups / tp  # wo_a is one GEMM per output group; TP splits the groups
    batch = max(1, int(groups_local))
    b.gemm("wo_a", rows, a.o_lora_rank, hl * hd / batch, batch=batch, dtype=prec)
    b.gemm("wo_b", rows, h, groups_local * a.o_lora_rank, dtype=prec)
    tp_block(b, s, h)
    cp_exchange(b, s, cp_bytes)


def attention_work(a: AttentionSpec, s: Shard) -> Work:
    b = Builder()
    {"gqa": _gqa, "mla": _mla, "dsv4": _dsv4}[a.kind](b, a, s)
    return b.build()
