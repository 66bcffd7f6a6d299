"""Per-GPU memory of a training rank and of an SGLang rollout GPU (issue #3, item 3).

`training_memory(scn, pipeline_rank)` sums, for one pipeline rank (the worst one when `pipeline_rank` is None):

* weights: BF16 parameters of the rank's virtual stages (+ TE's cached FP8 copies when training in FP8);
* grads: Megatron's main-grad buffer, FP32 by default (`accumulate_allreduce_grads_in_fp32`, forced on for BF16
  unless `--grad-reduce-in-bf16`), BF16 with `grad_reduce_in_bf16=True`;
* optimizer: FP32 master weights + Adam exp_avg + exp_avg_sq = 12 bytes/param, sharded by the distributed optimizer
  (dense params over dp x cp, routed experts over expert_dp); the `optimizer_offload_fraction` share lives on the
  host (`optimizer_host_bytes`, checked against host memory per GPU);
* activations of the micro-batches in flight for the schedule (Korthikanti et al. 2022, generalised per layer kind);
* communication buffers (collective-library buffers per process group, the MoE all-to-all send buffer, PP p2p
  buffers, FSDP unshard buffers);
* a margin for allocator fragmentation, the GPU runtime context and library workspaces.

`rollout_memory(scn)` gives an SGLang engine GPU: weights in the rollout precision, the KV pool left by
`--mem-fraction-static` (or capped by `--max-total-tokens`), the KV bytes per token and the pool's token capacity.

Bytes are SI-free counts (plain bytes); `summary()` prints GB = 1e9 bytes, as GPU memory is sold.

Megatron byte model (megatron/training/theoretical_memory_usage.py in NVIDIA/Megatron-LM, and its
docs/user-guide/features/dist_optimizer.md): 18 bytes/param without the distributed optimizer (2 BF16 weight +
4 FP32 grad + 12 FP32 master/Adam), 6 + 12/dp with it. This module reproduces that and adds what the formula
leaves out (EP-aware experts, MTP/embedding placement per stage, MoE and mHC activations, buffers, margin).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.sim.invariants import check_parts_non_negative
from perfmodel.inputs.model import AttentionSpec, FFNSpec, LayerSpec, ModelSpec
from perfmodel.inputs.scenario import Scenario

GiB = 1024**3
GB = 1e9

# --- bytes per element ----------------------------------------------------------------------------------------
BF16 = 2
FP32 = 4
INT64 = 8  # token ids (Megatron theoretical_memory_usage.py: "8 * seq_length * micro_batch_size" input to embedding)
INT32 = 4  # top-k indices of the DSV4 indexer
MASK = 1  # a dropout mask element (Korthikanti et al. 2022, Sec. 4.1: "the dropout mask ... 1 byte per element")

# FP32 master weights + Adam exp_avg + exp_avg_sq: Megatron docs/user-guide/features/dist_optimizer.md (12 of the
# 18 bytes/param) and theoretical_memory_usage.py `6 + 12 / data_parallel_size`.
OPTIMIZER_STATE_BYTES = 12
# Megatron HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py) keeps a pinned FP32
# CPU copy of each offloaded parameter's grad (`cpu_copy_map_grad`, pin_cpu_grads=True) next to the CPU state.
HOST_GRAD_COPY_BYTES = 4
# Transformer Engine caches the FP8 weight (row-wise) and its transpose (column-wise, for dgrad) across
# micro-batches when Megatron passes `is_first_microbatch`; 1 byte each per GEMM weight. Estimate.
FP8_WEIGHT_CACHE_BYTES = 2

# Collective-library buffers per communicator: NCCL/RCCL NCCL_BUFFSIZE default 4 MiB per channel and direction
# (NCCL env docs), up to 32 channels (NCCL MAXCHANNELS) x (send + recv) = 256 MiB. Estimate per process group.
COMM_BUFFER_PER_GROUP_BYTES = 4 * 1024**2 * 32 * 2

# Margin: PyTorch caching-allocator fragmentation grows with the pool (5% of HBM) plus a fixed 2 GiB for the GPU
# runtime context, kernels and BLAS (cuBLASLt / hipBLASLt) workspaces. On a 288 GB MI355X this gives 15.4 GiB,
# next to the 16 GiB `--train-memory-margin-bytes` of the Miles AMD launcher used for the seed run (radixark/miles
# PR #1300 scripts/amd/run_deepseek_v4.py); the later colocated AMD launcher uses 3 GiB (see
# /work/shared/reference/dsv4-flash-and-miles.md 2.1, 2.2). Override with `margin_bytes=`.
MARGIN_FRACTION_OF_HBM = 0.05
MARGIN_FIXED_BYTES = 2 * GiB

# FP8 rollout weights: 1 byte per GEMM weight + one FP32 scale per 128 x 128 block (quantization_config
# weight_block_size [128, 128]; the sgl-project/DeepSeek-V4-Flash-FP8 repackage stores every scale as F32,
# /work/shared/reference/dsv4-flash-and-miles.md 1.6).
FP8_BLOCK = 128 * 128
FP8_WEIGHT_BYTES = 1 + FP32 / FP8_BLOCK

# DSV4 SGLang decode state ([BLOG-DAY0] in /work/shared/reference/dsv4-flash-and-miles.md 1.3): every layer keeps
# the last 128 raw tokens (SWA) per request; compression-state rings hold C4: 8 and C128: 128 not-yet-compressed
# entries. The ring entry layout follows the reference Compressor buffers kv_state / score_state of shape
# [coff * ratio, coff * head_dim] in FP32 (coff = 2 for ratio 4, else 1), whose first dimension gives exactly the
# 8 / 128 above. [inference]
DSV4_STATE_BYTES = FP32


# ---------------------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes on one training GPU (the given or worst pipeline rank). `total_bytes` is HBM only."""

    pipeline_rank: int
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float  # on the GPU (the share not offloaded)
    optimizer_host_bytes: float  # offloaded optimizer state + its FP32 grad copy, in host memory
    activations_bytes: float
    comm_buffers_bytes: float
    margin_bytes: float
    total_bytes: float
    capacity_bytes: float  # HBM per GPU
    host_capacity_bytes: float  # host memory per GPU (node memory / GPUs per node)
    fits: bool  # HBM and host both fit
    params_dense: float = 0.0  # non-expert parameters held by this rank (weights, not grads)
    params_expert: float = 0.0  # routed-expert parameters held by this rank
    tokens_per_microbatch: float = 0.0  # per GPU, after CP
    microbatches_in_flight: float = 0.0  # stage-micro-batches whose activations the rank holds at peak

    def __post_init__(self) -> None:
        check_parts_non_negative("memory parts >= 0", f"training memory, pipeline rank {self.pipeline_rank}",
                                 self.components() | {"optimizer_host": self.optimizer_host_bytes,
                                                      "total": self.total_bytes})

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes

    @property
    def host_headroom_bytes(self) -> float:
        return self.host_capacity_bytes - self.optimizer_host_bytes

    @property
    def hbm_fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def host_fits(self) -> bool:
        return self.optimizer_host_bytes <= self.host_capacity_bytes

    def components(self) -> dict[str, float]:
        return {
            "weights": self.weights_bytes,
            "grads": self.grads_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "comm_buffers": self.comm_buffers_bytes,
            "margin": self.margin_bytes,
        }

    def summary(self) -> str:
        parts = " + ".join(f"{k} {v / GB:.1f}" for k, v in self.components().items())
        line = (f"pipeline rank {self.pipeline_rank}: {parts} = {self.total_bytes / GB:.1f} GB of "
                f"{self.capacity_bytes / GB:.1f} GB HBM")
        line += " (fits" if self.hbm_fits else f" (does NOT fit: {-self.headroom_bytes / GB:.1f} GB over"
        line += f"); host optimizer {self.optimizer_host_bytes / GB:.1f} of {self.host_capacity_bytes / GB:.1f} GB"
        line += "" if self.host_fits else f" (does NOT fit: {-self.host_headroom_bytes / GB:.1f} GB over)"
        return line


@dataclass(frozen=True, slots=True)
class RolloutMemory:
    """Bytes on one SGLang engine GPU."""

    weights_bytes: float
    kv_pool_bytes: float
    reserved_bytes: float  # HBM x (1 - mem_fraction_static): activations, CUDA/HIP graphs, NCCL, left by SGLang
    kv_bytes_per_token: float  # per GPU, all layers, growing with context
    kv_bytes_per_request_fixed: float  # per GPU and running request, independent of its length (DSV4 SWA + state)
    kv_capacity_tokens: int  # tokens the pool holds, ignoring the per-request fixed part
    total_bytes: float
    capacity_bytes: float
    fits: bool  # the weights leave a non-empty KV pool inside the static fraction

    def __post_init__(self) -> None:
        check_parts_non_negative("memory parts >= 0", "rollout engine memory",
                                 {"weights": self.weights_bytes, "kv_pool": self.kv_pool_bytes,
                                  "reserved": self.reserved_bytes, "total": self.total_bytes})

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes

    def max_requests(self, context_tokens: int) -> int:
        """Running requests of `context_tokens` each that the pool holds at once."""
        per = context_tokens * self.kv_bytes_per_token + self.kv_bytes_per_request_fixed
        return int(self.kv_pool_bytes // per) if per > 0 else 0

    def summary(self) -> str:
        return (f"rollout GPU: weights {self.weights_bytes / GB:.1f} + KV pool {self.kv_pool_bytes / GB:.1f} "
                f"({self.kv_capacity_tokens:,} tokens at {self.kv_bytes_per_token:,.0f} B/token"
                + (f", +{self.kv_bytes_per_request_fixed / 1e6:.1f} MB per request" if self.kv_bytes_per_request_fixed
                   else "")
                + f") + reserved {self.reserved_bytes / GB:.1f} = {self.total_bytes / GB:.1f} GB of "
                f"{self.capacity_bytes / GB:.1f} GB" + ("" if self.fits else " (does NOT fit: no KV pool left)"))


# ---------------------------------------------------------------------------------------------------------------
# Parameters per rank
#
# Megatron shards attention heads and MLP widths over TP (column/row parallel), keeps norms, routers and the
# MLA/DSV4 latent down-projections replicated (megatron/core/transformer/multi_latent_attention.py builds
# linear_q_down_proj / linear_kv_down_proj with parallel_mode='duplicated'), splits each GQA KV head over TP only
# while kv_heads >= tp (otherwise each rank holds one replicated head), and shards routed experts over EP x ETP.


@dataclass(frozen=True, slots=True)
class _Local:
    params: float  # parameters held by one rank
    non_gemm: float  # of which not GEMM weights (norms, biases, sinks, router, mHC mixers): stay BF16 in FP8 recipes


def _compressor_params(hidden: int, ratio: int, head_dim: int) -> int:
    """DSV4 Compressor (ape, wkv, wgate, norm), as counted by perfmodel.inputs.model (kept in step by
    tests/test_memory.py::test_split_params_sum_to_the_model_at_tp1)."""
    width = (2 if ratio == 4 else 1) * head_dim
    return ratio * width + 2 * hidden * width + head_dim


def attention_params_local(a: AttentionSpec, tp: int) -> _Local:
    """Attention parameters held by one of `tp` tensor-parallel ranks; equals `a.params()` at tp=1."""
    d, h = a.hidden_size, a.num_heads
    if a.kind == "gqa":
        kv_div = min(tp, a.num_kv_heads)
        q, k, v = h * a.head_dim, a.num_kv_heads * a.head_dim, a.num_kv_heads * a.v_head_dim
        gemm = (d * q + h * a.v_head_dim * d) / tp + d * (k + v) / kv_div
        non_gemm = (q / tp + (k + v) / kv_div) * a.qkv_bias + d * a.o_bias + 2 * a.head_dim * a.qk_norm
    elif a.kind == "mla":
        r, c, q_out = a.q_lora_rank, a.kv_lora_rank, h * a.head_dim
        gemm = (d * r + r * q_out / tp) if r else d * q_out / tp
        gemm += d * (c + a.qk_rope_head_dim) + c * h * (a.head_dim - a.qk_rope_head_dim + a.v_head_dim) / tp
        gemm += h * a.v_head_dim * d / tp
        non_gemm = r + c  # q_a and kv_a layernorms
    else:  # dsv4
        r, hd, g = a.q_lora_rank, a.head_dim, a.o_groups
        gemm = d * r + r * h * hd / tp + d * hd  # wq_a, kv latent replicated; wq_b head-parallel
        gemm += ((h * hd // g) * (g * a.o_lora_rank) + g * a.o_lora_rank * d) / tp  # grouped wo_a, wo_b
        non_gemm = r + hd  # q_norm, kv_norm
        if a.compress_ratio:
            gemm += _compressor_params(d, a.compress_ratio, hd)  # one latent head: replicated
        if a.has_indexer:
            ih, ihd = a.index_n_heads, a.index_head_dim
            gemm += (r * ih * ihd + d * ih) / tp + _compressor_params(d, a.compress_ratio, ihd)
    non_gemm += h * a.has_sinks / tp
    return _Local(gemm + non_gemm, non_gemm)


def ffn_params_local(f: FFNSpec, tp: int) -> tuple[_Local, float]:
    """(non-expert params held by one of `tp` ranks, routed-expert params of the whole layer)."""
    if f.kind == "dense":
        return _Local(f.mlp_params(f.intermediate_size) / tp, 0.0), 0.0
    shared = f.num_shared_experts * f.mlp_params(f.shared_intermediate_size) / tp
    routed = f.num_experts * f.mlp_params(f.expert_intermediate_size)
    return _Local(shared + f.router_params, f.router_params), float(routed)


def layer_params_local(layer: LayerSpec, tp: int, expert_shards: int, attn_tp: int | None = None) -> tuple[_Local, float]:
    """(non-expert params on one rank, routed-expert params on one rank) for one decoder (or MTP) layer.
    mHC mixers, norms and the MTP projections are counted replicated (small)."""
    a = attention_params_local(layer.attention, attn_tp or tp)
    f, routed = ffn_params_local(layer.ffn, tp)
    rest = layer.norm_params + layer.hc_params + layer.mtp_params
    non_gemm = a.non_gemm + f.non_gemm + layer.norm_params + layer.hc_params
    return _Local(a.params + f.params + rest, non_gemm), routed / expert_shards


# ---------------------------------------------------------------------------------------------------------------
# Pipeline placement


def _stage_offsets(scn: Scenario) -> list[int]:
    out, acc = [], 0
    for n in scn.stage_layers:
        out.append(acc)
        acc += n
    return out


def stages_on_rank(scn: Scenario, rank: int) -> list[int]:
    """Virtual stages held by pipeline rank `rank`: j * pp + rank (Megatron interleaving); DualPipe(V) holds two
    chunks in a V, stages r and 2pp-1-r (DualPipe's second parameter copy is counted in params_on_rank)."""
    pp = scn.layout.pp
    if scn.schedule in ("dualpipe", "dualpipev"):  # two chunks per rank in a V: stages r and 2pp-1-r
        return sorted({rank, 2 * pp - 1 - rank})
    return [j * pp + rank for j in range(len(scn.stage_layers) // pp)]


def _holds_embedding(scn: Scenario, rank: int) -> bool:
    return 0 in stages_on_rank(scn, rank)


def _holds_head(scn: Scenario, rank: int) -> bool:
    """LM head, final norm and MTP live with the last virtual stage; DualPipeV folds the last chunk back onto
    rank 0 (V shape, deepseek-ai/DualPipe README)."""
    if scn.schedule == "dualpipev":
        return rank == 0
    return len(scn.stage_layers) - 1 in stages_on_rank(scn, rank)


def _layers_of_stage(scn: Scenario, stage: int) -> tuple[LayerSpec, ...]:
    off = _stage_offsets(scn)[stage]
    return scn.model.layers[off: off + scn.stage_layers[stage]]


def params_on_rank(scn: Scenario, rank: int) -> tuple[float, float, float]:
    """(non-expert params, routed-expert params, non-GEMM params) held by pipeline rank `rank`, before any
    data-parallel sharding. Embedding on the first stage, LM head + final norm + MTP on the last (untied); a tied
    head on another stage keeps its own copy; Megatron also builds the embedding on the MTP stage
    (megatron/core/models/gpt/gpt_model.py: `if self.pre_process or self.mtp_process: self.embedding = ...`)."""
    m, lay = scn.model, scn.layout
    dense = expert = non_gemm = 0.0
    for stage in stages_on_rank(scn, rank):
        for layer in _layers_of_stage(scn, stage):
            loc, ex = layer_params_local(layer, lay.tp, lay.ep * lay.etp)
            dense, expert, non_gemm = dense + loc.params, expert + ex, non_gemm + loc.non_gemm
    emb = m.embedding_params() / lay.tp
    first, last = _holds_embedding(scn, rank), _holds_head(scn, rank)
    if first:
        dense, non_gemm = dense + emb, non_gemm + emb
    if last:
        for layer in m.mtp_layers:
            loc, ex = layer_params_local(layer, lay.tp, lay.ep * lay.etp)
            dense, expert, non_gemm = dense + loc.params, expert + ex, non_gemm + loc.non_gemm
        head = m.vocab_size * m.hidden_size / lay.tp
        if m.tie_word_embeddings:
            head = 0.0 if first else head  # tied: shares the first stage's table, else keeps a synced copy
        if m.mtp_layers and not first:
            head += emb  # MTP stage's own embedding
        dense += head + m.final_params
        non_gemm += head + m.final_params
    if scn.schedule == "dualpipe":
        # DualPipe proper runs two mirrored pipelines: every rank keeps both directions' copies of its chunks
        # (deepseek-ai/DualPipe README table: "Parameter 2x"); DualPipeV keeps one.
        dense, expert, non_gemm = 2 * dense, 2 * expert, 2 * non_gemm
    return dense, expert, non_gemm


# ---------------------------------------------------------------------------------------------------------------
# Activations
#
# Per layer and micro-batch, bytes stored for the backward, generalising Korthikanti et al. 2022 (arXiv 2205.05198,
# Sec. 4.1 and Table 2): attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh = sbh(34 + 5as/h). With
# flash/fused attention (TE, FlashAttention: the default in Megatron-core) the s^2 score matrix is not stored,
# only a per-head FP32 log-sum-exp, so "none" and "selective" (Megatron's default `core_attn` recompute) store the
# same. Each term is written per token:
#   attention: input to QKV 2h, Q 2(a d_qk), K 2(kv d_qk), V 2(kv d_v), input to the output projection 2(a d_v),
#     softmax stats 4a, dropout mask h (for GPT MHA with d = h/a: 2h + 6h + 2h + h = 11h, Korthikanti);
#   MLP: input 2h, fc1 output 2I (gated: gate and up 4I), activation output 2I, dropout mask h
#     (GELU with I = 4h: 2h + 16h + h = 19h, Korthikanti);
#   norms: input of each of the two norms 2h -> 4h.
# Tensor parallelism divides the head/width-sharded terms by t; the token-side terms (inputs, norms, masks: the
# "10sbh" of Table 2) are divided by t only under sequence parallelism. Context parallelism divides s by cp.
# Full recompute stores only each layer's input, 2h per token (Table 2: 2sbh; /t with SP), plus one layer's full
# activations at a time while it is recomputed in the backward (not in Korthikanti's table; counted here).
# Adaptations (estimates, this module):
#   GQA: K and V use the KV heads (per rank max(kv/t, 1) heads);
#   MLA: latent q (2 r_q twice: norm input and q_b input) and kv (2(c + rope) and 2c) replicated over TP, then
#     per-head Q, K (up-projected) and V;
#   DSV4: q latent as MLA, one 512-dim latent KV head (wkv output and its norm), per-head Q and core output, the
#     grouped wo_a output 2 g o_lora; compressor projections kv and score 2 x 2 coff d per token plus the
#     compressed entries; CSA layers add the indexer: per-head index queries 2 ih ihd, head weights 2 ih, its own
#     compressor, and INT32 top-k indices;
#   MoE: router FP32 logits (4E) + routing map (E) + probs and indices; per routed copy (top_k per token, x etp
#     when experts are tensor-parallel): the permuted expert input 2h (saved by the grouped fc1 GEMM for wgrad),
#     fc1 output and activation output as a gated MLP of width I_e/etp, and the FP32 prob applied in the
#     activation (Megatron-core applies probs inside the expert activation); shared experts as a dense MLP;
#   mHC: the residual stream is hc_mult x h wide; each sub-block (attention, FFN) keeps its hc-wide input for the
#     pre/post mixers' backward (2 x 2 hc h), and full recompute keeps the hc-wide layer input (2 hc h).
# Activations are counted in BF16 even under FP8 training (TE saves some GEMM inputs in FP8): conservative.


def _attention_tokens_bytes(a: AttentionSpec, tp: int, rep: int) -> float:
    """Bytes per token stored by one attention block; `rep` divides token-side (replicated) tensors (tp under SP)."""
    h, heads = a.hidden_size, a.num_heads
    token_side = BF16 * h + MASK * h  # input to the projections, output dropout mask
    per_head = FP32 * heads  # flash-attention log-sum-exp
    if a.kind == "gqa":
        kv_local = a.num_kv_heads / tp if a.num_kv_heads >= tp else 1.0
        per_head += BF16 * heads * (a.head_dim + a.v_head_dim)  # Q, and the output-projection input
        sharded_kv = BF16 * kv_local * (a.head_dim + a.v_head_dim)
        return token_side / rep + per_head / tp + sharded_kv
    if a.kind == "mla":
        r, c = a.q_lora_rank, a.kv_lora_rank
        token_side += BF16 * (2 * r + (c + a.qk_rope_head_dim) + c)
        per_head += BF16 * heads * (2 * a.head_dim + 2 * a.v_head_dim)  # Q, K, V, output-projection input
        return token_side / rep + per_head / tp
    # dsv4
    r, hd = a.q_lora_rank, a.head_dim
    token_side += BF16 * (2 * r + 2 * hd)  # q latent (norm in, wq_b in), kv latent (wkv out, norm out)
    per_head += BF16 * (2 * heads * hd + a.o_groups * a.o_lora_rank)  # Q, core output, wo_a output
    if a.compress_ratio:
        coff = 2 if a.compress_ratio == 4 else 1
        token_side += BF16 * (2 * coff * hd + hd / a.compress_ratio)
    if a.has_indexer:
        ih, ihd = a.index_n_heads, a.index_head_dim
        per_head += BF16 * (ih * ihd + ih)
        token_side += BF16 * (2 * 2 * ihd + ihd / a.compress_ratio) + INT32 * a.index_topk
    return token_side / rep + per_head / tp


def _mlp_width_bytes(f: FFNSpec, width: float) -> float:
    """fc1 output + activation output of an MLP of `width`, per token."""
    return BF16 * width * (3 if f.gated else 2)


def _ffn_tokens_bytes(f: FFNSpec, tp: int, rep: int, etp: int, imbalance: float) -> float:
    h = f.hidden_size
    token_side = BF16 * h + MASK * h  # MLP / router input, output dropout mask
    if f.kind == "dense":
        return token_side / rep + _mlp_width_bytes(f, f.intermediate_size) / tp
    k = f.top_k * imbalance
    token_side += FP32 * f.num_experts + f.num_experts + (FP32 + INT64) * f.top_k  # router logits, map, probs/idx
    routed = k * (BF16 * h * etp + _mlp_width_bytes(f, f.expert_intermediate_size) + FP32)
    shared = _mlp_width_bytes(f, f.num_shared_experts * f.shared_intermediate_size) / tp
    return token_side / rep + routed / rep + shared


def layer_activation_bytes(
    layer: LayerSpec,
    tokens: float,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    etp: int = 1,
    hc_mult: int = 1,
    expert_load_imbalance: float = 1.0,
    attention_kernel: str = "flash",
    seq_len: int = 0,
) -> float:
    """Bytes one layer keeps for the backward of one micro-batch of `tokens` tokens (per GPU, after CP).
    `recompute`: none | selective (equal under flash attention) | full (layer input only). A materialized
    attention without recompute also keeps its BF16 softmax output, heads/tp x seq_len per query token
    (the 2as^2b of Korthikanti et al. 2022, eq. 1, without the dropout mask and output: no attention dropout);
    selective recompute drops exactly that."""
    h = layer.attention.hidden_size
    rep = tp if sequence_parallel and tp > 1 else 1
    if recompute == "full":
        return tokens * BF16 * hc_mult * h / rep
    per_token = _attention_tokens_bytes(layer.attention, tp, rep)
    if attention_kernel == "materialized" and recompute == "none":
        per_token += BF16 * layer.attention.num_heads / tp * seq_len
    per_token += _ffn_tokens_bytes(layer.ffn, tp, rep, etp, expert_load_imbalance)
    per_token += 2 * BF16 * h / rep  # inputs of the two norms
    if hc_mult > 1:
        per_token += 2 * BF16 * hc_mult * h / rep  # hc-wide stream kept by the pre/post mixers of each sub-block
    if layer.mtp_params:
        per_token += (2 * BF16 * h + 2 * BF16 * h) / rep  # MTP: eh_proj input [h, 2h] and enorm/hnorm inputs
    return tokens * per_token


def tokens_per_microbatch(scn: Scenario) -> float:
    """Tokens of one micro-batch on one GPU (after CP). Fixed batching: seq_len x micro_batch / cp. With
    `max_tokens_per_gpu`, Miles packs at most max_tokens_per_gpu x cp tokens per micro-batch (every CP rank holds
    max_tokens_per_gpu), and a sample longer than that budget sits alone in its micro-batch (radixark/miles
    miles/backends/training_utils/data.py, dynamic batch size), so the worst micro-batch holds
    max(max_tokens_per_gpu, seq_len / cp) tokens per GPU."""
    t, cp = scn.train, scn.layout.cp
    if t.max_tokens_per_gpu is not None:
        return float(max(t.max_tokens_per_gpu, math.ceil(t.seq_len / cp)))
    return t.seq_len * t.micro_batch / cp


def inflight_per_stage(scn: Scenario, rank: int) -> dict[int, float]:
    """Micro-batches whose activations each virtual stage of `rank` holds at the rank's peak.

    * 1F1B (PipeDream-Flush): rank r runs pp - r warm-up forwards, so it holds min(m, pp - r) micro-batches
      (Narayanan et al. 2021, arXiv 2104.04473 Sec. 2.2.1: "stashes <= p micro-batches"); ZB-H1 keeps the 1F1B
      peak (Qi et al. 2023, arXiv 2401.10241; hardware.md section 4: "activation x PP, same as 1F1B").
    * Interleaved (v chunks): Megatron-core's schedule runs (pp - r - 1) x 2 + (v - 1) x g warm-up forwards
      (megatron/core/pipeline_parallel/schedules.py; g = microbatch_group_size_per_vp_stage, default pp), and one
      more forward precedes the first backward, so rank r holds min(m v, 2(pp - r - 1) + (v - 1) g + 1)
      chunk-micro-batches, forward k on chunk (k // g) % v. On rank 0 that is pp v + pp - 1 chunks of L/(pp v) layers, i.e. L layers x
      (1 + (pp - 1)/(pp v)): Megatron's `interleaved_schedule_memory_penalty` (theoretical_memory_usage.py),
      after Narayanan et al. 2021 Sec. 2.2.2.
    * DualPipe: pp + 1 micro-batches of a stage per device (deepseek-ai/DualPipe README table; DeepSeek-V3 report
      Sec. 3.2.1: "increasing the peak activation memory by only 1/PP times"), spread over its two stages.
    * DualPipeV: pp + 1 micro-batches of a half-stage chunk over 2 pp chunks on pp devices (README "PP/2 devices"
      for PP chunks), i.e. pp + 1/2 micro-batches of the rank's layers.
    """
    pp, m = scn.layout.pp, scn.num_microbatches
    stages = stages_on_rank(scn, rank)
    if scn.schedule == "interleaved":
        v = len(stages)
        group = scn.train.microbatch_group_size_per_vp_stage or pp
        n = min(m * v, 2 * (pp - rank - 1) + (v - 1) * group + 1)
        counts = {s: 0.0 for s in stages}
        for k in range(n):
            counts[stages[(k // group) % v]] += 1
        return counts
    if scn.schedule == "dualpipe":
        per = min(float(m), (pp + 1) / 2)
        return {s: per * (2 if len(stages) == 1 else 1) for s in stages}
    if scn.schedule == "dualpipev":
        return {stages[0]: min(float(m), pp + 0.5)}
    return {stages[0]: float(min(m, pp - rank))}


def activations_on_rank(scn: Scenario, rank: int, expert_load_imbalance: float = 1.0) -> tuple[float, float, float]:
    """(activation bytes, comm buffer bytes that scale with tokens, stage-micro-batches in flight) of one rank."""
    m, lay, t = scn.model, scn.layout, scn.train
    tokens = tokens_per_microbatch(scn)
    sp = t.sequence_parallel and lay.tp > 1
    rep = lay.tp if sp else 1

    def layer_bytes(layer: LayerSpec, recompute: str) -> float:
        return layer_activation_bytes(layer, tokens, lay.tp, sp, recompute, lay.etp, m.hc_mult, expert_load_imbalance,
                                      t.attention_kernel, t.seq_len)

    inflight = inflight_per_stage(scn, rank)
    total = 0.0
    work = 0.0  # one layer's full activations, rebuilt in the backward under full recompute
    held: list[LayerSpec] = []
    for stage, count in inflight.items():
        layers = _layers_of_stage(scn, stage)
        held.extend(layers)
        total += count * sum(layer_bytes(x, t.recompute) for x in layers)
        if stage == 0:
            # token ids (INT64) and the embedding dropout mask per in-flight micro-batch (Megatron
            # theoretical_memory_usage.py: 8 s b p + s b h p)
            total += count * tokens * (INT64 + MASK * m.hidden_size) / rep
    if _holds_head(scn, rank):
        held.extend(m.mtp_layers)
        # one micro-batch reaches the loss at a time: final norm input/output, FP32 logits kept by the
        # vocab-parallel cross entropy (Megatron: s b h 4 (1 + V/h) / t); mHC folds hc streams before the head.
        head = tokens * (2 * BF16 * m.hidden_size / rep + FP32 * m.vocab_size / lay.tp)
        head += tokens * BF16 * m.hc_mult * m.hidden_size / rep if m.hc_mult > 1 else 0.0
        for layer in m.mtp_layers:
            total += layer_bytes(layer, t.recompute)
            head += tokens * FP32 * m.vocab_size / lay.tp  # MTP logits
        total += head
    if t.recompute == "full" and held:
        work = max(layer_bytes(x, "none") for x in held)
    # Token-side communication buffers (transient, one layer at a time): the MoE all-to-all send buffer of the
    # permuted tokens (top_k copies of h, BF16; the receive side is the expert input counted above) and PP p2p
    # send + receive buffers of the hc-wide stage boundary tensor.
    comm = 0.0
    moe = [x.ffn for x in held if x.ffn.kind == "moe"]
    if moe and lay.ep * lay.etp > 1:
        comm += max(tokens * f.top_k * expert_load_imbalance * BF16 * f.hidden_size for f in moe) / rep
    if lay.pp > 1:
        comm += 2 * tokens * BF16 * m.hc_mult * m.hidden_size / rep
    return total + work, comm, sum(inflight.values())


# ---------------------------------------------------------------------------------------------------------------
# Training memory


def _process_groups(scn: Scenario) -> int:
    lay = scn.layout
    sizes = (lay.tp, lay.cp, scn.dp * lay.cp, lay.ep * lay.etp, scn.expert_dp, lay.pp)
    return sum(s > 1 for s in sizes)


def training_memory(
    scn: Scenario,
    pipeline_rank: int | None = None,
    *,
    grad_reduce_in_bf16: bool = False,
    margin_bytes: float | None = None,
    expert_load_imbalance: float = 1.0,
) -> MemoryBreakdown:
    """Per-GPU memory of a training rank; the worst pipeline rank (largest HBM total) when `pipeline_rank` is None.

    grad_reduce_in_bf16: Megatron `--grad-reduce-in-bf16` (BF16 main grads; the seed run's launcher passes it).
    margin_bytes: overrides the default margin (5% of HBM + 2 GiB).
    expert_load_imbalance: routed tokens on the busiest expert rank / the balanced share (1.0 = balanced).
    """
    pp = scn.layout.pp
    if pipeline_rank is None:
        ranks = [_rank_memory(scn, r, grad_reduce_in_bf16, margin_bytes, expert_load_imbalance) for r in range(pp)]
        return max(ranks, key=lambda b: (b.total_bytes, -b.pipeline_rank))
    if not 0 <= pipeline_rank < pp:
        raise ValueError(f"pipeline_rank {pipeline_rank} is outside 0..{pp - 1}")
    return _rank_memory(scn, pipeline_rank, grad_reduce_in_bf16, margin_bytes, expert_load_imbalance)


def _rank_memory(
    scn: Scenario, rank: int, grad_bf16: bool, margin_bytes: float | None, imbalance: float
) -> MemoryBreakdown:
    hw, t, lay = scn.hardware, scn.train, scn.layout
    dense, expert, non_gemm = params_on_rank(scn, rank)
    dense_dp = scn.dp * lay.cp  # Megatron shards dense optimizer state over the DP x CP group
    expert_dp = scn.expert_dp  # tp x cp x dp / (ep x etp): already includes CP
    # FSDP (ZeRO-3) shards weights and grads like the optimizer; the distributed optimizer (ZeRO-1) only the state.
    w_dense, w_expert = (dense / dense_dp, expert / expert_dp) if t.fsdp else (dense, expert)
    held = w_dense + w_expert
    weights = BF16 * held
    if t.precision == "fp8":
        weights += FP8_WEIGHT_CACHE_BYTES * (dense + expert - non_gemm)  # caches of the (unsharded) GEMM weights
    grads = (BF16 if grad_bf16 else FP32) * held
    sharded = t.distributed_optimizer or t.fsdp
    state_params = dense / dense_dp + expert / expert_dp if sharded else dense + expert
    state = OPTIMIZER_STATE_BYTES * state_params
    off = t.optimizer_offload_fraction
    optimizer_gpu = state * (1 - off)
    optimizer_host = (state + HOST_GRAD_COPY_BYTES * state_params) * off

    acts, token_comm, inflight = activations_on_rank(scn, rank, imbalance)
    comm = _process_groups(scn) * COMM_BUFFER_PER_GROUP_BYTES + token_comm
    if t.fsdp:
        # FSDP unshards one layer while prefetching the next (BF16) and reduce-scatters its grads (FP32)
        layers = [x for s in stages_on_rank(scn, rank) for x in _layers_of_stage(scn, s)]
        biggest = 0.0
        for x in layers:
            loc, ex = layer_params_local(x, lay.tp, lay.ep * lay.etp)
            biggest = max(biggest, loc.params + ex)
        comm += biggest * (2 * BF16 + FP32)
    margin = hw.hbm_bytes * MARGIN_FRACTION_OF_HBM + MARGIN_FIXED_BYTES if margin_bytes is None else margin_bytes
    total = weights + grads + optimizer_gpu + acts + comm + margin
    host_cap = hw.host_memory_bytes / hw.gpus_per_node
    fits = total <= hw.hbm_bytes and optimizer_host <= host_cap
    return MemoryBreakdown(
        pipeline_rank=rank,
        weights_bytes=weights,
        grads_bytes=grads,
        optimizer_bytes=optimizer_gpu,
        optimizer_host_bytes=optimizer_host,
        activations_bytes=acts,
        comm_buffers_bytes=comm,
        margin_bytes=margin,
        total_bytes=total,
        capacity_bytes=hw.hbm_bytes,
        host_capacity_bytes=host_cap,
        fits=fits,
        params_dense=dense,
        params_expert=expert,
        tokens_per_microbatch=tokens_per_microbatch(scn),
        microbatches_in_flight=inflight,
    )


def all_ranks(
    scn: Scenario,
    *,
    grad_reduce_in_bf16: bool = False,
    margin_bytes: float | None = None,
    expert_load_imbalance: float = 1.0,
) -> list[MemoryBreakdown]:
    """`training_memory` of every pipeline rank, in rank order."""
    return [_rank_memory(scn, r, grad_reduce_in_bf16, margin_bytes, expert_load_imbalance)
            for r in range(scn.layout.pp)]


# ---------------------------------------------------------------------------------------------------------------
# KV cache and rollout memory


def _kv_entry_bytes(dim: int, rope: int, dtype: str) -> float:
    """Bytes of one latent KV entry of `dim` elements, `rope` of them rotary. FP8 follows FlashMLA's FP8 KV layout
    for DeepSeek-V3.2 (656 bytes for 512 + 64: FP8 no-rope part, one FP32 scale per 128 of it, BF16 rope part),
    applied to DSV4's 512-dim entry with its 64 rope dims inside."""
    if dtype != "fp8":
        return BF16 * dim
    nope = dim - rope
    return nope + FP32 * math.ceil(nope / 128) + BF16 * rope


def _indexer_key_bytes(ihd: int, dtype: str) -> float:
    """One DSV4/V3.2 indexer key: BF16, or FP8 with one FP32 scale per token (SGLang NSA index_k buffer)."""
    return BF16 * ihd if dtype != "fp8" else ihd + FP32


def _kv_layers(model: ModelSpec, include_mtp: bool) -> tuple[LayerSpec, ...]:
    return model.layers + (model.mtp_layers if include_mtp else ())


def kv_bytes_per_token(model: ModelSpec, dtype: str = "bf16", tp: int = 1, include_mtp: bool = False) -> float:
    """KV-cache bytes per token of context, per GPU of an attention-TP group of `tp`, over all layers.

    * GQA: K and V, 2 x kv_heads x head_dim per layer, the heads split over TP while kv_heads >= tp (else one
      replicated head per rank); sliding-window layers are bounded per request (see kv_bytes_per_request_fixed).
      FP8: 1 byte per element (SGLang fp8_e4m3 KV cache, per-tensor scale).
    * MLA: one latent of kv_lora_rank + qk_rope_head_dim per layer, replicated on every TP rank (SGLang
      MLATokenToKVPool); FP8 1 byte per element.
    * DSV4 (/work/shared/reference/dsv4-flash-and-miles.md 1.3): every layer attends to a 128-token raw window
      (a fixed cost per request); CSA layers (ratio 4) add one 512-dim compressed entry per 4 tokens plus one
      indexer key (index_head_dim) per 4 tokens; HCA layers (ratio 128) one 512-dim entry per 128 tokens.
      Replicated over TP (one latent head).
    """
    total = 0.0
    for layer in _kv_layers(model, include_mtp):
        a = layer.attention
        if a.kind == "gqa":
            if a.sliding_window:
                continue
            kv_local = a.num_kv_heads / tp if a.num_kv_heads >= tp else 1.0
            total += kv_local * (a.head_dim + a.v_head_dim) * (1 if dtype == "fp8" else BF16)
        elif a.kind == "mla":
            total += (a.kv_lora_rank + a.qk_rope_head_dim) * (1 if dtype == "fp8" else BF16)
        elif a.compress_ratio:
            total += _kv_entry_bytes(a.head_dim, a.qk_rope_head_dim, dtype) / a.compress_ratio
            if a.has_indexer:
                total += _indexer_key_bytes(a.index_head_dim, dtype) / a.compress_ratio
    return total


def kv_bytes_per_request_fixed(model: ModelSpec, dtype: str = "bf16", tp: int = 1, include_mtp: bool = False) -> float:
    """Per-request KV bytes that do not grow with the context, per GPU: the sliding windows (GQA sliding layers
    at their window, every DSV4 layer at its 128 raw tokens) and DSV4's compression-state rings (C4: 8 entries,
    C128: 128 entries; kv + score, FP32, width coff x head_dim; CSA layers also the indexer compressor's ring)."""
    total = 0.0
    for layer in _kv_layers(model, include_mtp):
        a = layer.attention
        if a.kind == "gqa" and a.sliding_window:
            kv_local = a.num_kv_heads / tp if a.num_kv_heads >= tp else 1.0
            total += a.sliding_window * kv_local * (a.head_dim + a.v_head_dim) * (1 if dtype == "fp8" else BF16)
        elif a.kind == "dsv4":
            total += a.sliding_window * _kv_entry_bytes(a.head_dim, a.qk_rope_head_dim, dtype)
            if a.compress_ratio:
                coff = 2 if a.compress_ratio == 4 else 1
                ring = coff * a.compress_ratio
                total += 2 * ring * coff * a.head_dim * DSV4_STATE_BYTES
                if a.has_indexer:
                    total += 2 * ring * coff * a.index_head_dim * DSV4_STATE_BYTES
    return total


def rollout_weights_bytes(model: ModelSpec, precision: str, tp: int, ep: int, attn_tp: int,
                          include_mtp: bool = False) -> float:
    """Weights on one SGLang GPU: attention split over the attention TP (tp / dp with DP-attention: replicated on
    each attention-DP rank), dense and shared-expert MLPs over tp, routed experts over max(tp, ep) (SGLang
    splits each expert over tp / ep ranks when ep < tp), embedding and LM head vocab-parallel over tp (SGLang
    default without --enable-dp-lm-head). FP8: GEMM weights 1 byte + block scales; the rest BF16."""
    gemm_bytes = FP8_WEIGHT_BYTES if precision == "fp8" else BF16
    total = 0.0
    for layer in _kv_layers(model, include_mtp):
        a = attention_params_local(layer.attention, attn_tp)
        f, routed = ffn_params_local(layer.ffn, tp)
        non_gemm = a.non_gemm + f.non_gemm + layer.norm_params + layer.hc_params
        gemm = a.params + f.params - a.non_gemm - f.non_gemm + layer.mtp_params + routed / max(tp, ep)
        total += gemm * gemm_bytes + non_gemm * BF16
    head = model.vocab_size * model.hidden_size * (0 if model.tie_word_embeddings else 1)
    total += BF16 * ((model.embedding_params() + head) / tp + model.final_params)
    return total


def rollout_memory(scn: Scenario, include_mtp: bool = False) -> RolloutMemory:
    """One GPU of an SGLang rollout engine. SGLang keeps weights + KV pool within hbm x mem_fraction_static:
    pool = hbm x mem_fraction_static - weights, capped at max_total_tokens x kv_bytes_per_token when
    --max-total-tokens is given; the rest of HBM is left for activations, graphs and communication.
    `include_mtp`: load the MTP layers too (speculative decoding)."""
    if scn.run.rl is None:
        raise ValueError("rollout_memory needs an RL run (rl: section)")
    ro, hw, m = scn.run.rl.rollout, scn.hardware, scn.model
    attn_tp = ro.tp // ro.dp if ro.dp_attention else ro.tp
    kv_dtype = ro.kv_cache_dtype or "bf16"  # SGLang --kv-cache-dtype auto = the model's BF16
    weights = rollout_weights_bytes(m, ro.precision, ro.tp, ro.ep, attn_tp, include_mtp)
    per_token = kv_bytes_per_token(m, kv_dtype, attn_tp, include_mtp)
    fixed = kv_bytes_per_request_fixed(m, kv_dtype, attn_tp, include_mtp)
    static = hw.hbm_bytes * ro.mem_fraction_static
    pool = max(0.0, static - weights)
    if ro.max_total_tokens is not None and per_token > 0:
        pool = min(pool, ro.max_total_tokens * per_token)
    capacity_tokens = int(pool // per_token) if per_token > 0 else 0
    reserved = hw.hbm_bytes - static
    total = weights + pool + reserved
    return RolloutMemory(
        weights_bytes=weights,
        kv_pool_bytes=pool,
        reserved_bytes=reserved,
        kv_bytes_per_token=per_token,
        kv_bytes_per_request_fixed=fixed,
        kv_capacity_tokens=capacity_tokens,
        total_bytes=total,
        capacity_bytes=hw.hbm_bytes,
        fits=weights < static and pool > 0,
    )
