"""Model spec: the typed per-layer description of a model that the cost and memory models read.

The cost model reads shapes (heads, ranks, experts) per layer; the memory model reads parameter counts.
Counts are exact for the weights the reference implementations create: int lookup tables (DSV4 `tid2eid`),
RoPE tables and KV caches are buffers, not parameters, and are not counted. Hugging Face configs become these
specs in model_families.py; callers import both through perfmodel.inputs.model.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Literal

AttentionKind = Literal["gqa", "mla", "dsv4"]
FFNKind = Literal["dense", "moe"]


@dataclass(frozen=True, slots=True)
class AttentionSpec:
    """One attention block. MHA is gqa with num_kv_heads == num_heads."""

    kind: AttentionKind
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int  # q/k head dim (MLA: nope + rope; DSV4: 512 incl. 64 rope dims)
    v_head_dim: int
    q_lora_rank: int = 0  # 0: q projected straight from hidden
    kv_lora_rank: int = 0  # MLA latent; DSV4 has none (its single KV head is not up-projected)
    qk_rope_head_dim: int = 0
    sliding_window: int = 0  # 0 = full causal
    has_sinks: bool = False  # one learned logit per head (gpt-oss, DSV4)
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm weights on q and k (Qwen3)
    # DSV4 only. compress_ratio 0 = sliding window only, 4 = CSA (overlapping compressor + indexer), 128 = HCA.
    compress_ratio: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    o_lora_rank: int = 0
    o_groups: int = 0

    @property
    def has_indexer(self) -> bool:
        # Reference DSV4 builds an Indexer exactly when compress_ratio == 4.
        return self.kind == "dsv4" and self.compress_ratio == 4

    def params(self) -> int:
        d, h = self.hidden_size, self.num_heads
        if self.kind == "gqa":
            q, k, v = h * self.head_dim, self.num_kv_heads * self.head_dim, self.num_kv_heads * self.v_head_dim
            n = d * (q + k + v) + h * self.v_head_dim * d
            n += (q + k + v) * self.qkv_bias + d * self.o_bias + 2 * self.head_dim * self.qk_norm
        elif self.kind == "mla":
            # DeepSeek-V3 MLA: q_a -> q_a_layernorm -> q_b; kv_a_proj_with_mqa -> kv_a_layernorm -> kv_b; o_proj.
            q_out = h * self.head_dim
            r = self.q_lora_rank
            n = d * r + r + r * q_out if r else d * q_out
            c = self.kv_lora_rank
            n += d * (c + self.qk_rope_head_dim) + c + c * h * (self.head_dim - self.qk_rope_head_dim + self.v_head_dim)
            n += h * self.v_head_dim * d
        else:
            # DSV4 (inference/model.py Attention): wq_a, q_norm, wq_b, wkv (one latent KV head), kv_norm,
            # grouped output wo_a [o_groups*o_lora, heads*head_dim/o_groups] and wo_b [hidden, o_groups*o_lora].
            r, hd, g = self.q_lora_rank, self.head_dim, self.o_groups
            n = d * r + r + r * h * hd + d * hd + hd
            n += (h * hd // g) * (g * self.o_lora_rank) + g * self.o_lora_rank * d
            if self.compress_ratio:
                n += _compressor_params(d, self.compress_ratio, hd)
            if self.has_indexer:
                # Indexer: wq_b from the shared q latent, weights_proj hidden->index heads, own compressor.
                ih, ihd = self.index_n_heads, self.index_head_dim
                n += r * ih * ihd + d * ih + _compressor_params(d, self.compress_ratio, ihd)
        return n + h * self.has_sinks


def _compressor_params(hidden: int, ratio: int, head_dim: int) -> int:
    """DSV4 Compressor: ape [ratio, coff*hd], wkv and wgate [coff*hd, hidden], norm [hd]; coff 2 when ratio 4
    (overlapping windows), else 1."""
    width = (2 if ratio == 4 else 1) * head_dim
    return ratio * width + 2 * hidden * width + head_dim


@dataclass(frozen=True, slots=True)
class FFNSpec:
    """A dense MLP or an MoE block. All experts of a layer share one shape."""

    kind: FFNKind
    hidden_size: int
    gated: bool = True  # SwiGLU (gate, up, down) vs plain 2-matrix GELU MLP (GPT-2)
    bias: bool = False  # biases on every MLP matrix (GPT-2, gpt-oss experts)
    intermediate_size: int = 0  # dense
    num_experts: int = 0
    top_k: int = 0
    expert_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0  # per shared expert
    hash_routed: bool = False  # DSV4 first layers: experts from a token-id table; the gate weight still scores them
    router_params: int = 0  # gate weight (+ score-correction / router bias)

    def mlp_params(self, intermediate: int) -> int:
        """One MLP (or expert) of width `intermediate`."""
        d = self.hidden_size
        if self.gated:
            return 3 * d * intermediate + (2 * intermediate + d) * self.bias
        return 2 * d * intermediate + (intermediate + d) * self.bias

    def _shared_params(self) -> int:
        return self.num_shared_experts * self.mlp_params(self.shared_intermediate_size)

    def params_total(self) -> int:
        if self.kind == "dense":
            return self.mlp_params(self.intermediate_size)
        routed = self.num_experts * self.mlp_params(self.expert_intermediate_size)
        return routed + self._shared_params() + self.router_params

    def params_active(self) -> int:
        if self.kind == "dense":
            return self.mlp_params(self.intermediate_size)
        return self.top_k * self.mlp_params(self.expert_intermediate_size) + self._shared_params() + self.router_params


@dataclass(frozen=True, slots=True)
class LayerSpec:
    index: int  # position in the stack; MTP layers continue after the last main layer
    attention: AttentionSpec
    ffn: FFNSpec
    norm_params: int  # the pre-attention and pre-FFN norms
    hc_params: int = 0  # mHC mixers hc_{attn,ffn}_{fn,base,scale}
    mtp_params: int = 0  # MTP only: embedding/hidden input projections, their norms, own head norm (+ hc head)

    def _rest(self) -> int:
        return self.attention.params() + self.norm_params + self.hc_params + self.mtp_params

    def params_total(self) -> int:
        return self._rest() + self.ffn.params_total()

    def params_active(self) -> int:
        return self._rest() + self.ffn.params_active()

    def separate_norms(self) -> tuple[bool, bool]:
        """Whether the pre-attention and the pre-FFN norm run as kernels of their own (what megatron-core's
        `layernorm` recompute replays: transformer_layer.py recomputes a norm that is not an IdentityOp).
        TransformerEngine fuses a norm into the next column-parallel linear (TELayerNormColumnParallelLinear) for
        GQA attention and a dense MLP; MLA (DSV4 taken as MLA) feeds its down projections from a separate TENorm,
        an MoE layer its router and experts."""
        return self.attention.kind in ("mla", "dsv4"), self.ffn.kind == "moe"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    id: str
    family: str  # architectures[0]
    hidden_size: int
    vocab_size: int
    num_layers: int
    layers: tuple[LayerSpec, ...]
    mtp_layers: tuple[LayerSpec, ...] = ()
    tie_word_embeddings: bool = False
    hc_mult: int = 1  # mHC residual streams; 1 = plain residual
    hc_sinkhorn_iters: int = 0
    max_position_embeddings: int = 0
    learned_positions: int = 0  # rows of a learned position table (GPT-2); 0 with RoPE
    final_params: int = 0  # final norm (+ DSV4 hc_head_{fn,base,scale} that folds the streams before the head)
    value_head: bool = False  # a PPO critic: the LM head replaced by hidden -> 1 (Miles LinearForLastLayer)
    hidden_dropout: float = 0.0  # residual (hidden) dropout rate: > 0 keeps a 1-byte mask per element per block

    @property
    def head_size(self) -> int:
        """Outputs of the head per token: the vocabulary, or the critic's one value."""
        return 1 if self.value_head else self.vocab_size

    def as_critic(self) -> ModelSpec:
        """The PPO critic Miles builds from the actor's model: same layers, a value head, untied embeddings, no MTP
        (docs/rl-phases.md, Miles section 4.3)."""
        return dataclasses.replace(self, id=f"{self.id}:critic", value_head=True, tie_word_embeddings=False,
                                   mtp_layers=())

    def embedding_params(self) -> int:
        return (self.vocab_size + self.learned_positions) * self.hidden_size

    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.head_size * self.hidden_size

    @property
    def num_moe_layers(self) -> int:
        return sum(layer.ffn.kind == "moe" for layer in self.layers)

    def _stack(self, include_mtp: bool) -> tuple[LayerSpec, ...]:
        return self.layers + self.mtp_layers if include_mtp else self.layers

    def total_params(self, include_mtp: bool = False) -> int:
        body = sum(layer.params_total() for layer in self._stack(include_mtp))
        return self.embedding_params() + self.lm_head_params() + self.final_params + body

    def active_params(self, include_mtp: bool = False, include_embedding: bool = False) -> int:
        """Parameters a token multiplies: shared weights, top-k experts, router, LM head (tied or not).
        The embedding table is a row gather, so it is left out by default, as DeepSeek and OpenAI count;
        Qwen's published active counts include it (include_embedding=True)."""
        body = sum(layer.params_active() for layer in self._stack(include_mtp))
        head = self.head_size * self.hidden_size
        emb = self.embedding_params() if include_embedding else 0
        return emb + head + self.final_params + body

    def describe(self) -> str:
        kinds = Counter(_attention_label(layer.attention) for layer in self.layers)
        lines = [
            f"{self.id or '<model>'} ({self.family}): {self.num_layers} layers"
            + (f" + {len(self.mtp_layers)} MTP" if self.mtp_layers else "")
            + f", hidden {self.hidden_size}, vocab {self.vocab_size}"
            + (f", mHC x{self.hc_mult}" if self.hc_mult > 1 else ""),
            "attention: " + ", ".join(f"{k} x{n}" for k, n in kinds.items()),
        ]
        moe = [layer.ffn for layer in self.layers if layer.ffn.kind == "moe"]
        if moe:
            f = moe[0]
            shared = f" + {f.num_shared_experts} shared" if f.num_shared_experts else ""
            hashed = sum(x.hash_routed for x in moe)
            lines.append(
                f"MoE: {len(moe)} of {self.num_layers} layers, {f.num_experts} experts top-{f.top_k}{shared},"
                f" expert FFN {f.expert_intermediate_size}" + (f", {hashed} hash-routed" if hashed else "")
            )
        mtp = self.total_params(include_mtp=True) - self.total_params()
        lines.append(
            f"params: {self.total_params() / 1e9:.1f}B total, {self.active_params() / 1e9:.1f}B active"
            " (embedding table excluded)" + (f"; MTP excluded, +{mtp / 1e9:.1f}B" if self.mtp_layers else "")
        )
        return "\n".join(lines)


def _attention_label(a: AttentionSpec) -> str:
    if a.kind == "dsv4":
        return {0: "dsv4-swa", 4: "dsv4-csa"}.get(a.compress_ratio, "dsv4-hca")
    return f"{a.kind} window {a.sliding_window}" if a.sliding_window else a.kind
