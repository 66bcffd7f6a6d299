"""Per-GPU memory of a training rank.

`training_memory(scn, pipeline_rank)` sums, for one pipeline rank (the worst one when `pipeline_rank` is None):

* weights: BF16 parameters of the rank's virtual stages (+ TE's cached FP8 copies when training in FP8, the
  gathered layer's only under FSDP);
* grads: Megatron's main-grad buffer, FP32 by default (`accumulate_allreduce_grads_in_fp32`, forced on for BF16
  unless `--grad-reduce-in-bf16`), BF16 with the stack knob `grad_reduce_in_bf16` (or the argument);
* optimizer: FP32 master weights + Adam exp_avg + exp_avg_sq = 12 bytes/param, sharded by the distributed optimizer
  (dense params over dp x cp, routed experts over expert_dp); the `optimizer_offload_fraction` share lives on the
  host (`optimizer_host_bytes`, checked against host memory per GPU);
* activations of the micro-batches in flight for the schedule (Korthikanti et al. 2022, generalised per layer kind;
  linear inputs in FP8 under FP8 training), less the layers offloaded to the host (`activation_offload_layers`, in
  `activations_host_bytes` with the offloaded optimizer state against host memory);
* communication buffers (collective-library buffers per process group, the MoE all-to-all send buffer, PP p2p
  buffers, FSDP unshard buffers);
* a margin for allocator fragmentation, the GPU runtime context and library workspaces.

Bytes are SI-free counts (plain bytes); `summary()` prints GB = 1e9 bytes, as GPU memory is sold.

Megatron byte model (megatron/training/theoretical_memory_usage.py in NVIDIA/Megatron-LM, and its
docs/user-guide/features/dist_optimizer.md): 18 bytes/param without the distributed optimizer (2 BF16 weight +
4 FP32 grad + 12 FP32 master/Adam), 6 + 12/dp with it. This module reproduces that and adds what the formula
leaves out (EP-aware experts, MTP/embedding placement per stage, MoE and mHC activations, buffers, margin).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.cost.dtypes import BF16, FP8, FP32, INT32, INT64, MASK
from perfmodel.cost.params import (
    holds_head,
    layer_params_local,
    layers_of_stage,
    params_on_rank,
    stages_on_rank,
)
from perfmodel.inputs.keys import Reads, scenario_key
from perfmodel.inputs.model import AttentionSpec, FFNSpec, LayerSpec
from perfmodel.inputs.scenario import Scenario
from perfmodel.invariants import check_parts_non_negative
from perfmodel.memo import Memo

GiB = 1024**3
GB = 1e9

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
# docs/reference/dsv4-flash-and-miles.md 2.1, 2.2). Override with `margin_bytes=`.
MARGIN_FRACTION_OF_HBM = 0.05
MARGIN_FIXED_BYTES = 2 * GiB


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
    activations_host_bytes: float = 0.0  # offloaded layers' activations, in host memory (activation_offload_layers)

    def __post_init__(self) -> None:
        check_parts_non_negative("memory parts >= 0", f"training memory, pipeline rank {self.pipeline_rank}",
                                 self.components() | {"optimizer_host": self.optimizer_host_bytes,
                                                      "activations_host": self.activations_host_bytes,
                                                      "total": self.total_bytes})

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes

    @property
    def parked_bytes(self) -> float:
        """What a sleeping trainer moves to the host and back (torch_memory_saver): its weights and the optimizer
        state it keeps on the GPU."""
        return self.weights_bytes + self.optimizer_bytes

    @property
    def host_bytes(self) -> float:
        """Host memory this GPU's rank uses: the offloaded optimizer state and the offloaded activations."""
        return self.optimizer_host_bytes + self.activations_host_bytes

    @property
    def host_headroom_bytes(self) -> float:
        return self.host_capacity_bytes - self.host_bytes

    @property
    def hbm_fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def host_fits(self) -> bool:
        return self.host_bytes <= self.host_capacity_bytes

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
        line += f"); host optimizer {self.optimizer_host_bytes / GB:.1f}"
        if self.activations_host_bytes:
            line += f" + activations {self.activations_host_bytes / GB:.1f}"
        line += f" of {self.host_capacity_bytes / GB:.1f} GB"
        line += "" if self.host_fits else f" (does NOT fit: {-self.host_headroom_bytes / GB:.1f} GB over)"
        return line



# ---------------------------------------------------------------------------------------------------------------
# Activations
#
# Per layer and micro-batch, bytes stored for the backward, generalising Korthikanti et al. 2022 (arXiv 2205.05198,
# Sec. 4.1 and Table 2): attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorms 4sbh = sbh(34 + 5as/h). With
# flash/fused attention (TE, FlashAttention: the default in Megatron-core) the s^2 score matrix is not stored,
# only a per-head FP32 log-sum-exp, so "none" and "selective" (Megatron's default `core_attn` recompute) store the
# same. Each term is written per token:
#   attention: input to QKV 2h, Q 2(a d_qk), K 2(kv d_qk), V 2(kv d_v), input to the output projection 2(a d_v),
#     softmax stats 4a, dropout mask h (for GPT MHA with d = h/a: 2h + 6h + 2h + h = 11h, Korthikanti; the masks
#     only when the model has residual dropout, ModelSpec.hidden_dropout > 0);
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
# FP8 training: TransformerEngine saves each linear layer's input for its weight gradient as the quantized FP8
# tensor, column-wise only (transformer_engine/pytorch/module/linear.py `_Linear.forward`: "Discard row-wise data
# since it is not needed in backward pass", then `saved_inputmat = inputmat`), 1 byte per element where BF16 keeps
# 2: the QKV input, the MLP's (and experts') fc1 input and the fc2 input (the activation output). The output
# projection's FP8 input is a copy beside the BF16 core output the attention keeps for its own backward: +1 byte.
# Everything else (norm inputs, Q/K/V, fc1 outputs for the activation's backward) stays BF16.


def _attention_tokens_bytes(a: AttentionSpec, tp: int, rep: int, gemm_in: float = BF16, mask: float = MASK) -> float:
    """Bytes per token stored by one attention block; `rep` divides token-side (replicated) tensors (tp under SP);
    `gemm_in`: bytes per element of a saved linear input (1 under FP8); `mask`: of the output dropout mask (0
    without dropout)."""
    h, heads = a.hidden_size, a.num_heads
    token_side = gemm_in * h + mask * h  # input to the projections, output dropout mask
    per_head = FP32 * heads  # flash-attention log-sum-exp
    proj_copy = heads * a.v_head_dim * gemm_in if gemm_in < BF16 else 0.0  # FP8: the output projection's own input
    if a.kind == "gqa":
        kv_local = a.num_kv_heads / tp if a.num_kv_heads >= tp else 1.0
        per_head += BF16 * heads * (a.head_dim + a.v_head_dim) + proj_copy  # Q, and the output-projection input
        sharded_kv = BF16 * kv_local * (a.head_dim + a.v_head_dim)
        return token_side / rep + per_head / tp + sharded_kv
    if a.kind == "mla":
        r, c = a.q_lora_rank, a.kv_lora_rank
        # q latent: norm input (BF16) and q_b input; kv latent: kv_a output (norm input, BF16) and kv_b input
        token_side += BF16 * (r + c + a.qk_rope_head_dim) + gemm_in * (r + c)
        per_head += BF16 * heads * (2 * a.head_dim + 2 * a.v_head_dim) + proj_copy  # Q, K, V, projection input
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


def _mlp_width_bytes(f: FFNSpec, width: float, gemm_in: float = BF16) -> float:
    """fc1 output (BF16, for the activation's backward) + activation output (fc2's saved input) of an MLP of
    `width`, per token."""
    return width * (BF16 * (2 if f.gated else 1) + gemm_in)


def _ffn_tokens_bytes(f: FFNSpec, tp: int, rep: int, etp: int, imbalance: float, gemm_in: float = BF16,
                      mask: float = MASK) -> float:
    h = f.hidden_size
    token_side = gemm_in * h + mask * h  # MLP / router input, output dropout mask
    if f.kind == "dense":
        return token_side / rep + _mlp_width_bytes(f, f.intermediate_size, gemm_in) / tp
    k = f.top_k * imbalance
    token_side += FP32 * f.num_experts + f.num_experts + (FP32 + INT64) * f.top_k  # router logits, map, probs/idx
    routed = k * (gemm_in * h * etp + _mlp_width_bytes(f, f.expert_intermediate_size, gemm_in) + FP32)
    shared = _mlp_width_bytes(f, f.num_shared_experts * f.shared_intermediate_size, gemm_in) / tp
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
    precision: str = "bf16",
    dropout: bool = True,
) -> float:
    """Bytes one layer keeps for the backward of one micro-batch of `tokens` tokens (per GPU, after CP).
    `recompute`: none | selective (equal under flash attention) | full (layer input only). A materialized
    attention without recompute also keeps its BF16 softmax output, heads/tp x seq_len per query token
    (the 2as^2b of Korthikanti et al. 2022, eq. 1, without the dropout mask and output: no attention dropout);
    selective recompute drops exactly that. `precision` fp8: linear inputs saved in FP8 (above); `dropout` False:
    no residual dropout, no masks (the model's hidden_dropout 0)."""
    h = layer.attention.hidden_size
    rep = tp if sequence_parallel and tp > 1 else 1
    if recompute == "full":
        return tokens * BF16 * hc_mult * h / rep
    gemm_in = FP8 if precision == "fp8" and layer.attention.kind in ("gqa", "mla") else BF16
    mask = MASK if dropout else 0.0
    per_token = _attention_tokens_bytes(layer.attention, tp, rep, gemm_in, mask)
    if attention_kernel == "materialized" and recompute == "none":
        per_token += BF16 * layer.attention.num_heads / tp * seq_len
    per_token += _ffn_tokens_bytes(layer.ffn, tp, rep, etp, expert_load_imbalance, gemm_in, mask)
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
    """Micro-batches whose activations each virtual stage of `rank` holds at the rank's peak, as its schedule
    counts them (`Schedule.inflight_per_stage`, each schedule's module citing its source)."""
    return scn.schedule_type.inflight_per_stage(rank, scn.layout.pp, scn.num_microbatches, stages_on_rank(scn, rank),
                                                scn.train.microbatch_group_size_per_vp_stage)


def scenario_layer_bytes(scn: Scenario, layer: LayerSpec, tokens: float, expert_load_imbalance: float = 1.0,
                         recompute: str | None = None) -> float:
    """`layer_activation_bytes` of `layer` for one micro-batch of `tokens` tokens (per GPU, after CP) as the
    scenario runs it (its layout, precision, attention kernel, the model's dropout; `recompute` default the run's)."""
    m, lay, t = scn.model, scn.layout, scn.train
    sp = t.sequence_parallel and lay.tp > 1
    return layer_activation_bytes(layer, tokens, lay.tp, sp, t.recompute if recompute is None else recompute,
                                  lay.etp, m.hc_mult, expert_load_imbalance, scn.stack.attention_kernel, t.seq_len,
                                  t.precision, m.hidden_dropout > 0)


def offloaded_layer_bytes(scn: Scenario, layer: LayerSpec, tokens: float, expert_load_imbalance: float = 1.0
                          ) -> float:
    """Activation bytes one micro-batch keeps for `layer` when the run offloads it to the host
    (`activation_offload_layers`: the first layers); 0 for a layer kept on the GPU."""
    if layer.index >= scn.train.activation_offload_layers or layer.mtp_params:
        return 0.0
    return scenario_layer_bytes(scn, layer, tokens, expert_load_imbalance)


def activations_on_rank(scn: Scenario, rank: int, expert_load_imbalance: float = 1.0,
                        ) -> tuple[float, float, float, float]:
    """(activation bytes on the GPU, comm buffer bytes that scale with tokens, stage-micro-batches in flight,
    activation bytes offloaded to the host) of one rank. With `activation_offload_layers` n (pp 1) the first n
    decoder layers' activations go to the host (Transformer Engine's CPU offload context, which megatron-core's
    --cpu-offloading uses: each layer's saved tensors copied out after its forward and back before its backward,
    double-buffered), the GPU keeping the other layers' and one offloaded layer's in transit."""
    m, lay, t = scn.model, scn.layout, scn.train
    tokens = tokens_per_microbatch(scn)
    sp = t.sequence_parallel and lay.tp > 1
    rep = lay.tp if sp else 1

    def layer_bytes(layer: LayerSpec, recompute: str) -> float:
        return scenario_layer_bytes(scn, layer, tokens, expert_load_imbalance, recompute)

    inflight = inflight_per_stage(scn, rank)
    total = 0.0
    work = 0.0  # one layer's full activations, rebuilt in the backward under full recompute
    held: list[LayerSpec] = []
    host = 0.0
    for stage, count in inflight.items():
        layers = layers_of_stage(scn, stage)
        held.extend(layers)
        total += count * sum(layer_bytes(x, t.recompute) for x in layers)
        out = [b for b in (offloaded_layer_bytes(scn, x, tokens, expert_load_imbalance) for x in layers) if b]
        if out:
            host += count * sum(out)
            total -= count * sum(out) - max(out)  # one offloaded layer's activations in transit
        if stage == 0:
            # token ids (INT64) and the embedding dropout mask per in-flight micro-batch (Megatron
            # theoretical_memory_usage.py: 8 s b p + s b h p)
            total += count * tokens * (INT64 + (MASK if m.hidden_dropout > 0 else 0) * m.hidden_size) / rep
    if holds_head(scn, rank):
        held.extend(m.mtp_layers)
        # one micro-batch reaches the loss at a time: final norm input/output, FP32 logits kept by the
        # vocab-parallel cross entropy (Megatron: s b h 4 (1 + V/h) / t); mHC folds hc streams before the head.
        head = tokens * (2 * BF16 * m.hidden_size / rep + FP32 * m.head_size / lay.tp)
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
    return total + work, comm, sum(inflight.values()), host


# ---------------------------------------------------------------------------------------------------------------
# Training memory


def _process_groups(scn: Scenario) -> int:
    lay = scn.layout
    sizes = (lay.tp, lay.cp, scn.dp * lay.cp, lay.ep * lay.etp, scn.expert_dp, lay.pp)
    return sum(s > 1 for s in sizes)


# What a training rank's memory reads of the scenario (the key derived from it: perfmodel/inputs/keys.py); the
# sweep's pruning, the weight update's parking and the weight copies share one memoized breakdown per layout.
TRAINING_MEMORY_READS = Reads("training_memory_key", run=("kind", "gpus", "train_gpus", "train", "rl.algorithm"),
                              stack_parts=("train",), stack_knobs=("memory_saver",))


def memoized_training_memory(scn: Scenario, memo: Memo) -> MemoryBreakdown:
    """`training_memory(scn)`, reused through the caller's memo by what it reads."""
    return memo.get("training_memory", scenario_key(scn, TRAINING_MEMORY_READS, memo), lambda: training_memory(scn))


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
    if t.precision == "fp8" and not t.fsdp:
        weights += FP8_WEIGHT_CACHE_BYTES * (dense + expert - non_gemm)  # caches of the (unsharded) GEMM weights
    grads = (BF16 if grad_bf16 or scn.stack.grad_reduce_in_bf16 else FP32) * held
    sharded = t.distributed_optimizer or t.fsdp
    state_params = dense / dense_dp + expert / expert_dp if sharded else dense + expert
    state = OPTIMIZER_STATE_BYTES * state_params
    off = t.optimizer_offload_fraction
    optimizer_gpu = state * (1 - off)
    optimizer_host = (state + HOST_GRAD_COPY_BYTES * state_params) * off
    rl = scn.run.rl
    if rl is not None and rl.algorithm == "ppo" and not scn.stack.memory_saver:
        # PPO's critic (the actor's model with a value head, on the same ranks) stays resident beside the actor when
        # the stack parks neither (with torch_memory_saver each is offloaded while the other runs): its weights,
        # gradients and optimizer state as the actor's (the value head's hidden x 1 for the LM head is negligible)
        weights, grads, optimizer_gpu, optimizer_host = 2 * weights, 2 * grads, 2 * optimizer_gpu, 2 * optimizer_host

    acts, token_comm, inflight, acts_host = activations_on_rank(scn, rank, imbalance)
    comm = _process_groups(scn) * COMM_BUFFER_PER_GROUP_BYTES + token_comm
    if t.fsdp:
        # FSDP unshards one layer while prefetching the next (BF16) and reduce-scatters its grads (FP32)
        layers = [x for s in stages_on_rank(scn, rank) for x in layers_of_stage(scn, s)]
        biggest = 0.0
        for x in layers:
            loc, ex = layer_params_local(x, lay.tp, lay.ep * lay.etp)
            biggest = max(biggest, loc.params + ex)
        # under FP8 the gathered layer's FP8 copies too: FSDP keeps no whole-model FP8 cache (Megatron-Bridge's
        # Megatron-FSDP recipes set ddp.keep_fp8_transpose_cache False; FSDP2 casts the gathered weight per use)
        comm += biggest * (2 * BF16 + FP32 + (FP8_WEIGHT_CACHE_BYTES if t.precision == "fp8" else 0))
    margin = hw.hbm_bytes * MARGIN_FRACTION_OF_HBM + MARGIN_FIXED_BYTES if margin_bytes is None else margin_bytes
    total = weights + grads + optimizer_gpu + acts + comm + margin
    host_cap = hw.host_memory_bytes / hw.gpus_per_node
    fits = total <= hw.hbm_bytes and optimizer_host + acts_host <= host_cap
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
        activations_host_bytes=acts_host,
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

