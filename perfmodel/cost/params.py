"""Parameters held by one GPU of a pipeline stage, split into dense (reduced over dp x cp) and expert
(reduced over expert_dp) parameters, after TP / EP / ETP sharding. Feeds gradient sync and the optimizer."""

from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING

from perfmodel.inputs.model import AttentionSpec, LayerSpec

if TYPE_CHECKING:
    from perfmodel.inputs.scenario import Scenario


@dataclass(frozen=True, slots=True)
class ShardParams:
    dense: float
    expert: float

    def __add__(self, other: ShardParams) -> ShardParams:
        return ShardParams(self.dense + other.dense, self.expert + other.expert)


def _attention_replicated(a: AttentionSpec) -> int:
    """Attention weights every TP rank holds whole (norms, latent down projections, DSV4's KV side)."""
    d = a.hidden_size
    if a.kind == "gqa":
        return 2 * a.head_dim * a.qk_norm + d * a.o_bias
    if a.kind == "mla":
        r, c = a.q_lora_rank, a.kv_lora_rank
        return (d * r + r if r else 0) + d * (c + a.qk_rope_head_dim) + c
    return a.params() - _dsv4_split(a)  # wq_a, wkv, their norms, compressor and indexer


def _dsv4_split(a: AttentionSpec) -> int:
    h, hd, r, g = a.num_heads, a.head_dim, a.q_lora_rank, a.o_groups
    return r * h * hd + (h * hd // g) * (g * a.o_lora_rank) + g * a.o_lora_rank * a.hidden_size + h * a.has_sinks


def attention_params_per_gpu(a: AttentionSpec, tp: int) -> float:
    total = a.params()
    if a.kind == "gqa" and a.num_kv_heads < tp:
        # each rank keeps one whole KV head: K/V weights of one head instead of kv/tp heads
        kv = a.hidden_size * a.num_kv_heads * (a.head_dim + a.v_head_dim)
        kv += a.num_kv_heads * (a.head_dim + a.v_head_dim) * a.qkv_bias
        rep = _attention_replicated(a)
        return (total - kv - rep) / tp + kv / a.num_kv_heads + rep
    rep = _attention_replicated(a)
    return (total - rep) / tp + rep


def layer_params_per_gpu(layer: LayerSpec, tp: int, ep: int, etp: int) -> ShardParams:
    f = layer.ffn
    dense = attention_params_per_gpu(layer.attention, tp) + layer.norm_params + layer.hc_params + layer.mtp_params
    if f.kind == "dense":
        return ShardParams(dense + f.mlp_params(f.intermediate_size) / tp, 0.0)
    shared = f.num_shared_experts * f.mlp_params(f.shared_intermediate_size) / tp
    experts = (f.num_experts / ep) * f.mlp_params(f.expert_intermediate_size) / etp
    return ShardParams(dense + shared + f.router_params, experts)


def stage_params(scn: Scenario, stage: int) -> ShardParams:
    """Parameters on one GPU of physical pipeline stage `stage` (all its virtual chunks)."""
    m, lay = scn.model, scn.layout
    pp, vpp = lay.pp, lay.vpp
    if not 0 <= stage < pp:
        raise ValueError(f"stage {stage} outside pp {pp}")
    total = ShardParams(0.0, 0.0)
    n_virtual = pp * vpp
    for v in range(stage, n_virtual, pp):
        start = sum(scn.stage_layers[:v])
        for layer in m.layers[start : start + scn.stage_layers[v]]:
            total = total + layer_params_per_gpu(layer, lay.tp, lay.ep, lay.etp)
    if stage == 0:
        total = total + ShardParams(m.embedding_params() / lay.tp, 0.0)
    if stage == pp - 1:
        head = (m.vocab_size * m.hidden_size / lay.tp) if not m.tie_word_embeddings or pp > 1 else 0.0
        total = total + ShardParams(head + m.final_params, 0.0)
        for layer in m.mtp_layers:
            total = total + layer_params_per_gpu(layer, lay.tp, lay.ep, lay.etp)
    return total
