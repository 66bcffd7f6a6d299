"""The kernels of one engine decode forward, counted: how many run per layer, which of them quantize their
activations, and which are the dense projection GEMMs (`cost/serve/engine.py` prices them).

Check (measured): the InferenceX #863 trace of one SGLang 0.5.9 DeepSeek-R1 FP8 decode step on 8 x MI325X (TP8, 64
requests; https://github.com/SemiAnalysisAI/InferenceX/issues/863, comment of 2026-03-05) ran 2,085 kernels per GPU;
the counts below give 61 x 28 + 366 quantize = 2,074. The H200 trace of the same issue (v0.5.7) ran 1,717: CUDA's
kernels fuse more, which the counts do not follow.
"""

from __future__ import annotations

from perfmodel.inputs.model_spec import ModelSpec

DSV4_DECODE_KERNELS_PER_LAYER = 67.0
"""Kernels per decoder layer in SGLang's DSV4 decode graph: 2,876 CUDA-graph nodes for 43 layers (sglang issue
#29960, DeepSeek-V4-Flash target-verify graph) = 66.9 per layer (mHC pre/post with Sinkhorn, compressor, indexer,
sparse + SWA attention, MoE, shared expert, all-reduces)."""

GQA_DENSE_DECODE_KERNELS_PER_LAYER = 14.0
"""Assumption (counted, not measured): a Llama-style SGLang decode layer runs about 14 kernels: 2 RMSNorm(+residual),
QKV GEMM, RoPE/KV store, attention, O GEMM, all-reduce, gate_up GEMM, SiLU-mul, down GEMM, all-reduce, plus a few
small copies."""

MOE_EXTRA_DECODE_KERNELS_PER_LAYER = 8.0
"""Assumption (counted): an MoE FFN adds about 8 kernels over a dense one: router GEMM, top-k, align/sort, two grouped
GEMMs, activation, combine/scatter, shared-expert gate."""

QUANTIZED_ATTENTION_INPUTS = {"gqa": 2, "mla": 4, "dsv4": 4}
"""Assumption (counted): the attention projections whose activations an FP8 engine quantizes with a kernel of their
own (SGLang's per_token_group_quant_fp8 before each w8a8 block GEMM): GQA/MHA the QKV and output projections; MLA
the q_a, q_b, kv_a and output projections (kv_b runs absorbed in BF16); DSV4 taken as MLA. A dense MLP or a shared
expert adds 2 (gate-up, down); the routed experts' quantize is inside the grouped MoE kernel (expert_layer_s)."""

MLA_EXTRA_DECODE_KERNELS_PER_LAYER = 6.0
"""Assumption (counted): MLA adds q_a / kv_a projections, their norms, the absorbed q_b x k_b and v_b x o GEMMs."""

DENSE_GEMM_CALLS_PER_LAYER = {"gqa": 2, "mla": 3, "dsv4": 3}
"""Counted from the InferenceX #863 MI325X trace (above): the block-FP8 dense projection GEMMs of one decoder layer at
decode: MLA q_a, kv_a and output projections (61 x 3 of its 189 `gemm_a8w8_blockscale` calls; q_b and the absorbed
kv_b run apart, in BF16); GQA/MHA the QKV and output projections; DSV4 taken as MLA. A dense MLP adds 2 (gate-up,
down: the trace's other 6 calls over 3 dense layers); a shared expert runs inside the fused MoE kernel on ROCm
(`_fused_append_shared_experts_kernel`)."""


def dense_gemm_calls(model: ModelSpec) -> int:
    """The block-FP8 dense projection GEMM calls of one decode forward (DENSE_GEMM_CALLS_PER_LAYER)."""
    return sum(DENSE_GEMM_CALLS_PER_LAYER.get(layer.attention.kind, 2) + 2 * (layer.ffn.kind != "moe")
               for layer in model.layers)
