"""The interface the simulator uses: the cost of one micro-batch through one virtual pipeline stage, pipeline
p2p, data-parallel gradient sync and the optimizer step.

Communication inside a chunk is reported as exposed time by kind ("tp", "cp", "ep_a2a", and "etp" when
etp > 1): TP collectives are exposed, as Megatron without --tp-comm-overlap; EP all-to-alls are exposed (a
schedule that overlaps them, DualPipe or 1F1B A2A overlap, hides them itself); CP K/V exchange runs under the
attention kernel (TransformerEngine ring attention), so only what exceeds the layer's attention time counts.
Recompute replays the forward work before the backward: "selective" = the submodules of `recompute_modules`
(Megatron --recompute-granularity selective --recompute-modules, default core_attn: the work items that run in
them, work.py), "full" = every decoder layer of the chunk, or its first `recompute_num_layers` (Megatron
--recompute-method block; embedding and head are not recomputed); the replayed collectives are added to
`bwd_comm_s`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from perfmodel.cost.comm import (
    GroupPlacement,
    collective_s,
    group_placement,
    host_copy_s,
    placement_from_stride,
    send_recv_s,
)
from perfmodel.cost.compute import hbm_rate
from perfmodel.cost.memory.activations import offloaded_layer_bytes
from perfmodel.cost.params import stage_params
from perfmodel.cost.train.cuda_graphs import host_share
from perfmodel.cost.train.determinism import deterministic_scale
from perfmodel.cost.train.layers import (
    ACT_BYTES,
    Shard,
    embedding_work,
    head_work,
    layer_work,
    mtp_work,
)
from perfmodel.cost.train.moe import MoEAssumptions, layer_imbalance
from perfmodel.cost.train.timing import COMM_KINDS, Times, time_work
from perfmodel.cost.train.work import CORE_ATTN, MOE
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.keys import Reads, hardware_key, model_key, scenario_key
from perfmodel.inputs.model import LayerSpec
from perfmodel.inputs.scenario import Scenario
from perfmodel.inputs.stack import Stack
from perfmodel.memo import Memo

GRAD_BYTES = 4.0  # FP32 gradient reduction: Megatron forces accumulate_allreduce_grads_in_fp32 for bf16
# (megatron/training/arguments.py: "bfloat16 requires gradient accumulation and all-reduce to be done in fp32")
PARAM_GATHER_BYTES = 2.0  # BF16 model parameters all-gathered by the distributed optimizer / FSDP
# Megatron DDP bucket: max(40M, 1M x data-parallel size) parameters per bucket
# (megatron/core/distributed/distributed_data_parallel.py); one collective call per bucket.
BUCKET_MIN_PARAMS = 40e6
BUCKET_PARAMS_PER_DP_RANK = 1e6
ADAM_BYTES_PER_PARAM = 30.0  # read FP32 param, grad, m, v (16 B); write param, m, v (12 B) + BF16 param (2 B):
# Primus optimizer.py _ADAM_BYTES_PER_PARAM, the byte count behind its measured 0.21 HBM efficiency (S4)
# Host Adam with optimizer CPU offload: Megatron-core distributed optimizer with offload_fraction 1.0 took 15.5 s
# per optimizer step for Qwen3.5-35B-A3B on 2 nodes x 8 H100 (ISEEKYAN/Megatron-LM issue #188, 2026-08-24,
# "Megatron distopt" column), about 35e9 / 2 / 15.5 = 1.1e9 parameters per second per node, D2H/H2D included.
HOST_ADAM_PARAMS_PER_S_PER_NODE = 1.1e9
OFFLOAD_COPY_BYTES_PER_PARAM = 6.0  # FP32 gradient down (4 B), BF16 parameter up (2 B)


@dataclass(frozen=True, slots=True)
class ChunkCost:
    """One micro-batch through one virtual pipeline stage, on one GPU of that stage.
    Cached and shared between callers: treat it (and its dicts) as read-only."""

    fwd_compute_s: float
    bwd_input_s: float  # backward for activations (B)
    bwd_weight_s: float  # backward for weights (W); B + W = the full backward
    recompute_s: float  # forward replayed before the backward under the recompute mode
    fwd_comm_s: dict[str, float]  # communication inside the chunk by kind: "tp", "cp", "ep_a2a" (+ "etp")
    bwd_comm_s: dict[str, float]
    model_flops: float  # model FLOPs (fwd + bwd, no recompute) of this chunk on this GPU
    p2p_bytes: float  # activation bytes sent to the next stage (DSV4: [s, b, hc_mult, h])
    # what an F&B pair (sim/pipeline.py) hides under what: the share of the forward compute in the MoE layers'
    # experts ("mlp" in megatron-core's schedule plan), the dispatch's share of the forward EP all-to-all, the
    # combine-gradient's share of the backward's (the first all-to-all a backward layer sends)
    moe_share: float = 0.0
    f_dispatch_share: float = 0.5
    b_combine_share: float = 0.5


# ---------------------------------------------------------------------------------------------------------------
# Scenario helpers


def chunk_layers(scn: Scenario, virtual_stage: int) -> tuple[LayerSpec, ...]:
    n = len(scn.stage_layers)
    if not 0 <= virtual_stage < n:
        raise ValueError(f"virtual stage {virtual_stage} outside 0..{n - 1}")
    start = sum(scn.stage_layers[:virtual_stage])
    return scn.model.layers[start : start + scn.stage_layers[virtual_stage]]


def shard_of(scn: Scenario, tokens: float, seq_len: int) -> Shard:
    lay, t = scn.layout, scn.train
    return Shard(tokens, seq_len, lay.tp, lay.cp, lay.ep, lay.etp, t.sequence_parallel and lay.tp > 1, t.precision,
                 t.moe_dispatcher, scn.stack.attention_kernel,
                 scn.stack.fp8_recipe, scn.stack.elementwise_fusion, scn.stack.flops_convention,
                 scn.stack.grouped_gemm_launch)


def _places(scn: Scenario) -> dict[str, GroupPlacement]:
    out = {k: group_placement(scn, k) for k in ("tp", "cp", "ep", "etp")}
    out["ep_a2a"] = out.pop("ep")
    return out


# What a chunk's cost reads of the scenario besides its layers: the training step, on how many GPUs, priced with
# the stack's training knobs (the key is derived from these objects' fields: perfmodel/inputs/keys.py). The
# optimizer's offload is priced by optimizer_step_s, outside the chunk.
CHUNK_READS = Reads("chunk_key", run=("gpus", "train_gpus", "train"), stack_parts=("train",),
                    exclude=("train.optimizer_offload_fraction",))


def chunk_cost(scn: Scenario, virtual_stage: int, tokens: int, seq_len: int,
               moe: MoEAssumptions | None = None, memo: Memo | None = None) -> ChunkCost:
    """tokens = tokens in this micro-batch over all CP ranks (micro_batch x seq_len for fixed batching);
    seq_len = the length of each of its sequences (attention cost ~ tokens x seq_len; for a packed batch of
    unequal sequences pass sum(s_i^2) / sum(s_i)). Virtual stage 0 includes the embedding, the last virtual
    stage the final norm, LM head, loss and MTP. `moe` carries the routing assumptions (balance factor, Zipf
    exponent, seed, per-MoE-layer host overhead); `memo` (the caller's) reuses results by everything they
    depend on."""
    moe = moe or MoEAssumptions()
    memo = memo if memo is not None else Memo()
    layers = chunk_layers(scn, virtual_stage)
    first, last = virtual_stage == 0, virtual_stage == len(scn.stage_layers) - 1
    start = sum(scn.stage_layers[:virtual_stage])
    key = (scenario_key(scn, CHUNK_READS, memo), start, len(layers), first, last, float(tokens), seq_len, moe)
    return memo.get("chunk_cost", key, lambda: _chunk_cost(scn, layers, first, last, tokens, seq_len, moe, memo))


def _layer_times(scn: Scenario, layer: LayerSpec, s: Shard, places: dict[str, GroupPlacement], imbalance: float,
                 moe: MoEAssumptions, memo: Memo) -> tuple[Times, float]:
    """Times and model FLOPs of one decoder layer on this scenario's stack. The kernels' times are memoized by
    the layer's shape (not its index) and not by the stack: the stages of a model repeat a handful of layer kinds,
    so a sweep prices each kind once per shard, and a calibration trying stack knobs reprices none."""
    m = scn.model
    key = (hardware_key(scn.hardware, memo), model_key(m, memo), dataclasses.replace(layer, index=0), s,
           imbalance, moe, tuple(sorted((k, v.size, v.gpus_per_node_in_group) for k, v in places.items())))
    t, flops = memo.get("layer_times", key, lambda: _price_layer(scn, layer, s, places, imbalance))
    return _on_stack(scn, t, layer.ffn.kind == "moe", moe), flops


def _price_layer(scn: Scenario, layer: LayerSpec, s: Shard, places: dict[str, GroupPlacement],
                 imbalance: float) -> tuple[Times, float]:
    w = layer_work(scn.model, layer, s, imbalance)
    return (time_work(scn.hardware, w, places, s.elementwise_fusion == "eager", s.fp8_recipe, _multi_stream(s)),
            w.model_flops_fwd)


def _multi_stream(s: Shard) -> bool:
    """Whether the shard's MoE expert GEMMs run one GEMM per expert (the stack's `grouped_gemm_launch`)."""
    return s.grouped_gemm_launch == "multi_stream"


def _scaled(t: Times, st: Stack) -> Times:
    """Compute times x the stack's multipliers, the backward's on top (communication is the network's, not the
    stack's)."""
    return t.scaled(st.train_compute_scale, st.train_compute_scale * st.backward_compute_scale)


def _on_stack(scn: Scenario, raw: Times, moe_layer: bool, moe: MoEAssumptions) -> Times:
    """A layer's kernel times as this stack runs them: compute x `train_compute_scale` (and under
    `deterministic` x its measured cost, cost/train/determinism.py), plus the host's time to
    issue the layer's ops (op counts x per-op times measured for eager megatron-core, MoEAssumptions, x the
    stack's `host_op_time_scale`, x the host CPU's `host_op_time_factor`, for the share of the ops its CUDA graph
    scope leaves to the host, cost/train/cuda_graphs.py). A GPU's host runs ahead, so its time is a floor per pass;
    a CPU runs both on the same cores, so it adds."""
    st = scn.stack
    t = _scaled(raw, st)
    if st.deterministic:
        d = deterministic_scale(moe_layer)
        t = t.scaled(d, d)
    scale = st.host_op_time_scale * scn.hardware.host_op_time_factor * host_share(st.cuda_graph_scope, moe_layer)
    host_fwd = (moe.layer_host_fwd_s if moe_layer else moe.dense_host_fwd_s) * scale
    host_bwd = (moe.layer_host_bwd_s if moe_layer else moe.dense_host_bwd_s) * scale
    if st.host_device_overlap:
        t.fwd += max(0.0, host_fwd - t.fwd - sum(t.fwd_comm.values()))
        t.bwd_in += max(0.0, host_bwd - t.bwd_in - t.bwd_w - sum(t.bwd_comm.values()))
    else:
        t.fwd += host_fwd
        t.bwd_in += host_bwd
    return t


def _chunk_cost(scn: Scenario, layers: tuple[LayerSpec, ...], first: bool, last: bool, tokens: float,
                seq_len: int, moe: MoEAssumptions, memo: Memo) -> ChunkCost:
    hw, m = scn.hardware, scn.model
    s = shard_of(scn, tokens, seq_len)
    eager = s.elementwise_fusion == "eager"
    places = _places(scn)
    recomputed = scn.train.recomputed_modules()
    total = Times()
    recompute_s = 0.0
    replay = dict.fromkeys(COMM_KINDS, 0.0)
    model_flops_fwd = moe_fwd = 0.0

    def imbalance(layer: LayerSpec) -> float:
        return layer_imbalance(layer.ffn, m.vocab_size, s.ep, s.ep * s.t_moe, moe, memo)

    def add_layer(layer: LayerSpec, position: int) -> None:
        nonlocal recompute_s, model_flops_fwd, moe_fwd
        t, flops = _layer_times(scn, layer, s, places, imbalance(layer), moe, memo)
        total.add(t)
        moe_fwd += sum(dt for path, dt in t.module_fwd.items() if path.split("/")[0] == MOE)
        model_flops_fwd += flops
        if scn.train.activation_offload_layers:
            # an offloaded layer's activations go to the host after its forward and come back before its backward,
            # on a side stream under the next layer's pass (Transformer Engine's CPU offload context): what the
            # host link takes beyond the layer's own pass shows
            copy = host_copy_s(hw, offloaded_layer_bytes(scn, layer, s.tokens / s.cp, imbalance(layer)))
            total.fwd += max(0.0, copy - t.fwd - sum(t.fwd_comm.values()))
            total.bwd_in += max(0.0, copy - t.bwd_in - t.bwd_w - sum(t.bwd_comm.values()))
        mode = scn.train.layer_recompute(position)
        if mode == "full":
            recompute_s += t.fwd
            for k in COMM_KINDS:
                replay[k] += t.fwd_comm[k]
        elif mode == "selective":
            fwd, comm = t.replayed_fwd(recomputed)
            recompute_s += fwd
            for k in COMM_KINDS:
                replay[k] += comm[k]
            if CORE_ATTN in recomputed:  # the CP K/V exchange the attention core hides (its exposed part)
                replay["cp"] += t.fwd_comm["cp"]

    if first:
        w = embedding_work(m, s)
        total.add(_scaled(time_work(hw, w, places, eager, s.fp8_recipe, _multi_stream(s)), scn.stack))
    for position, layer in enumerate(layers):
        add_layer(layer, position)
    if last:
        w = head_work(m, s)
        total.add(_scaled(time_work(hw, w, places, eager, s.fp8_recipe, _multi_stream(s)), scn.stack))
        model_flops_fwd += w.model_flops_fwd
        for layer in m.mtp_layers:
            w = mtp_work(m, layer, s, imbalance(layer))
            total.add(_scaled(time_work(hw, w, places, eager, s.fp8_recipe, _multi_stream(s)), scn.stack))
            model_flops_fwd += w.model_flops_fwd
    # the stack's host time per micro-batch through this chunk, each pass (schedule step, forward_step, loss, p2p
    # calls): paid on every pipeline rank, so pipeline parallelism does not divide it
    total.fwd += scn.stack.microbatch_host_s
    total.bwd_in += scn.stack.microbatch_host_s
    bwd_comm = {k: total.bwd_comm[k] + replay[k] for k in COMM_KINDS}
    keep = {k for k in COMM_KINDS if k != "etp" or s.etp > 1}
    p2p = 0.0 if last else s.t_sp * m.hidden_size * max(1, m.hc_mult) * ACT_BYTES
    return ChunkCost(
        fwd_compute_s=total.fwd,
        bwd_input_s=total.bwd_in,
        bwd_weight_s=total.bwd_w,
        recompute_s=recompute_s,
        fwd_comm_s={k: v for k, v in total.fwd_comm.items() if k in keep},
        bwd_comm_s={k: v for k, v in bwd_comm.items() if k in keep},
        model_flops=3.0 * model_flops_fwd,
        p2p_bytes=p2p,
        moe_share=min(1.0, moe_fwd / total.fwd) if total.fwd > 0 else 0.0,
        f_dispatch_share=_share(total.ep_parts, ("fwd", False), ("fwd", True)),
        b_combine_share=_share(total.ep_parts, ("bwd", False), ("bwd", True)),
    )


def _share(parts: dict[tuple[str, bool], float], one: tuple[str, bool], other: tuple[str, bool]) -> float:
    a, b = parts.get(one, 0.0), parts.get(other, 0.0)
    return a / (a + b) if a + b > 0 else 0.5


# ---------------------------------------------------------------------------------------------------------------
# Between stages, data parallel, optimizer


def p2p_time_s(scn: Scenario, nbytes: float) -> float:
    """One activation (or gradient) send between adjacent pipeline stages: TP x CP x DP ranks apart in
    Megatron's order, so inside the scale-up domain only when that stride fits in it."""
    if scn.layout.pp <= 1 or nbytes <= 0:
        return 0.0
    stride = scn.layout.tp * scn.layout.cp * scn.dp
    same = placement_from_stride(scn.hardware, 2, stride).intra
    return send_recv_s(scn.hardware, nbytes, same)


def _bucketed(hw: HardwareProfile, op: str, params: float, bytes_per_param: float, g: GroupPlacement) -> float:
    if params <= 0 or g.size <= 1:
        return 0.0
    bucket = max(BUCKET_MIN_PARAMS, BUCKET_PARAMS_PER_DP_RANK * g.size)
    n = max(1, -(-int(params) // int(bucket)))
    return n * collective_s(hw, op, params * bytes_per_param / n, g)  # type: ignore[arg-type]


GatherMode = Literal["step", "forward", "forward_backward"]


def param_gather_mode(scn: Scenario) -> GatherMode:
    """When a GPU all-gathers its stage's parameters. "step": once per step (the distributed optimizer after its
    update; FSDP that keeps them gathered across micro-batches). "forward": before each micro-batch's forward,
    kept through its backward, resharded after it. "forward_backward": before each forward and again before each
    backward (ZeRO-3).

    FSDP follows the stack's `fsdp_reshard_after_forward` (None: torchtitan's default policy, True unless pipeline
    parallel). Resharding after the forward gathers again for the backward (FSDP2 fully_shard docs). Without it, under
    pipeline parallelism torch.distributed.pipelining keeps the parameters gathered until the last micro-batch's
    backward (stage.py: set_reshard_after_backward(last_backward)): once per step, the Llama 3 / torchtitan setting;
    without pipeline parallelism FSDP2 reshards after every backward (reshard_after_backward defaults to True), so
    each micro-batch's forward gathers them again."""
    t = scn.train
    if not t.fsdp:
        return "step"
    pp = scn.layout.pp > 1
    reshard = scn.stack.fsdp_reshard_after_forward
    if reshard is None:
        reshard = not pp
    if reshard:
        return "forward_backward"
    return "step" if pp else "forward"


def _param_gather_once_s(scn: Scenario, stage: int) -> float:
    """One all-gather of this stage's BF16 parameters (dense over dp x cp, experts over expert_dp), in buckets."""
    t = scn.train
    if not (t.distributed_optimizer or t.fsdp):
        return 0.0
    hw, p = scn.hardware, stage_params(scn, stage)
    gather = _bucketed(hw, "all_gather", p.dense, PARAM_GATHER_BYTES, group_placement(scn, "dp_cp"))
    return gather + _bucketed(hw, "all_gather", p.expert, PARAM_GATHER_BYTES, group_placement(scn, "expert_dp"))


def dp_grad_sync_s(scn: Scenario, stage: int) -> tuple[float, float]:
    """(grad_sync_s, param_gather_s) per optimizer step for one GPU of pipeline stage `stage`: dense
    gradients reduced over dp x cp, expert gradients over expert_dp, in FP32 buckets; reduce-scatter with the
    distributed optimizer or FSDP, else all-reduce. Param gather: the time of every all-gather of the stage's BF16
    parameters in a step, `param_gather_mode` times the fixed micro-batches (one per step for the distributed
    optimizer; FSDP per `param_gather_mode`). What of it is exposed: `param_gather_exposed_s`."""
    hw, t = scn.hardware, scn.train
    p = stage_params(scn, stage)
    dense_g, expert_g = group_placement(scn, "dp_cp"), group_placement(scn, "expert_dp")
    sharded = t.distributed_optimizer or t.fsdp
    op = "reduce_scatter" if sharded else "all_reduce"
    grad = _bucketed(hw, op, p.dense, GRAD_BYTES, dense_g) + _bucketed(hw, op, p.expert, GRAD_BYTES, expert_g)
    passes = {"step": 1, "forward": scn.num_microbatches, "forward_backward": 2 * scn.num_microbatches}
    return grad, _param_gather_once_s(scn, stage) * passes[param_gather_mode(scn)]


def fsdp_units(scn: Scenario) -> int:
    """FSDP units on one GPU: one per decoder layer of its pipeline stage (the mean over stages), plus the root
    (embedding, final norm and head): torchtitan's apply_fsdp calls fully_shard on every transformer block and
    then on the whole model (torchtitan/models/llama3/infra/parallelize.py)."""
    return 1 + max(1, round(len(scn.model.layers) / max(1, scn.layout.pp)))


def param_gather_exposed_s(scn: Scenario, stage: int, fwd_s: list[float], bwd_s: list[float]) -> float:
    """Exposed time of a step's parameter all-gathers on a GPU of pipeline stage `stage`, given the compute time of
    each micro-batch's forward (`fwd_s`) and backward (`bwd_s`) on it. Once per step: it runs under the first
    forward (Megatron --overlap-param-gather; FSDP's first gather of the step likewise), only its excess shows.
    Per pass (FSDP): the gathers are issued layer by layer on their own stream, so the next unit's all-gather runs
    under the current unit's compute; only the pass's first unit has nothing to hide under (PyTorch FSDP notes,
    "FSDP Prefetch Nuances": "The 1st all-gather will not be able to overlap with anything",
    https://docs.pytorch.org/docs/stable/notes/fsdp.html; FSDP2 prefetches the next backward all-gather by default).
    Each pass exposes max(one unit's gather, the gather beyond the pass's compute)."""
    once = _param_gather_once_s(scn, stage)
    if once <= 0 or not fwd_s:
        return 0.0
    mode = param_gather_mode(scn)
    if mode == "step":
        return max(0.0, once - fwd_s[0])
    first = once / fsdp_units(scn)
    passes = list(fwd_s) + (list(bwd_s) if mode == "forward_backward" else [])
    return sum(max(first, once - c) for c in passes)


def optimizer_params_per_gpu(scn: Scenario, stage: int) -> float:
    """Parameters whose Adam step this GPU runs (its shard under the distributed optimizer or FSDP)."""
    p = stage_params(scn, stage)
    if scn.train.distributed_optimizer or scn.train.fsdp:
        return p.dense / (scn.dp * scn.layout.cp) + p.expert / scn.expert_dp
    return p.dense + p.expert


def optimizer_step_s(scn: Scenario, stage: int) -> float:
    """Adam over the local shard: HBM-bound at optimizer_hbm_efficiency; the offloaded fraction runs on the
    host at the measured CPU rate (shared by the node's GPUs), overlapped with its host-link copies; plus the
    stack's host time per step (`optimizer_host_s`)."""
    hw = scn.hardware
    fixed = scn.stack.optimizer_host_s
    n = optimizer_params_per_gpu(scn, stage)
    f = scn.train.optimizer_offload_fraction
    gpu = (1 - f) * n * ADAM_BYTES_PER_PARAM / hbm_rate(hw, hw.optimizer_hbm_efficiency)
    if f <= 0:
        return gpu + fixed
    host_rate = HOST_ADAM_PARAMS_PER_S_PER_NODE / max(1, hw.gpus_per_node)
    host = f * n / host_rate
    copies = host_copy_s(hw, f * n * OFFLOAD_COPY_BYTES_PER_PARAM)
    return gpu + max(host, copies) + fixed

