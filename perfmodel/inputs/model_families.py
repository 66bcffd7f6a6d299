"""Hugging Face `config.json` -> ModelSpec: one parser per supported architecture family."""

from __future__ import annotations

import dataclasses
from typing import Any

from perfmodel.errors import InputError
from perfmodel.inputs.bounds import MAX_CONFIG_INT, MAX_EXPERTS, MAX_LAYERS
from perfmodel.inputs.model_spec import AttentionSpec, FFNSpec, LayerSpec, ModelSpec

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

# keys whose size sets how many objects are built per model (layers) or per layer (experts)
CONFIG_INT_BOUNDS = {"num_hidden_layers": MAX_LAYERS, "n_layer": MAX_LAYERS, "num_experts": MAX_EXPERTS,
                     "n_routed_experts": MAX_EXPERTS, "num_local_experts": MAX_EXPERTS}


GPT2_RESID_PDROP = 0.1
"""GPT-2's residual dropout when its config does not say: Hugging Face GPT2Config's resid_pdrop default, and
Megatron-LM's --hidden-dropout default (0.1) the 2021 GPT-3 runs trained with."""


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
            raise InputError(self.source, key, f"must be an integer >= {minimum} (got {str(value)[:40]!r})")
        top = CONFIG_INT_BOUNDS.get(key, MAX_CONFIG_INT)
        if value > top:
            raise InputError(self.source, key, f"{value:,} is past what the model prices ({top:,} at most; "
                             "docs/reliability.md)")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(self.source, key, f"must be true or false (got {value!r})")
        return value

    def fraction(self, key: str, default: float) -> float:
        """A probability in [0, 1) (a dropout rate)."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise InputError(self.source, key, f"must be a number in [0, 1) (got {str(value)[:40]!r})")
        return float(value)

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
        # no residual dropout unless the config asks: Megatron-Bridge's bridges set hidden_dropout 0.0 for Llama,
        # Qwen2/3, Qwen3-MoE, DeepSeek-V2/V3/V4 and gpt-oss (src/megatron/bridge/models/*/..._bridge.py)
        hidden_dropout=c.fraction("hidden_dropout", 0.0),
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
        hidden_dropout=c.fraction("resid_pdrop", GPT2_RESID_PDROP),
    )
