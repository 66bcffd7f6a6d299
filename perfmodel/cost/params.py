"""Parameters per GPU, the one module that shards them: by layer (tensor, expert and expert-tensor parallel), by
pipeline rank (which virtual stages, the embedding, the head and MTP a rank holds), and by role for a serving
engine. Training's gradient sync and optimizer (`stage_params`), the memory model (`params_on_rank`) and the
rollout engine's cost (`params_by_role`) all read it.

Two sums per rank exist, each named for what it feeds: `params_on_rank` is what a rank holds in memory
(DualPipe's second copy, the MTP stage's own embedding), `stage_params` what its gradient sync and optimizer
price (one copy, layers whole on the last stage). They differ for DualPipe and MTP models; reconciling them is a
model change (the prediction snapshot would move), left to a measured decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfmodel.inputs.model import AttentionSpec, FFNSpec, LayerSpec, ModelSpec

if TYPE_CHECKING:
    from perfmodel.inputs.scenario import Scenario


@dataclass(frozen=True, slots=True)
class ShardParams:
    dense: float
    expert: float

    def __add__(self, other: ShardParams) -> ShardParams:
        return ShardParams(self.dense + other.dense, self.expert + other.expert)


# ---------------------------------------------------------------------------------------------------------------
# By layer

@dataclass(frozen=True, slots=True)
class LocalParams:
    params: float  # parameters held by one rank
    non_gemm: float  # of which not GEMM weights (norms, biases, sinks, router, mHC mixers): stay BF16 in FP8 recipes


def _compressor_params(hidden: int, ratio: int, head_dim: int) -> int:
    """DSV4 Compressor (ape, wkv, wgate, norm), as counted by perfmodel.inputs.model (kept in step by
    tests/cost/memory/test_memory.py::test_split_params_sum_to_the_model_at_tp1)."""
    width = (2 if ratio == 4 else 1) * head_dim
    return ratio * width + 2 * hidden * width + head_dim


def attention_params_local(a: AttentionSpec, tp: int, indexer_split: bool = True) -> LocalParams:
    """Attention parameters held by one of `tp` tensor-parallel ranks; equals `a.params()` at tp=1.

    `indexer_split`: the DSV4 lightning indexer's query projection and head weights are split over TP (the memory
    model's reading) or held whole on every rank (the training cost's reading, `cost/train/layers.py`: DSV4's KV
    side duplicated on every TP rank). No public Megatron DSV4 TP layout settles it; both are kept, named, so
    predictions stay as measured. Choosing one is a model change."""
    d, h = a.hidden_size, a.num_heads
    if a.kind == "gqa":
        kv_div = min(tp, a.num_kv_heads)
        q, k, v = h * a.head_dim, a.num_kv_heads * a.head_dim, a.num_kv_heads * a.v_head_dim
        gemm = (d * q + h * a.v_head_dim * d) / tp + d * (k + v) / kv_div
        non_gemm = (q / tp + (k + v) / kv_div) * a.qkv_bias + d * a.o_bias + 2 * a.head_dim * a.qk_norm
    elif a.kind == "mla":
        r, c, q_out = a.q_lora_rank, a.kv_lora_rank, h * a.head_dim
        gemm = (d * r + r * q_out / tp) if r else d * q_out / tp
        gemm += d * (c + a.qk_rope_head_dim) + c * h * (a.head_dim - a.qk_rope_head_dim + a.v_head_dim) / tp
        gemm += h * a.v_head_dim * d / tp
        non_gemm = r + c  # q_a and kv_a layernorms
    else:  # dsv4
        r, hd, g = a.q_lora_rank, a.head_dim, a.o_groups
        gemm = d * r + r * h * hd / tp + d * hd  # wq_a, kv latent replicated; wq_b head-parallel
        gemm += ((h * hd // g) * (g * a.o_lora_rank) + g * a.o_lora_rank * d) / tp  # grouped wo_a, wo_b
        non_gemm = r + hd  # q_norm, kv_norm
        if a.compress_ratio:
            gemm += _compressor_params(d, a.compress_ratio, hd)  # one latent head: replicated
        if a.has_indexer:
            ih, ihd = a.index_n_heads, a.index_head_dim
            gemm += ((r * ih * ihd + d * ih) / (tp if indexer_split else 1)
                     + _compressor_params(d, a.compress_ratio, ihd))
    non_gemm += h * a.has_sinks / tp
    return LocalParams(gemm + non_gemm, non_gemm)


def ffn_params_local(f: FFNSpec, tp: int) -> tuple[LocalParams, float]:
    """(non-expert params held by one of `tp` ranks, routed-expert params of the whole layer)."""
    if f.kind == "dense":
        return LocalParams(f.mlp_params(f.intermediate_size) / tp, 0.0), 0.0
    shared = f.num_shared_experts * f.mlp_params(f.shared_intermediate_size) / tp
    routed = f.num_experts * f.mlp_params(f.expert_intermediate_size)
    return LocalParams(shared + f.router_params, f.router_params), float(routed)


def layer_params_local(layer: LayerSpec, tp: int, expert_shards: int, attn_tp: int | None = None,
                       indexer_split: bool = True) -> tuple[LocalParams, float]:
    """(non-expert params on one rank, routed-expert params on one rank) for one decoder (or MTP) layer.
    mHC mixers, norms and the MTP projections are counted replicated (small)."""
    a = attention_params_local(layer.attention, attn_tp or tp, indexer_split)
    f, routed = ffn_params_local(layer.ffn, tp)
    rest = layer.norm_params + layer.hc_params + layer.mtp_params
    non_gemm = a.non_gemm + f.non_gemm + layer.norm_params + layer.hc_params
    return LocalParams(a.params + f.params + rest, non_gemm), routed / expert_shards


# ---------------------------------------------------------------------------------------------------------------
# Pipeline placement


def stage_offsets(scn: Scenario) -> list[int]:
    out, acc = [], 0
    for n in scn.stage_layers:
        out.append(acc)
        acc += n
    return out


def stages_on_rank(scn: Scenario, rank: int) -> list[int]:
    """Virtual stages held by pipeline rank `rank`, as its schedule places them: j * pp + rank (Megatron
    interleaving); DualPipe(V) two chunks in a V, stages r and 2pp-1-r."""
    return scn.schedule_type.stages_on_rank(rank, scn.layout.pp, len(scn.stage_layers))


def holds_embedding(scn: Scenario, rank: int) -> bool:
    return 0 in stages_on_rank(scn, rank)


def holds_head(scn: Scenario, rank: int) -> bool:
    """LM head, final norm and MTP live with the last virtual stage (a V-shaped schedule folds it back onto rank 0,
    deepseek-ai/DualPipe README)."""
    return len(scn.stage_layers) - 1 in stages_on_rank(scn, rank)


def layers_of_stage(scn: Scenario, stage: int) -> tuple[LayerSpec, ...]:
    off = stage_offsets(scn)[stage]
    return scn.model.layers[off: off + scn.stage_layers[stage]]


def params_on_rank(scn: Scenario, rank: int) -> tuple[float, float, float]:
    """(non-expert params, routed-expert params, non-GEMM params) held by pipeline rank `rank`, before any
    data-parallel sharding. Embedding on the first stage, LM head + final norm + MTP on the last (untied); a tied
    head on another stage keeps its own copy; Megatron also builds the embedding on the MTP stage
    (megatron/core/models/gpt/gpt_model.py: `if self.pre_process or self.mtp_process: self.embedding = ...`)."""
    m, lay = scn.model, scn.layout
    dense = expert = non_gemm = 0.0
    for stage in stages_on_rank(scn, rank):
        for layer in layers_of_stage(scn, stage):
            loc, ex = layer_params_local(layer, lay.tp, lay.ep * lay.etp)
            dense, expert, non_gemm = dense + loc.params, expert + ex, non_gemm + loc.non_gemm
    emb = m.embedding_params() / lay.tp
    first, last = holds_embedding(scn, rank), holds_head(scn, rank)
    if first:
        dense, non_gemm = dense + emb, non_gemm + emb
    if last:
        for layer in m.mtp_layers:
            loc, ex = layer_params_local(layer, lay.tp, lay.ep * lay.etp)
            dense, expert, non_gemm = dense + loc.params, expert + ex, non_gemm + loc.non_gemm
        head = m.head_size * m.hidden_size / lay.tp
        if m.tie_word_embeddings:
            head = 0.0 if first else head  # tied: shares the first stage's table, else keeps a synced copy
        if m.mtp_layers and not first:
            head += emb  # MTP stage's own embedding
        dense += head + m.final_params
        non_gemm += head + m.final_params
    copies = scn.schedule_type.parameter_copies  # DualPipe proper: both directions' copies ("Parameter 2x")
    return copies * dense, copies * expert, copies * non_gemm



# ---------------------------------------------------------------------------------------------------------------
# What a pipeline stage's gradient sync and optimizer price


def layer_params_per_gpu(layer: LayerSpec, tp: int, ep: int, etp: int) -> ShardParams:
    local, expert = layer_params_local(layer, tp, ep * etp, indexer_split=False)
    return ShardParams(local.params, expert)


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
        head = (m.head_size * m.hidden_size / lay.tp) if not m.tie_word_embeddings or pp > 1 else 0.0
        total = total + ShardParams(head + m.final_params, 0.0)
        for layer in m.mtp_layers:
            total = total + layer_params_per_gpu(layer, lay.tp, lay.ep, lay.etp)
    return total


# ---------------------------------------------------------------------------------------------------------------
# By role, for a serving engine


@dataclass(frozen=True, slots=True)
class RoleParams:
    """Whole-model parameters by role (the rollout engine shards each role its own way)."""

    attention: float
    shared_experts: float
    dense_mlp: float
    router: float
    small_bytes: float  # norms (BF16) and mHC mixers (FP32), in bytes
    expert: float  # one routed expert
    moe_layers: int
    num_experts: int
    top_k: int


def params_by_role(m: ModelSpec) -> RoleParams:
    attn = shared = dense_mlp = router = small = expert = 0.0
    n_moe = num_experts = top_k = 0
    for layer in m.layers:
        attn += layer.attention.params()
        small += layer.norm_params * 2 + layer.hc_params * 4  # bytes
        f = layer.ffn
        if f.kind == "moe":
            n_moe += 1
            shared += f.num_shared_experts * f.mlp_params(f.shared_intermediate_size)
            router += f.router_params
            expert = f.mlp_params(f.expert_intermediate_size)
            num_experts, top_k = f.num_experts, f.top_k
        else:
            dense_mlp += f.params_total()
    return RoleParams(attn, shared, dense_mlp, router, small, expert, n_moe, num_experts, top_k)
