"""The DSV4-mini layer for megatron-core (0.16.1): a layer spec whose layer is megatron's own SelfAttention (local
spec: fused QKV, RoPE, GQA, its DotProductAttention with `window_size` for the sliding window), its MLP or MoELayer
(SequentialMLP experts, alltoall dispatch) with a router from `dsv4mini/math.py` (hash-routed for the first
`num_hash_layers` layers, top-k of sqrtsoftplus scores after), and two hyper-connections (`math.HyperConnection`)
around the attention and the FFN. The residual streams travel between layers as [s, b, n, h] FP32: the first layer
copies the embedding into them, the last averages them for the final norm, so one pipeline stage holds every layer
(the plan check refuses PP > 1 for this model).

The hash router needs each token's id: a forward pre-hook on the GPTModel (`track_token_ids`) keeps the input ids of
the forward in flight, flattened in megatron's [s, b] order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from executor.backends.local.dsv4mini import math as dm

_TOKEN_IDS: list[torch.Tensor | None] = [None]  # [s * b] of the forward in flight (track_token_ids)


def track_token_ids(model: torch.nn.Module) -> None:
    """Keep each forward's input ids ([b, s] -> megatron's flattened [s, b] order) for the hash routers."""

    def hook(_module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        _TOKEN_IDS[0] = None if ids is None else ids.t().reshape(-1)

    model.register_forward_pre_hook(hook, with_kwargs=True)


def _router_class() -> type:
    from megatron.core.transformer.moe.router import Router

    class Dsv4MiniRouter(Router):
        """sqrtsoftplus scores; the hash table's experts on the first `num_hash_layers` layers, top-k after."""

        hash_layers = 0
        hash_seed = 0
        vocab_size = 0

        def routing(self, logits: torch.Tensor, padding_mask: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
            flat = logits.reshape(-1, self.num_experts)
            k = self.config.moe_router_topk
            table = None
            if self.layer_number is not None and self.layer_number <= self.hash_layers:
                if getattr(self, "_table", None) is None:
                    self._table = dm.hash_table(self.vocab_size, self.num_experts, k, self.hash_seed)
                table = self._table
            ids, w = dm.route(flat, k, _TOKEN_IDS[0], table)
            self.last_expert_ids = ids.detach()
            probs = torch.zeros_like(flat, dtype=torch.float32).scatter(1, ids, w)
            routing_map = torch.zeros_like(flat, dtype=torch.bool).scatter(1, ids, True)
            return probs, routing_map

        def forward(self, input: torch.Tensor, padding_mask: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
            return self.routing(self.gating(input), padding_mask)

    return Dsv4MiniRouter


@dataclass
class Dsv4MiniSubmodules:
    input_layernorm: Any
    self_attention: Any
    pre_mlp_layernorm: Any
    mlp: Any


def _layer_class() -> type:
    from megatron.core.transformer.module import MegatronModule
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_layer import BaseTransformerLayer

    class Dsv4MiniLayer(MegatronModule, BaseTransformerLayer):
        def __init__(self, config: Any, submodules: Dsv4MiniSubmodules, layer_number: int = 1, hc_mult: int = 4,
                     sinkhorn_iters: int = 20, hc_eps: float = 1e-6, pg_collection: Any = None,
                     vp_stage: Any = None, **_: Any) -> None:
            from megatron.core.process_groups_config import ProcessGroupCollection

            super().__init__(config=config)
            self.layer_number = layer_number
            self.n = hc_mult
            if pg_collection is None:
                pg_collection = ProcessGroupCollection.use_mpu_process_groups()
            self.input_layernorm = build_module(submodules.input_layernorm, config=config,
                                                hidden_size=config.hidden_size, eps=config.layernorm_epsilon)
            self.self_attention = build_module(submodules.self_attention, config=config, layer_number=layer_number,
                                               pg_collection=pg_collection)
            self.pre_mlp_layernorm = build_module(submodules.pre_mlp_layernorm, config=config,
                                                  hidden_size=config.hidden_size, eps=config.layernorm_epsilon)
            if config.num_moe_experts:
                self.mlp = build_module(submodules.mlp, config=config, pg_collection=pg_collection)
                self.mlp.set_layer_number(layer_number)
            else:
                self.mlp = build_module(submodules.mlp, config=config, tp_group=pg_collection.tp)
            self.hc_attn = dm.HyperConnection(config.hidden_size, hc_mult, sinkhorn_iters, hc_eps)
            self.hc_ffn = dm.HyperConnection(config.hidden_size, hc_mult, sinkhorn_iters, hc_eps)

        def forward(self, hidden_states: torch.Tensor, attention_mask: Any = None, rotary_pos_emb: Any = None,
                    **_: Any) -> tuple[torch.Tensor, None]:
            dtype = self.config.params_dtype
            streams = dm.expand_streams(hidden_states, self.n) if hidden_states.dim() == 3 else hidden_states

            def attention(x: torch.Tensor) -> torch.Tensor:
                out, bias = self.self_attention(self.input_layernorm(x.to(dtype)), attention_mask=attention_mask,
                                                rotary_pos_emb=rotary_pos_emb)
                return out if bias is None else out + bias

            def ffn(x: torch.Tensor) -> torch.Tensor:
                out, bias = self.mlp(self.pre_mlp_layernorm(x.to(dtype)))
                return out if bias is None else out + bias

            streams, self.last_attention = self.hc_attn(streams, attention)
            self.last_attn_streams = streams  # kept for executor align, as the parts below
            streams, self.last_ffn = self.hc_ffn(streams, ffn)
            self.last_streams = streams
            if self.layer_number == self.config.num_layers:
                return dm.contract_streams(streams).to(dtype), None
            return streams, None

    return Dsv4MiniLayer


def dsv4mini_layer_spec(arch: Any) -> Any:
    """The layer spec GPTModel builds every layer from (the local spec's attention, norms, MLP / MoE parts)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.moe.moe_layer import MoESubmodules
    from megatron.core.transformer.spec_utils import ModuleSpec

    local = get_gpt_layer_local_spec(num_experts=arch.num_experts or None, moe_grouped_gemm=False,
                                     normalization="RMSNorm").submodules
    mlp = local.mlp
    if arch.num_experts:
        router = type("Dsv4MiniRouterForModel", (_router_class(),), {
            "hash_layers": arch.num_hash_layers, "hash_seed": arch.hash_seed, "vocab_size": arch.vocab_size})
        mlp = ModuleSpec(module=mlp.module, submodules=MoESubmodules(experts=mlp.submodules.experts, router=router),
                         metainfo=mlp.metainfo)
    return ModuleSpec(module=_layer_class(), params={"hc_mult": arch.hc_mult, "sinkhorn_iters": arch.sinkhorn_iters,
                                                     "hc_eps": arch.hc_eps},
                      submodules=Dsv4MiniSubmodules(input_layernorm=local.input_layernorm,
                                                    self_attention=local.self_attention,
                                                    pre_mlp_layernorm=local.pre_mlp_layernorm, mlp=mlp))
