"""Model spec: a Hugging Face `config.json` turned into a typed per-layer description.

The cost model reads shapes (heads, ranks, experts) per layer; the memory model reads parameter counts.
Counts are exact for the weights the reference implementations create: int lookup tables (DSV4 `tid2eid`),
RoPE tables and KV caches are buffers, not parameters, and are not counted.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from perfmodel.catalogue import catalogue_ids, load_catalogue_config
from perfmodel.errors import InputError
from perfmodel.inputs.loading import did_you_mean, read_mapping

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


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face config.json -> ModelSpec

SUPPORTED_FAMILIES = (
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "MixtralForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV4ForCausalLM",
    "Dsv4MiniForCausalLM",
    "GptOssForCausalLM",
    "GPT2LMHeadModel",
)


class _Config:
    """Reads typed keys from a config dict; a missing or bad key raises InputError naming it."""

    def __init__(self, data: dict[str, Any], source: str, family: str) -> None:
        self.data, self.source, self.family = data, source, family

    def integer(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        value = self.data.get(key)
        if value is None:  # absent or JSON null
            if default is None:
                raise InputError(self.source, key, f"required by {self.family}: an integer >= {minimum}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InputError(self.source, key, f"must be an integer >= {minimum} (got {value!r})")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(self.source, key, f"must be true or false (got {value!r})")
        return value

    def int_list(self, key: str, length: int) -> list[int]:
        value = self.data.get(key)
        ok = isinstance(value, list) and len(value) >= length
        if not ok or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise InputError(self.source, key, f"required by {self.family}: a list of >= {length} integers >= 0")
        return value


def model_from_hf_config(config: dict[str, Any], model_id: str = "", source: str = "") -> ModelSpec:
    """Build the spec of a supported Hugging Face causal LM from its `config.json` dict."""
    archs = config.get("architectures")
    family = archs[0] if isinstance(archs, list) and archs else None
    if family not in SUPPORTED_FAMILIES:
        raise InputError(source, "architectures", f"unsupported {archs!r}; supported: {', '.join(SUPPORTED_FAMILIES)}")
    c = _Config(config, source, family)
    if family == "GPT2LMHeadModel":
        return _gpt2(c, model_id)
    if family == "DeepseekV4ForCausalLM":
        return _deepseek_v4(c, model_id)
    if family == "DeepseekV3ForCausalLM":
        return _deepseek_v3(c, model_id)
    if family == "Dsv4MiniForCausalLM":
        return _dsv4_mini(c, model_id)
    return _llama_like(c, model_id)


def _common(c: _Config, model_id: str, layers: list[LayerSpec], final_params: int = 0, **extra: Any) -> ModelSpec:
    d = c.integer("hidden_size")
    return ModelSpec(
        id=model_id,
        family=c.family,
        hidden_size=d,
        vocab_size=c.integer("vocab_size"),
        num_layers=len(layers),
        layers=tuple(layers),
        tie_word_embeddings=c.flag("tie_word_embeddings", False),
        max_position_embeddings=c.integer("max_position_embeddings", 0, minimum=0),
        final_params=final_params or d,  # the final RMSNorm unless the family says more
        **extra,
    )


def _windows(c: _Config, num_layers: int) -> list[int]:
    """Per-layer sliding window (0 = full), from `layer_types` when given, else HF's Qwen2/Mixtral rules."""
    window = c.integer("sliding_window", 0, minimum=0)
    types = c.data.get("layer_types")
    if types is not None:
        valid = ("sliding_attention", "full_attention")
        if not isinstance(types, list) or len(types) != num_layers or any(t not in valid for t in types):
            raise InputError(c.source, "layer_types", f"a list of {num_layers} entries, each one of {', '.join(valid)}")
        return [window if t == "sliding_attention" else 0 for t in types]
    if not c.flag("use_sliding_window", True):
        return [0] * num_layers
    first = c.integer("max_window_layers", 0, minimum=0)
    return [window if i >= first else 0 for i in range(num_layers)]


def _llama_like(c: _Config, model_id: str) -> ModelSpec:
    """Llama, Qwen2, Qwen3, Qwen3-MoE, Mixtral, gpt-oss: GQA + SwiGLU (dense or MoE), RMSNorm."""
    f = c.family
    d, n, h = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("num_attention_heads")
    head_dim = c.integer("head_dim", d // h)
    gpt_oss = f == "GptOssForCausalLM"
    attn_bias = c.flag("attention_bias", gpt_oss)  # HF GptOssConfig defaults attention_bias to true
    mlp_bias = c.flag("mlp_bias", False)
    windows = _windows(c, n)
    layers = []
    for i in range(n):
        attention = AttentionSpec(
            kind="gqa",
            hidden_size=d,
            num_heads=h,
            num_kv_heads=c.integer("num_key_value_heads", h),
            head_dim=head_dim,
            v_head_dim=head_dim,
            sliding_window=windows[i],
            has_sinks=gpt_oss,
            qkv_bias=attn_bias or f == "Qwen2ForCausalLM",  # Qwen2 always has q/k/v bias, never o bias
            o_bias=attn_bias,
            qk_norm=f in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"),
        )
        layers.append(LayerSpec(i, attention, _llama_ffn(c, i, d, mlp_bias), norm_params=2 * d))
    return _common(c, model_id, layers)


def _llama_ffn(c: _Config, i: int, d: int, mlp_bias: bool) -> FFNSpec:
    f = c.family
    if f == "Qwen3MoeForCausalLM":
        sparse = (
            i not in (c.data.get("mlp_only_layers") or [])
            and c.integer("num_experts", 0, minimum=0) > 0
            and (i + 1) % c.integer("decoder_sparse_step", 1) == 0
        )
        if sparse:
            e = c.integer("num_experts")
            return FFNSpec("moe", d, num_experts=e, top_k=c.integer("num_experts_per_tok"),
                           expert_intermediate_size=c.integer("moe_intermediate_size"), router_params=e * d)
    elif f in ("MixtralForCausalLM", "GptOssForCausalLM", "Dsv4MiniForCausalLM"):
        e, bias = c.integer("num_local_experts"), f == "GptOssForCausalLM"  # gpt-oss: expert and router biases
        return FFNSpec("moe", d, bias=bias, num_experts=e, top_k=c.integer("num_experts_per_tok"),
                       expert_intermediate_size=c.integer("intermediate_size"), router_params=e * d + e * bias)
    return FFNSpec("dense", d, bias=mlp_bias, intermediate_size=c.integer("intermediate_size"))


def _deepseek_moe(c: _Config, d: int, hash_routed: bool = False, bias: bool = True) -> FFNSpec:
    e = c.integer("n_routed_experts")
    return FFNSpec(
        "moe",
        d,
        num_experts=e,
        top_k=c.integer("num_experts_per_tok"),
        expert_intermediate_size=c.integer("moe_intermediate_size"),
        num_shared_experts=c.integer("n_shared_experts", 0, minimum=0),
        shared_intermediate_size=c.integer("moe_intermediate_size"),
        hash_routed=hash_routed,
        router_params=e * d + e * bias,  # gate weight + per-expert score-correction bias
    )


def _deepseek_v3(c: _Config, model_id: str) -> ModelSpec:
    d, n, h = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("num_attention_heads")
    rope = c.integer("qk_rope_head_dim")
    attention = AttentionSpec(
        kind="mla",
        hidden_size=d,
        num_heads=h,
        num_kv_heads=h,
        head_dim=c.integer("qk_nope_head_dim") + rope,
        v_head_dim=c.integer("v_head_dim"),
        q_lora_rank=c.integer("q_lora_rank", 0, minimum=0),  # null in V2-Lite: q projected directly
        kv_lora_rank=c.integer("kv_lora_rank"),
        qk_rope_head_dim=rope,
    )
    first_dense, freq = c.integer("first_k_dense_replace", 0, minimum=0), c.integer("moe_layer_freq", 1)
    bias = c.data.get("topk_method", "noaux_tc") == "noaux_tc"  # e_score_correction_bias exists only then

    def layer(i: int, mtp_params: int = 0) -> LayerSpec:
        if i >= first_dense and i % freq == 0:
            ffn = _deepseek_moe(c, d, bias=bias)
        else:
            ffn = FFNSpec("dense", d, intermediate_size=c.integer("intermediate_size"))
        return LayerSpec(i, attention, ffn, norm_params=2 * d, mtp_params=mtp_params)

    # MTP module: eh_proj [hidden, 2*hidden], enorm, hnorm, shared_head.norm. Its embed_tokens and
    # shared_head.head are copies of the main ones in the checkpoint; they are not counted again here.
    mtp = tuple(layer(n + k, 2 * d * d + 3 * d) for k in range(c.integer("num_nextn_predict_layers", 0, minimum=0)))
    return _common(c, model_id, [layer(i) for i in range(n)], mtp_layers=mtp)


def _deepseek_v4(c: _Config, model_id: str) -> ModelSpec:
    """Shapes from DeepSeek-V4 `inference/model.py` as ported line by line in ROCm/ATOM
    `atom/models/deepseek_v4.py`, cross-checked against a DSV4-Flash GGUF tensor table (q_b [1024 x 32768],
    wo_a [4096 x 8192], compressor, indexer and hc_* shapes) and SGLang's / vllm-ascend's DSV4 gates."""
    d, n, h = c.integer("hidden_size"), c.integer("num_hidden_layers"), c.integer("num_attention_heads")
    n_mtp = c.integer("num_nextn_predict_layers", 0, minimum=0)
    ratios = c.int_list("compress_ratios", n)
    hc = c.integer("hc_mult", 1)
    # Block: hc_{attn,ffn}_fn [(2+hc)*hc, hc*hidden], _base [(2+hc)*hc], _scale [3] (pre, post, comb).
    mix = (2 + hc) * hc
    hc_layer = 2 * (mix * hc * d + mix + 3) if hc > 1 else 0
    # hc_head_fn [hc, hc*hidden], hc_head_base [hc], hc_head_scale [1]: fold streams before the LM head.
    hc_head = hc * hc * d + hc + 1 if hc > 1 else 0
    any_csa = 4 in ratios[: n + n_mtp]

    def attention(ratio: int) -> AttentionSpec:
        return AttentionSpec(
            kind="dsv4",
            hidden_size=d,
            num_heads=h,
            num_kv_heads=c.integer("num_key_value_heads", 1),
            head_dim=c.integer("head_dim"),
            v_head_dim=c.integer("head_dim"),  # values are the same latent as keys
            q_lora_rank=c.integer("q_lora_rank"),
            qk_rope_head_dim=c.integer("qk_rope_head_dim"),
            sliding_window=c.integer("sliding_window"),  # every DSV4 layer also attends to a raw window
            has_sinks=True,
            compress_ratio=ratio,
            index_n_heads=c.integer("index_n_heads") if any_csa else 0,
            index_head_dim=c.integer("index_head_dim") if any_csa else 0,
            index_topk=c.integer("index_topk") if any_csa else 0,
            o_lora_rank=c.integer("o_lora_rank"),
            o_groups=c.integer("o_groups"),
        )

    hash_layers = c.integer("num_hash_layers", 0, minimum=0)

    def layer(i: int, mtp_params: int = 0) -> LayerSpec:
        hashed = i < hash_layers
        # Hash layers keep the gate weight (it weighs the looked-up experts) but have no bias.
        ffn = _deepseek_moe(c, d, hash_routed=hashed, bias=not hashed)
        ratio = ratios[i] if i < len(ratios) else 0
        return LayerSpec(i, attention(ratio), ffn, norm_params=2 * d, hc_params=hc_layer, mtp_params=mtp_params)

    # MTPBlock: e_proj and h_proj [hidden, hidden], enorm, hnorm, norm, and its own hc_head.
    mtp = tuple(layer(n + k, 2 * d * d + 3 * d + hc_head) for k in range(n_mtp))
    return _common(
        c,
        model_id,
        [layer(i) for i in range(n)],
        mtp_layers=mtp,
        hc_mult=hc,
        hc_sinkhorn_iters=c.integer("hc_sinkhorn_iters", 0, minimum=0),
        final_params=d + hc_head,
    )


def _dsv4_mini(c: _Config, model_id: str) -> ModelSpec:
    """The local backend's DSV4 miniature (executor/backends/local/dsv4mini): Mixtral-shaped GQA + MoE layers, each
    with a sliding window, hash routing on the first `num_hash_layers`, and two hyper-connections of `hc_mult`
    streams (fn [hc*hidden, 2hc + hc^2], base [2hc + hc^2], scale [3] each)."""
    spec = _llama_like(c, model_id)
    hc, d = c.integer("hc_mult"), spec.hidden_size
    hc_layer = 2 * (hc * d * (2 * hc + hc * hc) + (2 * hc + hc * hc) + 3)
    hashed = c.integer("num_hash_layers", 0, minimum=0)
    window = c.integer("sliding_window", 0, minimum=0)
    layers = tuple(dataclasses.replace(
        lay, hc_params=hc_layer, ffn=dataclasses.replace(lay.ffn, hash_routed=lay.index < hashed),
        attention=dataclasses.replace(lay.attention, sliding_window=window)) for lay in spec.layers)
    return dataclasses.replace(spec, layers=layers, hc_mult=hc,
                               hc_sinkhorn_iters=c.integer("hc_sinkhorn_iters", 0, minimum=0))


def _gpt2(c: _Config, model_id: str) -> ModelSpec:
    """GPT-2: MHA with fused-qkv and output biases, plain GELU MLP with biases, LayerNorm (weight + bias),
    learned position embeddings, tied head."""
    d, n, h = c.integer("n_embd"), c.integer("n_layer"), c.integer("n_head")
    attention = AttentionSpec("gqa", d, h, h, d // h, d // h, qkv_bias=True, o_bias=True)
    ffn = FFNSpec("dense", d, gated=False, bias=True, intermediate_size=c.integer("n_inner", 4 * d))
    positions = c.integer("n_positions", 1024)
    return ModelSpec(
        id=model_id,
        family=c.family,
        hidden_size=d,
        vocab_size=c.integer("vocab_size"),
        num_layers=n,
        layers=tuple(LayerSpec(i, attention, ffn, norm_params=4 * d) for i in range(n)),
        tie_word_embeddings=c.flag("tie_word_embeddings", True),
        max_position_embeddings=positions,
        learned_positions=positions,
        final_params=2 * d,  # ln_f
    )


def load_model(ref: str, source: str = "", field: str = "model") -> ModelSpec:
    """A model by catalogue id (`deepseek-v4-flash`) or by path to a Hugging Face config.json."""
    if ref.endswith(".json") or "/" in ref:
        path = Path(ref)
        model_id = path.parent.name if path.name == "config.json" else path.stem
        return model_from_hf_config(read_mapping(path), model_id=model_id, source=str(path))
    try:
        config = load_catalogue_config(ref)
    except KeyError:
        ids = catalogue_ids()
        message = (f"unknown model id {ref!r}{did_you_mean(ref, ids)}; valid: {', '.join(ids)}, or a path to a "
                   "config.json")
        raise InputError(source, field, message) from None
    return model_from_hf_config(config, model_id=ref, source=f"perfmodel/catalogue/{ref}.json")
