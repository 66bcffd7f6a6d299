"""Per-layer forward work of one micro-batch on one GPU: GEMMs, fused kernels and the collectives inside.

`layer_work(model, layer, shard, imbalance)` lists what one GPU runs for one decoder layer; `embedding_work`,
`head_work` and `mtp_work` cover the ends of the pipeline. `stage.py` turns the lists into times.

Conventions (documented once here):
- Backward of a weight GEMM = its input-gradient GEMM (B) + its weight-gradient GEMM (W), each with the forward
  FLOPs: 2 x forward in all, split evenly for zero-bubble schedules.
- Attention cores are flash kernels: backward = 2.5 x the forward FLOPs and bytes (five matmuls instead of two,
  the scores recomputed; FlashAttention-2, arXiv 2307.08691, backward pass, whose benchmarks count backward
  FLOPs as 2.5 x forward), all in B. The DSV4 lightning
  indexer's backward = 2 x (two matmul gradients, no score recompute; it is trained, DeepSeek-V3.2 tech
  report section 2.1).
- Memory-bound kernels: backward streams 2 x the forward bytes (read the saved input and the output gradient,
  write the input gradient); counted in B.
- Sharding: TP splits heads and FFN columns (Megatron column/row parallel); the GEMMs then see every token of
  this CP rank. Sequence parallel splits norms, residuals, mHC mixing and the MoE token path over TP ranks
  (Megatron asserts sequence parallel for MoE with TP > 1, megatron/training/arguments.py, so MoE tokens
  are split whenever tp > 1). CP
  splits the sequence: each rank computes 1/cp of the causal attention pairs (load-balanced CP) and exchanges
  K/V. EP/ETP split experts; the busiest EP rank processes `imbalance` x the mean rows.
- Latent/low-rank down projections (MLA q_a, kv_a) are duplicated on every TP rank and run on the
  sequence-parallel rows, then their small latents are all-gathered (Megatron MLA). DSV4's KV side (wq_a,
  wkv, compressors, the indexer) is taken as duplicated on every TP rank over all rows of the CP rank, after
  an all-gather of the hidden state (assumption: no public Megatron DSV4 TP layout was found).
- FP8 training runs the transformer-layer linears in FP8; attention cores, the router, embedding and LM head
  stay BF16 (TransformerEngine defaults); the DSV4 indexer scores in FP8 only when training in FP8 (the
  reference inference kernel is FP8; Miles simulates FP8 on BF16 training, docs/reference/dsv4-flash-and-miles.md 1.3).
"""

from __future__ import annotations

from perfmodel.cost.dtypes import FP8_BLOCK, FP32, dtype_bytes
from perfmodel.cost.train.attention import attention_work, mean_keys_per_query
from perfmodel.cost.train.flops import head_model_flops_fwd, layer_model_flops_fwd, model_flops_per_token
from perfmodel.cost.train.work import (
    ACT_BYTES,
    CE_BWD_BYTES_PER_LOGIT,
    CE_FWD_BYTES_PER_LOGIT,
    FP32_BYTES,
    LAYERNORM,
    MLP,
    MOE,
    MOE_ACT,
    SHARED_EXPERTS,
    Builder,
    CommOp,
    Dispatch,
    Gemm,
    Kernel,
    Shard,
    Work,
    tp_block,
)
from perfmodel.inputs.model import FFNSpec, LayerSpec, ModelSpec

__all__ = [
    "CommOp", "Gemm", "Kernel", "Shard", "Work", "attention_work", "embedding_work", "ffn_work", "forward_work",
    "fp8_cast_work", "hc_work", "head_work", "layer_work", "mean_keys_per_query", "model_flops_per_token", "mtp_work",
]


# ---------------------------------------------------------------------------------------------------------------
# FP8 quantization of GEMM inputs, per recipe
#
# Each FP8 linear quantizes two BF16 tensors per micro-batch: its input X [m, k] (forward) and its output gradient
# dY [m, n] (backward); the weights are cast once per optimizer step and cached across micro-batches (TE's
# is_first_microbatch), so they are not priced per micro-batch. Each tensor is needed twice: rowwise (X for fprop,
# dY for dgrad) and columnwise (both for wgrad); TransformerEngine writes both copies in one kernel from one read of
# the BF16 tensor ("Performance considerations", Table 2 and quantization fusion scenario 1,
# https://nvidia.github.io/TransformerEngine/features/low_precision_training/performance_considerations/performance_considerations.html).
# Assumption: the columnwise copy is written as its own FP8 tensor (a physical transpose on Hopper; per-block
# recipes need their own columnwise scales on every GPU), so a cast reads 2 B and writes 2 x 1 B per element plus
# the recipe's scales:
# - delayed: the scale comes from the amax history; the amax of this tensor is taken inside the cast: one pass.
# - tensorwise (current scaling): "FP8 Current Scaling requires two tensor reads per quantization: one to compute
#   amax, one to cast" (TE FP8 Delayed Scaling page,
#   https://nvidia.github.io/TransformerEngine/features/low_precision_training/fp8_delayed_scaling/fp8_delayed_scaling.html):
#   an amax kernel reading 2 B, then the cast.
# - blockwise: one FP32 scale per 1 x 128 block of activations and gradients (TE FP8 Blockwise Scaling page, after
#   DeepSeek-V3), rowwise and columnwise: + 2 x 4/128 B.
# - mxfp8: one E8M0 (1 B) scale per 32 consecutive elements, rowwise and columnwise (TE MXFP8 page,
#   https://nvidia.github.io/TransformerEngine/features/low_precision_training/mxfp8/mxfp8.html): + 2 x 1/32 B.
# Not priced: the once-per-step amax-history update of delayed scaling and the amax all-reduce of current scaling
# over the TP group (latency-bound, small); TE's LayerNormLinear fusing the norm with the rowwise cast.
MXFP8_BLOCK = 32
_FP8_ROW_COL = 2 * dtype_bytes("fp8")  # rowwise + columnwise FP8 copies written
FP8_CAST_BYTES_PER_ELEMENT: dict[str, float] = {
    "delayed": ACT_BYTES + _FP8_ROW_COL,
    "tensorwise": 2 * ACT_BYTES + _FP8_ROW_COL,
    "blockwise": ACT_BYTES + _FP8_ROW_COL + 2 * FP32 / FP8_BLOCK,
    "mxfp8": ACT_BYTES + _FP8_ROW_COL + 2 * 1 / MXFP8_BLOCK,
}
FP8_CAST_KERNELS: dict[str, int] = {"delayed": 1, "tensorwise": 2, "blockwise": 1, "mxfp8": 1}


def fp8_cast_work(w: Work, s: Shard) -> Work:
    """The quantization kernels of the FP8 GEMMs of `w` (weight GEMMs; attention-core GEMMs stay BF16): per GEMM a
    memory-bound kernel that casts X [m, k] forward and dY [m, n] backward with the recipe's bytes per element and
    kernel launches (FP8_CAST_*)."""
    b = Builder()
    per_el, launches = FP8_CAST_BYTES_PER_ELEMENT[s.fp8_recipe], FP8_CAST_KERNELS[s.fp8_recipe]
    for g in w.gemms:
        if g.dtype != "fp8" or g.core_attention:
            continue
        b.module = g.module  # replayed with its GEMM
        b.mem(f"fp8_cast_{g.name}", g.m * g.k * g.batch * per_el, kernels=launches,
              bwd_bytes=g.m * g.n * g.batch * per_el)
    return b.build()


# ---------------------------------------------------------------------------------------------------------------
# FFN


def _mlp(b: Builder, name: str, f: FFNSpec, intermediate: float, s: Shard, rows: float) -> None:
    """A TP-split dense MLP (column-parallel up, row-parallel down) on `rows` tokens."""
    il = intermediate / s.tp
    up = 2 * il if f.gated else il
    b.gemm(f"{name}_fc1", rows, up, f.hidden_size, dtype=s.precision)
    b.mem(f"{name}_glu" if f.gated else f"{name}_act", rows * (up + il) * ACT_BYTES)
    b.gemm(f"{name}_fc2", rows, f.hidden_size, il, dtype=s.precision)
    tp_block(b, s, f.hidden_size)


def ffn_work(f: FFNSpec, s: Shard, imbalance: float = 1.0) -> Work:
    b = Builder()
    if f.kind == "dense":
        with b.within(MLP):
            _mlp(b, "mlp", f, f.intermediate_size, s, s.t_cp)
    else:
        with b.within(MOE):
            _moe(b, f, s, imbalance)
    return b.build()


def _moe(b: Builder, f: FFNSpec, s: Shard, imbalance: float) -> None:
    """Router, EP dispatch and combine (ETP gather), permutation, grouped expert GEMMs, shared experts."""
    h = f.hidden_size
    t = s.t_moe
    b.gemm("router", t, f.num_experts, h)
    b.mem("router_softmax_topk", t * f.num_experts * FP32_BYTES * 2)
    imb = imbalance if s.ep > 1 else 1.0
    if s.ep > 1:  # dispatch (in the GEMM dtype) and combine forward; their mirrors backward
        # backward: the combine's gradient goes out as a dispatch, the dispatch's comes back as a combine
        for phase, elem, back in (("fwd", dtype_bytes(s.precision), False), ("fwd", ACT_BYTES, True),
                                  ("bwd", ACT_BYTES, False), ("bwd", ACT_BYTES, True)):
            b.dispatch(Dispatch(t * imb, h, f.top_k, f.num_experts, elem, s.moe_dispatcher, back), phase)
    rows = t * f.top_k * imb * s.etp  # expert rows on the busiest GPU after dispatch (and the ETP gather)
    if s.etp > 1:
        nbytes = rows * h * ACT_BYTES
        for op in ("all_gather", "reduce_scatter"):
            b.comm("etp", op, nbytes, "fwd")
            b.comm("etp", op, nbytes, "bwd")
    b.mem("permute_unpermute", (3 * f.top_k + 1) * t * h * ACT_BYTES + 2 * rows * h * ACT_BYTES, kernels=4)
    local = f.num_experts // s.ep
    il = f.expert_intermediate_size / s.etp
    up = 2 * il if f.gated else il
    b.gemm("experts_fc1", rows / local, up, h, batch=local, dtype=s.precision, grouped=True)
    with b.within(MOE_ACT):
        b.mem("experts_glu" if f.gated else "experts_act", rows * (up + il) * ACT_BYTES)
    b.gemm("experts_fc2", rows / local, h, il, batch=local, dtype=s.precision, grouped=True)
    if f.num_shared_experts:
        with b.within(SHARED_EXPERTS):
            _mlp(b, "shared", f, f.num_shared_experts * f.shared_intermediate_size, s, s.t_cp)


# ---------------------------------------------------------------------------------------------------------------
# mHC, norms, whole layers


# The memory-bound work around a DSV4 layer's attention and FFN in training -- mHC pre/mix/post, RMSNorms, residual
# and dtype casts -- as measured, not as an ideal fused kernel would do it. AMD's MI355X kernel traces of Primus
# DeepSeek-V4-Flash layers (examples/deepseek-v4/projection/site/data/flash.json of AMD-AGI/Primus at fd1eeabbad,
# generated 2026-06-30: 4096 tokens per micro-batch, EP8) time the "attn.misc" + "attn.norm" kernels (FP32 copies,
# fills, unary and reduction functors) at 3.26 / 3.35 / 3.64 ms forward and 6.32 / 6.96 / 6.49 ms backward for
# compress ratio 0 / 4 / 128 layers. At the trace GPU's 8 TB/s x 0.75 (hwprofiles/mi355x.yaml) the means are
# 20.5 GB and 39.5 GB per layer: 76 and 147 passes per token over the FP32 stream state (hc_mult x hidden x 4 B).
# Miles' TileKernels fuse part of this (mhc_pre) on NVIDIA; its AMD training path keeps "explicit PyTorch/HIP
# post-mix" (docs/reference/dsv4-flash-and-miles.md, runtime path table): the measured passes stand for both until a
# fused trace exists. The time on other GPUs follows their HBM bandwidth.
HC_ELEMENTWISE_PASSES_FWD = 76.0
HC_ELEMENTWISE_PASSES_BWD = 147.0


def hc_work(model: ModelSpec, s: Shard) -> Work:
    """DSV4 layers (hc_mult = n streams > 1): the memory-bound mHC mixing, norms, residuals and casts of one layer
    as measured (HC_ELEMENTWISE_PASSES_*), plus the mixing FLOPs: per sublayer a [n*h -> (2+n)n] coefficient
    projection, hc_sinkhorn_iters Sinkhorn iterations of ~4 n^2 FLOPs per token and the n-stream mix and post.
    Memory-bound; counted over the sequence-parallel rows."""
    n = model.hc_mult
    if n <= 1:
        return Work()
    b = Builder()
    h, rows = model.hidden_size, s.t_sp
    state = rows * n * h * FP32_BYTES
    flops = 2 * (2.0 * rows * n * h * (2 + n) * n + rows * model.hc_sinkhorn_iters * 4 * n * n
                 + 2.0 * rows * n * h + 2.0 * rows * n * h * (n + 1))
    b.mem("hc_norms_elementwise", HC_ELEMENTWISE_PASSES_FWD * state, flops, kernels=6,
          bwd_bytes=HC_ELEMENTWISE_PASSES_BWD * state)
    return b.build()


def _norms_residuals(model: ModelSpec, layer: LayerSpec, s: Shard) -> Work:
    """Pre-attention and pre-FFN RMSNorm and the two residual adds; DSV4 layers count theirs in hc_work."""
    if model.hc_mult > 1:
        return Work()
    b = Builder()
    h, rows = model.hidden_size, s.t_sp
    for name, separate in zip(("attn_norm", "ffn_norm"), layer.separate_norms(), strict=True):
        with b.within(LAYERNORM if separate else ""):
            b.mem(name, rows * h * ACT_BYTES * 2)
    b.mem("residual_adds", 2 * rows * h * ACT_BYTES * 3, kernels=2)
    return b.build()


def layer_work(model: ModelSpec, layer: LayerSpec, s: Shard, imbalance: float = 1.0, mtp: bool = False) -> Work:
    """Forward work of one decoder layer (or MTP layer body) on one GPU for one micro-batch."""
    w = hc_work(model, s) + _norms_residuals(model, layer, s) + attention_work(layer.attention, s)
    w = w + ffn_work(layer.ffn, s, imbalance)
    w = w + fp8_cast_work(w, s)
    mf = layer_model_flops_fwd(model, layer, s.seq_len, mtp=mtp, convention=s.flops_convention) * s.tokens / (
        s.tp * s.cp)
    return Work(w.gemms, w.kernels, w.comms, mf)


def embedding_work(model: ModelSpec, s: Shard) -> Work:
    """Vocab-parallel embedding lookup on every token of this CP rank, reduced over TP (reduce-scatter under
    sequence parallel, else all-reduce); backward a scatter-add into the FP32 main gradient (W)."""
    b = Builder()
    h, rows = model.hidden_size, s.t_cp
    b.mem("embedding_lookup", rows * h * ACT_BYTES * 2 * (2 if model.learned_positions else 1))
    if model.hc_mult > 1:
        b.mem("hc_expand", s.t_sp * model.hc_mult * h * ACT_BYTES)
    # backward only: read the gradient rows (BF16), read-modify-write FP32 main_grad rows
    b.mem("embedding_grad", 0.0, kernels=1, bwd_bytes=rows * h * (ACT_BYTES + 2 * FP32_BYTES), bwd_weight=True)
    if s.tp > 1:
        op = "reduce_scatter" if s.sequence_parallel else "all_reduce"
        b.comm("tp", op, rows * h * ACT_BYTES, "fwd")
        if s.sequence_parallel:
            b.comm("tp", "all_gather", rows * h * ACT_BYTES, "bwd")
    return b.build()


def head_work(model: ModelSpec, s: Shard) -> Work:
    """Final norm (DSV4: fold the mHC streams first), LM head GEMM on the vocab shard, vocab-parallel
    cross-entropy (three small all-reduces over TP: max, sum-exp, target logit)."""
    b = Builder()
    h, n = model.hidden_size, model.hc_mult
    if n > 1:
        b.mem("hc_head", s.t_sp * (n * h + h) * ACT_BYTES, 2.0 * s.t_sp * n * h * n)
    b.mem("final_norm", s.t_sp * h * ACT_BYTES * 2)
    vl = model.head_size / s.tp  # a critic's value head: one output per token
    rows = s.t_cp
    b.gemm("lm_head", rows, vl, h)
    b.mem("cross_entropy", rows * vl * CE_FWD_BYTES_PER_LOGIT, 5.0 * rows * vl, kernels=4, bwd_factor=0.4,
          bwd_bytes=rows * vl * CE_BWD_BYTES_PER_LOGIT)
    if s.tp > 1:
        if s.sequence_parallel:
            b.comm("tp", "all_gather", rows * h * ACT_BYTES, "fwd")
            b.comm("tp", "reduce_scatter", rows * h * ACT_BYTES, "bwd")
        else:
            b.comm("tp", "all_reduce", rows * h * ACT_BYTES, "bwd")
        for _ in range(3):
            b.comm("tp", "all_reduce", rows * FP32_BYTES, "fwd")
    return b.build(head_model_flops_fwd(model, 0) * s.tokens / (s.tp * s.cp))


def mtp_work(model: ModelSpec, layer: LayerSpec, s: Shard, imbalance: float = 1.0) -> Work:
    """One MTP module on the last stage: embed the shifted tokens, norm both inputs, project [emb; hidden]
    (2h -> h; DSV4's e_proj + h_proj has the same FLOPs), one decoder layer, its own LM head and loss."""
    b = Builder()
    h = model.hidden_size
    b.mem("mtp_norms", 2 * s.t_sp * h * ACT_BYTES * 2, kernels=2)
    b.gemm("mtp_eh_proj", s.t_sp, h, 2 * h, dtype=s.precision)
    proj = b.build()
    pre = embedding_work(model, s) + proj + fp8_cast_work(proj, s)
    body = layer_work(model, layer, s, imbalance, mtp=True)
    head = head_work(model, s)
    return pre + body + head


def forward_work(model: ModelSpec, layers: tuple[LayerSpec, ...], s: Shard) -> Work:
    """Hardware work of a stack of layers with balanced routing (a convenience for checks and reports)."""
    w = Work()
    for layer in layers:
        w = w + layer_work(model, layer, s)
    return w
