"""Activation memory of a training rank: bytes each decoder layer keeps for its backward, per micro-batch, and
how many micro-batches each pipeline rank holds (its schedule's in-flight count), with what recompute and
activation offloading leave on the GPU. `training.py` adds them to weights, grads, optimizer and buffers.
"""

from __future__ import annotations

import math

from perfmodel.cost.dtypes import BF16, FP8, FP32, INT32, INT64, MASK
from perfmodel.cost.params import holds_head, layers_of_stage, stages_on_rank
from perfmodel.inputs.job import DEFAULT_RECOMPUTE_MODULES
from perfmodel.inputs.model import AttentionSpec, FFNSpec, LayerSpec
from perfmodel.inputs.scenario import Scenario

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


def _attention_not_kept(a: AttentionSpec, tp: int, rep: int, gemm_in: float, recomputed: frozenset[str],
                        separate_norm: bool) -> float:
    """Bytes per token of an attention block that selective recompute of `recomputed` does not keep: `layernorm`
    the output of a separate pre-attention norm (the down projections' saved input; megatron-core discards it and
    re-runs the norm, `set_for_recompute_input_layernorm` covering the FP8 copy), `mla_up_proj` the up-projected
    Q, K and V (multi_latent_attention.py `qkv_up_proj_and_rope_apply` under CheckpointWithoutOutput; DSV4 taken as
    MLA: its Q)."""
    out = gemm_in * a.hidden_size / rep if "layernorm" in recomputed and separate_norm else 0.0
    if "mla_up_proj" in recomputed:
        if a.kind == "mla":
            out += BF16 * a.num_heads * (2 * a.head_dim + a.v_head_dim) / tp
        elif a.kind == "dsv4":
            out += BF16 * a.num_heads * a.head_dim / tp
    return out


def _ffn_recomputed_bytes(f: FFNSpec, tp: int, rep: int, etp: int, imbalance: float, gemm_in: float, mask: float,
                          recomputed: frozenset[str], separate_norm: bool) -> float:
    """Bytes per token an FFN keeps under selective recompute of `recomputed`: `mlp` / `moe` checkpoint the whole
    block (its input only: a dense MLP's is the residual stream, counted with the norms; an MoE's the separate
    norm's output), `layernorm` drops that norm output, `moe_act` the experts' activation output (fc2's saved input;
    the fc1 output stays for the recomputation), `shared_experts` the shared experts' activations."""
    h = f.hidden_size
    norm_out = 0.0 if "layernorm" in recomputed and separate_norm else gemm_in * h / rep
    if f.kind == "dense" and "mlp" in recomputed:
        return mask * h / rep
    if f.kind == "moe" and "moe" in recomputed:
        return norm_out + mask * h / rep
    out = _ffn_tokens_bytes(f, tp, rep, etp, imbalance, gemm_in, mask) - (gemm_in * h / rep - norm_out)
    if f.kind == "moe":
        if "moe_act" in recomputed:
            out -= f.top_k * imbalance * f.expert_intermediate_size * gemm_in / rep
        if "shared_experts" in recomputed and f.num_shared_experts:
            out -= _mlp_width_bytes(f, f.num_shared_experts * f.shared_intermediate_size, gemm_in) / tp
    return out


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
    recomputed: frozenset[str] | None = None,
) -> float:
    """Bytes one layer keeps for the backward of one micro-batch of `tokens` tokens (per GPU, after CP).
    `recompute`: none | selective (the submodules `recomputed`, default core_attn, keep less:
    `_attention_not_kept`, `_ffn_recomputed_bytes`) | full (layer input only). A materialized attention without
    core_attn recompute also keeps its BF16 softmax output, heads/tp x seq_len per query token (the 2as^2b of
    Korthikanti et al. 2022, eq. 1, without the dropout mask and output: no attention dropout); under flash
    attention core_attn recompute keeps the same. `precision` fp8: linear inputs saved in FP8 (above); `dropout`
    False: no residual dropout, no masks (the model's hidden_dropout 0)."""
    h = layer.attention.hidden_size
    rep = tp if sequence_parallel and tp > 1 else 1
    if recompute == "full":
        return tokens * BF16 * hc_mult * h / rep
    if recompute != "selective":
        recomputed = frozenset()
    elif recomputed is None:
        recomputed = frozenset(DEFAULT_RECOMPUTE_MODULES)
    gemm_in = FP8 if precision == "fp8" and layer.attention.kind in ("gqa", "mla") else BF16
    mask = MASK if dropout else 0.0
    attn_norm, ffn_norm = layer.separate_norms()
    per_token = (_attention_tokens_bytes(layer.attention, tp, rep, gemm_in, mask)
                 - _attention_not_kept(layer.attention, tp, rep, gemm_in, recomputed, attn_norm))
    if attention_kernel == "materialized" and "core_attn" not in recomputed:
        per_token += BF16 * layer.attention.num_heads / tp * seq_len
    per_token += _ffn_recomputed_bytes(layer.ffn, tp, rep, etp, expert_load_imbalance, gemm_in, mask, recomputed,
                                       ffn_norm)
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
                                  t.precision, m.hidden_dropout > 0, t.recomputed_modules())


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
        total += count * sum(layer_bytes(x, t.layer_recompute(i)) for i, x in enumerate(layers))
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
