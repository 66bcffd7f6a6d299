"""The tiny model of the local backend, seen from both sides.

An inline Hugging Face config (LlamaForCausalLM, MixtralForCausalLM for the MoE plan, or Dsv4MiniForCausalLM:
DeepSeek-V4's hash routing, sliding window and hyper-connections in miniature, `dsv4mini/`) becomes
- a megatron-core `TransformerConfig` + `GPTModel` with the local layer spec (RMSNorm, RoPE, SwiGLU, GQA,
  untied embeddings; SequentialMLP experts with softmax top-k routing for Mixtral; the DSV4-mini layer spec), and
- the Hugging Face names SGLang loads (`megatron_to_hf`), with a writer for the HF checkpoint folder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from executor.backends.local.tokenizer import BOS_ID, EOS_ID, PAD_ID, write_tokenizer

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MixtralForCausalLM", "Dsv4MiniForCausalLM")
DSV4MINI = "Dsv4MiniForCausalLM"


@dataclass(frozen=True)
class TinyArch:
    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    num_experts: int = 0
    experts_per_token: int = 2
    # Dsv4MiniForCausalLM only (HF keys as DeepSeek-V4's config names them)
    hc_mult: int = 4
    sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    sliding_window: int = 0  # 0: full causal attention
    num_hash_layers: int = 0
    hash_seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def is_dsv4mini(self) -> bool:
        return self.architecture == DSV4MINI

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any]) -> TinyArch:
        """Raises ValueError naming the offending key (the plan check turns it into an InputError)."""
        archs = cfg.get("architectures") or ["LlamaForCausalLM"]
        if archs[0] not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"architectures: the local backend runs {', '.join(SUPPORTED_ARCHITECTURES)}, got {archs[0]}")
        if cfg.get("tie_word_embeddings", False):
            raise ValueError("tie_word_embeddings: the local backend uses untied embeddings (set it to false)")
        for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
            if not isinstance(cfg.get(key), int) or cfg[key] < 1:
                raise ValueError(f"{key}: needs a positive integer")
        heads = cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads", heads)
        if cfg["hidden_size"] % heads or heads % kv:
            raise ValueError(
                "num_attention_heads: hidden_size must divide by the heads and the heads by num_key_value_heads")
        moe = archs[0] in ("MixtralForCausalLM", DSV4MINI)
        mini: dict[str, Any] = {}
        if archs[0] == DSV4MINI:
            for key in ("hc_mult", "hc_sinkhorn_iters", "num_local_experts"):
                if not isinstance(cfg.get(key), int) or cfg[key] < 1:
                    raise ValueError(f"{key}: needs a positive integer (Dsv4MiniForCausalLM)")
            for key in ("sliding_window", "num_hash_layers", "hash_seed"):
                if not isinstance(cfg.get(key, 0), int) or cfg.get(key, 0) < 0:
                    raise ValueError(f"{key}: needs a non-negative integer (Dsv4MiniForCausalLM)")
            if cfg.get("sliding_window", 0) == 1:
                raise ValueError("sliding_window: 0 (none) or at least 2 (the query and the tokens before it)")
            if cfg.get("num_hash_layers", 0) > cfg["num_hidden_layers"]:
                raise ValueError("num_hash_layers: at most num_hidden_layers")
            mini = dict(hc_mult=cfg["hc_mult"], sinkhorn_iters=cfg["hc_sinkhorn_iters"],
                        hc_eps=float(cfg.get("hc_eps", 1e-6)), sliding_window=int(cfg.get("sliding_window", 0)),
                        num_hash_layers=int(cfg.get("num_hash_layers", 0)), hash_seed=int(cfg.get("hash_seed", 0)))
        return cls(
            architecture=archs[0],
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=kv,
            ffn_hidden_size=cfg["intermediate_size"],
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 128)),
            num_experts=int(cfg.get("num_local_experts", 0)) if moe else 0,
            experts_per_token=int(cfg.get("num_experts_per_tok", 2)) if moe else 2,
            **mini,
        )

    def hf_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": "mixtral" if self.is_moe else "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.ffn_hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": BOS_ID,
            "eos_token_id": EOS_ID,
            "pad_token_id": PAD_ID,
            "torch_dtype": "bfloat16",
        }
        if self.is_moe:
            cfg.update(num_local_experts=self.num_experts, num_experts_per_tok=self.experts_per_token,
                       router_aux_loss_coef=0.0, output_router_logits=False, sliding_window=None)
        if self.is_dsv4mini:  # transformers reads it as a Llama config; SGLang picks the class by architecture
            cfg.update(hc_mult=self.hc_mult, hc_sinkhorn_iters=self.sinkhorn_iters, hc_eps=self.hc_eps,
                       sliding_window=self.sliding_window or None, num_hash_layers=self.num_hash_layers,
                       hash_seed=self.hash_seed, scoring_func="sqrtsoftplus")
        return cfg


def transformer_config(arch: TinyArch, pp: int, ep: int, dtype: torch.dtype = torch.bfloat16) -> Any:
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    moe: dict[str, Any] = {}
    if arch.is_moe:
        moe = dict(num_moe_experts=arch.num_experts, moe_router_topk=arch.experts_per_token,
                   moe_ffn_hidden_size=arch.ffn_hidden_size, moe_router_load_balancing_type="none",
                   moe_token_dispatcher_type="alltoall", moe_router_score_function="softmax",
                   moe_router_pre_softmax=False, moe_grouped_gemm=False)
    if arch.sliding_window:  # megatron's (left, right) window: the query and the window - 1 before it
        from executor.backends.local.dsv4mini.math import left_context

        moe["window_size"] = (left_context(arch.sliding_window), 0)
    return TransformerConfig(
        num_layers=arch.num_layers, hidden_size=arch.hidden_size, num_attention_heads=arch.num_heads,
        num_query_groups=arch.num_kv_heads, ffn_hidden_size=arch.ffn_hidden_size, kv_channels=arch.head_dim,
        gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm", layernorm_epsilon=arch.rms_norm_eps,
        add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0,
        bf16=dtype == torch.bfloat16, params_dtype=dtype, pipeline_dtype=dtype,
        pipeline_model_parallel_size=pp, expert_model_parallel_size=ep,
        use_cpu_initialization=True, persist_layer_norm=False, bias_dropout_fusion=False, apply_rope_fusion=False,
        gradient_accumulation_fusion=False, masked_softmax_fusion=False, init_method_std=0.02,
        **moe,
    )


def build_gpt_model(arch: TinyArch, config: Any, pre_process: bool, post_process: bool) -> Any:
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    if arch.is_dsv4mini:
        from executor.backends.local.dsv4mini.megatron_layer import dsv4mini_layer_spec

        spec = dsv4mini_layer_spec(arch)
    else:
        spec = get_gpt_layer_local_spec(
            num_experts=arch.num_experts or None, moe_grouped_gemm=False, normalization="RMSNorm")
    model = GPTModel(
        config=config, transformer_layer_spec=spec, vocab_size=arch.vocab_size,
        max_sequence_length=arch.max_position_embeddings, pre_process=pre_process, post_process=post_process,
        share_embeddings_and_output_weights=False, position_embedding_type="rope", rotary_base=int(arch.rope_theta),
    )
    if arch.is_dsv4mini:
        from executor.backends.local.dsv4mini.megatron_layer import track_token_ids

        track_token_ids(model)
    return model


def megatron_to_hf(
    model: Any, arch: TinyArch, ep_rank: int = 0, ep_size: int = 1
) -> Iterator[tuple[str, torch.Tensor]]:
    """This rank's parameters of `model` (a GPTModel, possibly wrapped) under their Hugging Face names."""
    inner = model
    while hasattr(inner, "module"):
        inner = inner.module
    local_experts = arch.num_experts // ep_size if arch.is_moe else 0
    for name, param in inner.named_parameters():
        w = param.detach()
        if name == "embedding.word_embeddings.weight":
            yield "model.embed_tokens.weight", w
        elif name == "output_layer.weight":
            yield "lm_head.weight", w
        elif name == "decoder.final_layernorm.weight":
            yield "model.norm.weight", w
        elif name.startswith("decoder.layers."):
            parts = name.split(".")
            layer = inner.decoder.layers[int(parts[2])].layer_number - 1
            rest = ".".join(parts[3:])
            yield from _layer_to_hf(f"model.layers.{layer}", rest, w, arch, ep_rank * local_experts)
        else:
            raise KeyError(f"no Hugging Face name for megatron parameter {name}")


def _layer_to_hf(
    prefix: str, rest: str, w: torch.Tensor, arch: TinyArch, expert_offset: int
) -> Iterator[tuple[str, torch.Tensor]]:
    if rest == "input_layernorm.weight":
        yield f"{prefix}.input_layernorm.weight", w
    elif rest == "pre_mlp_layernorm.weight":
        yield f"{prefix}.post_attention_layernorm.weight", w
    elif rest == "self_attention.linear_proj.weight":
        yield f"{prefix}.self_attn.o_proj.weight", w
    elif rest == "self_attention.linear_qkv.weight":
        per_group = arch.num_heads // arch.num_kv_heads
        grouped = w.view(arch.num_kv_heads, per_group + 2, arch.head_dim, arch.hidden_size)
        yield f"{prefix}.self_attn.q_proj.weight", grouped[:, :per_group].reshape(-1, arch.hidden_size)
        yield f"{prefix}.self_attn.k_proj.weight", grouped[:, per_group].reshape(-1, arch.hidden_size)
        yield f"{prefix}.self_attn.v_proj.weight", grouped[:, per_group + 1].reshape(-1, arch.hidden_size)
    elif rest == "mlp.linear_fc1.weight":
        gate, up = w.chunk(2, dim=0)
        yield f"{prefix}.mlp.gate_proj.weight", gate
        yield f"{prefix}.mlp.up_proj.weight", up
    elif rest == "mlp.linear_fc2.weight":
        yield f"{prefix}.mlp.down_proj.weight", w
    elif rest == "mlp.router.weight":
        yield f"{prefix}.block_sparse_moe.gate.weight", w
    elif rest.startswith(("hc_attn.", "hc_ffn.")):  # DSV4-mini's hyper-connections: the same names both sides
        yield f"{prefix}.{rest}", w
    elif rest.startswith("mlp.experts.local_experts."):
        bits = rest.split(".")
        expert = expert_offset + int(bits[3])
        base = f"{prefix}.block_sparse_moe.experts.{expert}"
        if bits[4] == "linear_fc1":
            gate, up = w.chunk(2, dim=0)
            yield f"{base}.w1.weight", gate
            yield f"{base}.w3.weight", up
        else:
            yield f"{base}.w2.weight", w
    else:
        raise KeyError(f"no Hugging Face name for megatron layer parameter {rest}")


def is_quantizable(hf_name: str) -> bool:
    """Linear weights of attention and MLP/experts go to FP8; embeddings, lm_head, norms, router stay BF16."""
    if not hf_name.endswith(".weight") or "layernorm" in hf_name or hf_name.endswith("norm.weight"):
        return False
    if hf_name.startswith(("model.embed_tokens", "lm_head")) or ".gate.weight" in hf_name:
        return False
    return ".self_attn." in hf_name or ".mlp." in hf_name or ".experts." in hf_name


def write_hf_checkpoint(directory: Path, arch: TinyArch, tensors: dict[str, torch.Tensor]) -> None:
    """config.json + model.safetensors (BF16) + the shipped tokenizer: what SGLang's Engine loads."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(arch.hf_config(), indent=2) + "\n", encoding="utf-8")
    gen = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}
    (directory / "generation_config.json").write_text(json.dumps(gen) + "\n", encoding="utf-8")
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"))
    write_tokenizer(directory)
