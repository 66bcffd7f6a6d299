"""Per-GPU memory of an SGLang rollout engine: weights in the rollout precision, the KV pool left by
`--mem-fraction-static` (or capped by `--max-total-tokens`), the KV bytes per token and the pool's token capacity.
Bytes are plain counts; `summary()` prints GB = 1e9 bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.cost.dtypes import BF16, FP8_BLOCK_WEIGHT_BYTES, FP32
from perfmodel.cost.params import attention_params_local, ffn_params_local
from perfmodel.inputs.keys import Reads, scenario_key
from perfmodel.inputs.model import LayerSpec, ModelSpec
from perfmodel.inputs.scenario import Scenario
from perfmodel.invariants import check_parts_non_negative
from perfmodel.memo import Memo

GB = 1e9

# DSV4 SGLang decode state ([BLOG-DAY0] in docs/reference/dsv4-flash-and-miles.md 1.3): every layer keeps
# the last 128 raw tokens (SWA) per request; compression-state rings hold C4: 8 and C128: 128 not-yet-compressed
# entries. The ring entry layout follows the reference Compressor buffers kv_state / score_state of shape
# [coff * ratio, coff * head_dim] in FP32 (coff = 2 for ratio 4, else 1), whose first dimension gives exactly the
# 8 / 128 above. [inference]
DSV4_STATE_BYTES = FP32


@dataclass(frozen=True, slots=True)
class RolloutMemory:
    """Bytes on one SGLang engine GPU."""

    weights_bytes: float
    kv_pool_bytes: float
    # HBM outside the static fraction (the runtime, activations, CUDA/HIP graphs, NCCL); plus, inside it, what vLLM
    # holds out of its pool for its profile run (engine_reserved_bytes)
    reserved_bytes: float
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
    * DSV4 (docs/reference/dsv4-flash-and-miles.md 1.3): every layer attends to a 128-token raw window
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
    gemm_bytes = FP8_BLOCK_WEIGHT_BYTES if precision == "fp8" else BF16
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


# What an engine GPU's memory reads of the scenario (the key derived from it: perfmodel/inputs/keys.py).
ROLLOUT_MEMORY_READS = Reads("rollout_memory_key", run=("rl.rollout", "rl.rollout_gpus"),
                             stack_knobs=("rollout_memory_rule",))


def memoized_rollout_memory(scn: Scenario, memo: Memo) -> RolloutMemory:
    """`rollout_memory(scn)`, reused through the caller's memo by what it reads."""
    return memo.get("rollout_memory", scenario_key(scn, ROLLOUT_MEMORY_READS, memo), lambda: rollout_memory(scn))


# SGLang takes mem_fraction_static of the memory free after CUDA and its communicators start (0.5.12
# srt/model_executor/model_runner_kv_cache_mixin.py: rest_memory = post_model_load_memory - pre_model_load_memory x
# (1 - mem_fraction_static)). vLLM takes gpu_memory_utilization of the whole memory less weights and the peak of a
# profile run (v1/worker/gpu_worker.py determine_available_memory, 0.15.1), whose sampler runs over max_num_seqs x
# vocab logits with top-k and top-p set (gpu_model_runner.py _dummy_sampler_run) through the sort path that is the
# default (v1/sample/ops/topk_topp_sampler.py: FlashInfer's sampler is opt-in): per logit the model's BF16 output,
# its FP32 copy (v1/sample/sampler.py), the sorted values, their int64 indices and the softmax probabilities.
VLLM_SAMPLER_BYTES_PER_LOGIT = BF16 + FP32 + FP32 + 8 + FP32
VLLM_DEFAULT_MAX_NUM_SEQS = 1024  # engine/arg_utils.py 0.15.1: GPUs of 70 GiB or more, LLM class and API server


def engine_static_bytes(scn: Scenario) -> float:
    """What one engine GPU's static fraction covers (weights, KV pool and, for vLLM, its sampler's peak): SGLang's
    of the memory free when it starts (the profile's `runtime_reserved_bytes` already held), vLLM's of the whole."""
    ro, hw = scn.run.rl.rollout, scn.hardware  # type: ignore[union-attr]
    free = hw.hbm_bytes - (hw.runtime_reserved_bytes if scn.stack.rollout_memory_rule == "sglang" else 0.0)
    return ro.mem_fraction_static * free


def engine_reserved_bytes(scn: Scenario) -> float:
    """Bytes inside the static fraction that hold neither weights nor KV: vLLM's profile-run sampler peak (every TP
    rank samples the whole vocabulary). Its forward's own peak at max_num_batched_tokens (MLP or fused-MoE
    intermediates) is smaller for the shipped engines and not priced. 0 for SGLang."""
    if scn.run.rl is None or scn.stack.rollout_memory_rule != "vllm":
        return 0.0
    seqs = scn.run.rl.rollout.max_running_requests or VLLM_DEFAULT_MAX_NUM_SEQS
    return seqs * scn.model.vocab_size * VLLM_SAMPLER_BYTES_PER_LOGIT


def rollout_memory(scn: Scenario, include_mtp: bool = False) -> RolloutMemory:
    """One GPU of a rollout engine. Its static fraction (`engine_static_bytes`) holds the weights and the KV pool
    (and vLLM's sampler peak, `engine_reserved_bytes`): pool = static - weights - held, capped at max_total_tokens x
    kv_bytes_per_token when --max-total-tokens is given; the rest of HBM is left for activations, graphs and
    communication. `include_mtp`: load the MTP layers too (speculative decoding)."""
    if scn.run.rl is None:
        raise ValueError("rollout_memory needs an RL run (rl: section)")
    ro, hw, m = scn.run.rl.rollout, scn.hardware, scn.model
    attn_tp = ro.tp // ro.dp if ro.dp_attention else ro.tp
    kv_dtype = ro.kv_cache_dtype or "bf16"  # SGLang --kv-cache-dtype auto = the model's BF16
    weights = rollout_weights_bytes(m, ro.precision, ro.tp, ro.ep, attn_tp, include_mtp)
    per_token = kv_bytes_per_token(m, kv_dtype, attn_tp, include_mtp)
    fixed = kv_bytes_per_request_fixed(m, kv_dtype, attn_tp, include_mtp)
    static = engine_static_bytes(scn)
    held = engine_reserved_bytes(scn)
    pool = max(0.0, static - weights - held)
    if ro.max_total_tokens is not None and per_token > 0:
        pool = min(pool, ro.max_total_tokens * per_token)
    capacity_tokens = int(pool // per_token) if per_token > 0 else 0
    reserved = hw.hbm_bytes - static + held
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
        fits=weights + held < static and pool > 0,
    )

