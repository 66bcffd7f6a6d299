"""Model FLOPs for MFU and "model TFLOP/s": the Megatron-Bridge convention, as published.

`model_flops_per_token(model, seq_len)` is forward + backward = 3 x forward, model FLOPs only (no recompute,
no router, norms, softmax or mHC mixing), following `num_floating_point_operations` in Megatron-Bridge
`src/megatron/bridge/training/utils/flop_utils.py` (NeMo 25.11 era, the version behind the performance summary
of docs/reference/hardware.md 3e), per token:

  6 x [ sum over decoder layers (+ MTP layers) of
          attention projections (weights x 1 MAC per token)
        + core attention: causal, every layer full-sequence: seq/2 keys per query for QK^T and for PV
          (sliding windows are NOT discounted: gpt-oss is counted as if all layers were full attention)
        + MLP: hidden x ffn x (3 if SiLU-gated else 2) x (top_k routed + shared) -- the GLU factor 3/2 applies
          only to SiLU GLUs (`activation_func == F.silu`), so gpt-oss's quick-GELU GLU counts 2 matrices
      + MTP: 2 hidden^2 projection + 3 hidden norm terms per MTP layer
      + LM head: hidden x padded vocab x (1 + MTP layers) ]

MLA (DeepSeek-V3) uses the `multi_latent_attention` branch of the same function; DeepSeek-V4 its
`dsv4_hybrid` branch (sliding window + compressed/sparse attention, compressor and indexer terms), with this
model's actual head dims. Checked against the published ratios of docs/reference/hardware.md 3e within 1% (tests/cost).
Use `layers.forward_work` for hardware FLOPs (windows, causal pairs exactly, recompute).

From Megatron-Bridge v0.5.0 (NeMo 26.06; PR #3947, https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/3947, with
the window handling of PR #3029 that v0.5.0 first ships) the formula counts every GLU as 3 matrices and a sliding-window
layer's core at its exact average causal context, W - W (W - 1) / (2 T) keys per query for a window W < T (else T/2):
the stack knob `flops_convention` "mbridge-26.06" (the releases from 26.06 on, stacks/megatron-bridge.yaml). Only
gpt-oss among the catalogue's models counts differently (quick-GELU GLU, windows of 128): 27.2 -> 32.6 GFLOP per
token at 4096, as the archive's rows of either side print (433 TFLOP/s at 15,938 tokens/s in 26.04, 943 at 28,947
in 26.06).
"""

from __future__ import annotations

from perfmodel.inputs.model import AttentionSpec, FFNSpec, LayerSpec, ModelSpec

VOCAB_PAD = 128  # Megatron make_vocab_size_divisible_by default (x TP, ignored here: per-token convention)


def padded_vocab(vocab: int, multiple: int = VOCAB_PAD) -> int:
    return -(-vocab // multiple) * multiple


MBRIDGE_2511, MBRIDGE_2606 = "mbridge-25.11", "mbridge-26.06"  # the conventions (stack knob flops_convention)


def _glu_counted(model: ModelSpec, ffn: FFNSpec, convention: str = MBRIDGE_2511) -> bool:
    """Megatron-Bridge 25.11: gated_linear_multiplier = 3/2 only if activation_func is F.silu; gpt-oss uses a
    (clamped) quick-GELU GLU and is counted as a 2-matrix MLP. From 26.06: every GLU."""
    return ffn.gated and (convention == MBRIDGE_2606 or model.family != "GptOssForCausalLM")


def _keys_per_query(a: AttentionSpec, seq_len: int, convention: str) -> float:
    """Keys each query meets in the convention's count: seq_len / 2 (every layer full causal), or from 26.06 a
    sliding window W < seq_len at its exact causal average, W - W (W - 1) / (2 seq_len)."""
    w = a.sliding_window
    if convention == MBRIDGE_2606 and 0 < w < seq_len:
        return w - w * (w - 1) / (2.0 * seq_len)
    return seq_len / 2


def attention_macs_per_token(a: AttentionSpec, seq_len: int, convention: str = MBRIDGE_2511) -> float:
    """Forward multiply-accumulates per token of one attention block under the convention."""
    h, heads = a.hidden_size, a.num_heads
    if a.kind == "gqa":
        q, kv = heads * a.head_dim, a.num_kv_heads * a.head_dim
        proj = h * (q + kv + a.num_kv_heads * a.v_head_dim) + heads * a.v_head_dim * h
        core = _keys_per_query(a, seq_len, convention) * heads * (a.head_dim + a.v_head_dim)
        return proj + core
    if a.kind == "mla":
        nope = a.head_dim - a.qk_rope_head_dim
        r, c = a.q_lora_rank, a.kv_lora_rank
        q_term = r * (h + heads * a.head_dim + 1) if r else h * heads * a.head_dim
        kv_term = c * (h + heads * (nope + a.v_head_dim) + 1) + h * a.qk_rope_head_dim
        o_term = heads * a.v_head_dim * h
        core = seq_len / 2 * heads * a.head_dim + seq_len / 2 * heads * a.v_head_dim
        return q_term + kv_term + o_term + core
    # dsv4_hybrid branch
    hd, r, w = a.head_dim, a.q_lora_rank, a.sliding_window
    proj = r * (h + heads * hd + 1) + (h * hd + hd) + (heads * hd * a.o_lora_rank + a.o_groups * a.o_lora_rank * h)
    if a.compress_ratio == 0:
        return proj + heads * w * hd * 2
    if a.compress_ratio == 128:
        avg = (seq_len // 128) / 2
        return proj + heads * (w + avg) * hd * 2 + h * hd * 2
    # ratio 4: CSA with the lightning indexer
    k = min(a.index_topk, seq_len // 4)
    avg = k * (1 - k * 4 / (2 * seq_len))
    ih, ihd = a.index_n_heads, a.index_head_dim
    indexer = h * (2 * ihd) * 2 + r * ih * ihd + h * ih + ih * ihd * (seq_len // 4)
    return proj + heads * (w + avg) * hd * 2 + h * (2 * hd) * 2 + indexer


def ffn_macs_per_token(model: ModelSpec, f: FFNSpec, convention: str = MBRIDGE_2511) -> float:
    mats = 3 if _glu_counted(model, f, convention) else 2
    if f.kind == "dense":
        return f.hidden_size * f.intermediate_size * mats
    routed = f.expert_intermediate_size * f.top_k
    shared = f.shared_intermediate_size * f.num_shared_experts
    return f.hidden_size * (routed + shared) * mats


def layer_model_flops_fwd(model: ModelSpec, layer: LayerSpec, seq_len: int, mtp: bool = False,
                          convention: str = MBRIDGE_2511) -> float:
    """Forward model FLOPs per token of one decoder (or MTP) layer; MTP adds its norms and 2h^2 projection."""
    macs = (attention_macs_per_token(layer.attention, seq_len, convention)
            + ffn_macs_per_token(model, layer.ffn, convention))
    if mtp:
        h = model.hidden_size
        macs += 3 * h + 2 * h * h
    return 2.0 * macs


def head_model_flops_fwd(model: ModelSpec, mtp_heads: int | None = None) -> float:
    """Forward FLOPs per token of the LM head (the main one plus one per MTP layer)."""
    n = len(model.mtp_layers) if mtp_heads is None else mtp_heads
    outputs = 1 if model.value_head else padded_vocab(model.vocab_size)  # a critic's value head: one output
    return 2.0 * model.hidden_size * outputs * (1 + n)


def model_flops_per_token(model: ModelSpec, seq_len: int, include_mtp: bool = True,
                          convention: str = MBRIDGE_2511) -> float:
    """Forward + backward (3 x forward) model FLOPs per trained token at `seq_len` (Megatron-Bridge)."""
    mtp = model.mtp_layers if include_mtp else ()
    fwd = sum(layer_model_flops_fwd(model, layer, seq_len, convention=convention) for layer in model.layers)
    fwd += sum(layer_model_flops_fwd(model, layer, seq_len, mtp=True, convention=convention) for layer in mtp)
    fwd += head_model_flops_fwd(model, len(mtp))
    return 3.0 * fwd
