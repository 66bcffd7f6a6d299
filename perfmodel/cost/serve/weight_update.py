"""Weight update from the Megatron trainer to the SGLang engines: `weight_update_time(scn) -> WeightUpdateResult`.

The Miles sequence (docs/reference/dsv4-flash-and-miles.md section 2.6) and how each part is costed:

1. colocated only - **trainer sleep**: torch_memory_saver backs the trainer's BF16 parameters and any GPU-resident
   optimizer state up to host memory over the host link (gradients are dropped, not copied), plus a fixed cost;
   **engine wake (weights)**: SGLang re-maps its weight memory before the update (fixed cost).
2. **pause + flush**: `pause_generation` + `flush_cache` on every engine (fixed cost).
3. **gather**: every HF tensor is assembled from its TP / EP / PP shards (all-gathers within the training groups). In
   the colocated CUDA-IPC path every GPU's SGLang rank needs every tensor, so each GPU receives the whole BF16 model:
   the other stages' local slices by PP broadcast, then the TP / EP gathers of every tensor, in the exporters' order
   (`_gather_everything_s`); in the broadcast / disk paths only each pipeline stage's leader gathers its stage.
4. **quantize** (FP8 rollout only): BF16 -> FP8 with one FP32 scale per 128x128 block, HBM-bound (read 2 B, write
   1 B + scales per parameter) - on every GPU when colocated, on the stage leaders otherwise.
5. **transfer**, by mechanism (`rl.weight_update.mode`):
   - ipc (colocated CUDA IPC): bucketed (`bucket_mb` of BF16 tensors per bucket; quantized after bucketing, so an
     FP8 bucket is about half that), `buckets x per-bucket fixed cost + BF16 bytes / pipeline rate` (both derived
     from the GB300 measurements below) plus a clone of each flattened bucket into SGLang-owned memory (HBM memcpy);
   - broadcast (NCCL/RCCL): the whole (quantized) model from the stage leaders to every rollout GPU over the
     scale-out NIC (or the scale-up fabric when trainer and engines share one domain), stage after stage; none of
     the IPC path's bucket costs (checked on Miles' and NeMo-RL's H100 figures, studies/validation/weight-update);
   - reshard (NeMo-RL `nccl_reshard`): every training rank sends its own shard, once per engine, to the engine
     ranks holding that slice; the busier of a receiver and a sender sets the link; a fixed cost and a per-tensor
     cost from NeMo-RL's own H100 table (`RESHARD_RUNS`), more per tensor FP8 end to end (`RESHARD_FP8_TENSOR_S`,
     cost/serve/refit_anchors.py); no gather;
   - p2p (RDMA writes: Miles P2P, NIXL): each engine rank's own shard from one source rank; every source converts
     every HF tensor (`P2P_TENSOR_S`, below), the writes of one buffer hidden under the loading of the next;
   - disk: write the checkpoint, every engine reads it (documented disk bandwidths, no buckets).
6. **post-process**: SGLang `post_process_weights` (quant post-processing on the full model): one HBM pass over
   the rollout weights of each GPU plus a fixed cost; then **resume** (`continue_generation`, and when colocated
   the KV-cache / CUDA-graph memory wake-up; fixed cost).

After the rollout, colocated runs release the engine memory and onload the trainer (host link back): reported as
`after_rollout_s`, not in `total_s`.

Bucket calibration (GB300, bobboli/miles experiments/aga_dsv4_flash/EXPERIMENT_LOG_2026-08-10.md, summarised in
docs/reference/dsv4-flash-and-miles.md section 3.2): colocated CUDA-IPC update of DSV4-Flash (BF16 trainer, FP8
rollout, 32 GB300 in one NVL72 domain, 8 TP4 engines).

* 256 MiB buckets, 2,130 buckets: steady updates 63.3, 65.4, 66.3, 68.0 s and "updates 2-4 each about 65 s"
  (first updates 72.4-76.5 s include warm-up and are left out) -> T256 = 65.0 s.
* 64 MiB buckets, 8,537 buckets: 150.6, 149.8, 151.8 s (first 160 s left out) -> T64 = 150.7 s.
* Model: T = n x c + B / R. Two equations: c = (T64 - T256) / (8537 - 2130) = 13.4 ms per bucket (software and
  collective launch cost of one bucket); B / R = T256 - 2130 c = 36.5 s for B = 2130 x 256 MiB = 571.7 GB of BF16
  tensors -> R = 15.7 GB/s per GPU. T64 / T256 = 2.32: 4x the buckets cost 2.3x the time.
* R is 57x below the GB300 NVLink (900 GB/s) and ~400x below HBM, so on GB300 the "bandwidth part" is software bound
  (per-tensor iteration, name mapping, SGLang weight loaders), not link bound. Therefore the default keeps R fixed
  across hardware and adds the physical link time of the target (gather, broadcast, IPC copy) on top; on GB300
  that link time is about 1 s, left inside the fit (the model over-predicts the GB300 loop by about 2%).
  `WeightUpdateParams.scale_pipeline_by_link=True` instead scales R by (target link / GB300 NVLink), as a literal
  "bandwidth part scales with the link" reading; that makes a 50 GB/s-NIC cluster 18x slower than its NIC allows.
* 1 GiB buckets: the model gives n x c + B / R (faster than 256 MiB only by the saved bucket costs, ~21 s for
  DSV4-Flash), but the measured 1 GiB runs stalled (41/533 buckets) - flagged in `risks`.

Per framework (stack knobs): the gather's bytes per parameter (`weight_update_gather_bytes`: Megatron's BF16
parameters, or verl's FP32 FSDP state dict), a sender's software assembly of full tensors and the engines' apply
of them over the network mechanisms (`weight_update_assemble_bytes_per_s`, `weight_update_apply_bytes_per_s`:
verl's nccl checkpoint engine as its PR #6974 profile measured it) and whether buckets are pipelined
(`weight_update_pipelined`: NeMo-RL packs bucket k+1 while the engine loads bucket k, so the per-bucket cost hides
under the pipeline part; Miles runs them one after another). The per-bucket cost and pipeline rate are Miles' GB300
measurements for every framework: no other framework's bucket timings are published here (an assumption the note on
issue 13 states).

Not modelled: the LoRA adapter path,
delta updates, NCCL group setup on the first update (cold updates are
~10% slower than steady ones).

Shared pieces: collectives from `perfmodel.cost.comm` (Megatron group placement), the trainer's GPU bytes from
`perfmodel.cost.memory.training.training_memory` (worst pipeline rank) and the rollout weights per GPU from
`rollout_memory`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from perfmodel.cost.comm import GroupPlacement, all_gather_s, broadcast_s, group_placement, host_copy_s, send_recv_s
from perfmodel.cost.compute import hbm_rate
from perfmodel.cost.dtypes import FP8_BLOCK_WEIGHT_BYTES
from perfmodel.cost.memory.rollout import memoized_rollout_memory
from perfmodel.cost.memory.training import memoized_training_memory
from perfmodel.cost.serve.refit_anchors import (
    GB300_REFERENCE_LINK_BYTES_PER_S,
    MIB,
    MODEL_END_TENSORS,
    RESHARD_FIXED_S,
    RESHARD_FP8_TENSOR_S,
    RESHARD_TENSOR_S,
    bucket_fit,
    hf_tensors,
    layer_tensors,
)
from perfmodel.errors import InputError
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.keys import Reads, scenario_key
from perfmodel.inputs.model import ModelSpec
from perfmodel.inputs.scenario import Scenario
from perfmodel.memo import Memo

PER_BUCKET_S, PIPELINE_BYTES_PER_S = bucket_fit()

# ---------------------------------------------------------------------------------------------------------------
# Fixed costs (assumptions, calibratable through WeightUpdateParams)

PAUSE_FLUSH_S = 0.2
"""Assumption: `pause_generation` + `flush_cache` are two HTTP calls issued to all engines at once; the scheduler
stops after its current iteration and frees the radix tree (~0.1 s each)."""
POST_PROCESS_FIXED_S = 0.5
"""Assumption: SGLang `post_process_weights` / `end_weight_update` Python work over ~2,000 modules, on top of its
HBM pass (one read + write of the rollout weights)."""
RESUME_S = 0.1
"""Assumption: `continue_generation` HTTP call to all engines."""
TRAINER_SLEEP_FIXED_S = 0.5
"""Assumption: torch_memory_saver pause - unmapping the trainer's CUDA virtual-memory allocations (hundreds of GiB,
2 MiB granules) and the Ray round trip, on top of copying the backed-up tensors to host."""
ENGINE_WAKE_S = 1.0
"""Assumption: SGLang `resume_memory_occupation` (weights before the update, KV cache + CUDA-graph buffers after):
cuMemCreate + cuMemMap of ~100-200 GiB per GPU and re-zeroing the KV metadata."""
ENGINE_SLEEP_S = 0.5
"""Assumption: SGLang `release_memory_occupation` after the rollout (unmap, no copy: weights are re-sent)."""
DISK_WRITE_BYTES_PER_S = 5.0e9
"""Assumption: aggregate write bandwidth of the shared checkpoint filesystem seen by the trainer's stage leaders
(a mid-size Lustre / NFS-over-RDMA deployment); calibrate per site."""
DISK_READ_BYTES_PER_S = 20.0e9
"""Assumption: aggregate read bandwidth of the same filesystem seen by all engines together."""


# ---------------------------------------------------------------------------------------------------------------
# P2P (RDMA writes to each engine rank, Miles `--update-weight-transfer-mode p2p`): the sources' host work per tensor

P2P_RUNS: tuple[tuple[str, int, float, str], ...] = (
    ("Kimi-K2 1T-A32B", hf_tensors(61, 1, 385), 7.2273 - 0.884,
     "RDMA 7,227.3 ms less the ~884 ms post_load_weights requantization the doc says it includes; train TP8 PP8 "
     "CP4 EP32, inference TP32 EP32, 32 + 32 H100 nodes; config: 61 layers, first_k_dense_replace 1, 384 routed + "
     "1 shared expert (moonshotai/Kimi-K2-Instruct config.json)"),
    ("GLM-4.5-Air 106B-A12B", hf_tensors(46, 1, 129), 2.6372,
     "RDMA 2,637.2 ms; train TP1 PP4 EP8, inference TP8 EP8, 4 + 4 H100 nodes; config: 46 layers, "
     "first_k_dense_replace 1, 128 routed + 1 shared expert (zai-org/GLM-4.5-Air config.json)"),
)
"""Miles P2P weight transfer on H100 (radixark/miles docs/advanced/p2p-weight-transfer.md, 'Profiling Results',
1 GB buckets, steady steps 3-12; the timer starts once pause_generation returns and stops when update_weight
returns). Every source rank converts every HF tensor of the model (Megatron -> HF names, then the target rank's
`weight_loader` re-shards it into a pinned transfer buffer) while the previous buffer's RDMA writes are in flight.
A target rank's bytes (its shard: tens of GB) take under a second on its NIC, so these runs time the conversion:
seconds per HF tensor = (time - the post-process and resume calls in the timer) / tensors. Only the two runs of
models the project does not ship inform it (Kimi-K2 91 us, GLM-4.5-Air 115 us); the runs of catalogue models
(Qwen3-30B-A3B, Qwen3-235B-A22B) are validation cases (studies/validation/weight-update), not inputs. Left out:
GLM-4.7-9B-Flash (trainer and engine on one node share its NICs and cores: 4.2 s, slower than the 30B-A3B on two)
and GLM-5 (its config is not at hand here)."""


def _p2p_tensor_s(runs: tuple[tuple[str, int, float, str], ...] = P2P_RUNS) -> float:
    timer_fixed_s = POST_PROCESS_FIXED_S + RESUME_S
    return sum((t - timer_fixed_s) / n for _, n, t, _ in runs) / len(runs)


P2P_TENSOR_S = _p2p_tensor_s()



@dataclass(frozen=True, slots=True)
class WeightUpdateParams:
    per_bucket_s: float = PER_BUCKET_S
    pipeline_bytes_per_s: float = PIPELINE_BYTES_PER_S
    scale_pipeline_by_link: bool = False
    pause_flush_s: float = PAUSE_FLUSH_S
    post_process_fixed_s: float = POST_PROCESS_FIXED_S
    resume_s: float = RESUME_S
    trainer_sleep_fixed_s: float = TRAINER_SLEEP_FIXED_S
    engine_wake_s: float = ENGINE_WAKE_S
    engine_sleep_s: float = ENGINE_SLEEP_S
    disk_write_bytes_per_s: float = DISK_WRITE_BYTES_PER_S
    disk_read_bytes_per_s: float = DISK_READ_BYTES_PER_S
    p2p_tensor_s: float = P2P_TENSOR_S


@dataclass(frozen=True, slots=True)
class WeightUpdateResult:
    mode: str  # broadcast | p2p | reshard | ipc | disk
    placement: str
    total_s: float  # what Miles times as the update (colocated: trainer sleep + update + engine wake)
    parts: dict[str, float]  # seconds by part, in order; sums to total_s
    after_rollout_s: float  # colocated: engine release + trainer onload before training (0 otherwise)
    after_rollout_parts: dict[str, float]
    bucket_bytes: float
    num_buckets: int
    bf16_bytes: float  # HF tensors as bucketed
    transferred_bytes: float  # what crosses to the engines (FP8-quantized when the rollout is FP8)
    trainer_offload_bytes_per_gpu: float
    per_bucket_s: float
    pipeline_bytes_per_s: float
    risks: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict:
        return {
            "mode": self.mode, "placement": self.placement, "total_s": self.total_s, "parts": dict(self.parts),
            "after_rollout_s": self.after_rollout_s, "num_buckets": self.num_buckets,
            "bucket_bytes": self.bucket_bytes, "bf16_bytes": self.bf16_bytes,
            "transferred_bytes": self.transferred_bytes, "risks": list(self.risks), "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------------------------
# Helpers


@dataclass(frozen=True, slots=True)
class _Params:
    tensors: int  # HF tensors sent per update (what a per-tensor loader cost multiplies)
    total: float
    quantizable: float  # linear weights the FP8 rollout stores in FP8
    stage_dense: tuple[float, ...]  # non-expert parameters per pipeline rank
    stage_expert: tuple[float, ...]  # routed-expert parameters per pipeline rank


def _params(scn: Scenario) -> _Params:
    m: ModelSpec = scn.model
    pp = scn.layout.pp
    dense = [0.0] * pp
    expert = [0.0] * pp
    quant = 0.0
    tensors = MODEL_END_TENSORS
    i = 0
    for v, n in enumerate(scn.stage_layers):  # virtual stage v runs on pipeline rank v % pp, in model order
        for layer in m.layers[i:i + n]:
            f = layer.ffn
            q = layer.attention.params()
            e = f.num_experts * f.mlp_params(f.expert_intermediate_size) if f.kind == "moe" else 0.0
            q += e + (f.num_shared_experts * f.mlp_params(f.shared_intermediate_size) if f.kind == "moe"
                      else f.params_total())
            quant += q
            tensors += layer_tensors(f.num_experts + f.num_shared_experts if f.kind == "moe" else 0)
            expert[v % pp] += e
            dense[v % pp] += layer.params_total() - e
        i += n
    dense[0] += m.embedding_params()
    dense[-1] += m.lm_head_params() + m.final_params
    return _Params(tensors, float(m.total_params()), quant, tuple(dense), tuple(expert))


def _broadcast_busbw(hw: HardwareProfile, g: GroupPlacement, root_ranks_in_domain: int | None = None) -> float:
    """The bandwidth term of `perfmodel.cost.comm.broadcast_s` over `g` (bytes/s, latency removed)."""
    a, b = 1e12, 2e12
    return (b - a) / (broadcast_s(hw, b, g, root_ranks_in_domain) - broadcast_s(hw, a, g, root_ranks_in_domain))


def _span_placement(hw: HardwareProfile, size: int, span_gpus: int) -> GroupPlacement:
    """`size` ranks spread evenly over `span_gpus` consecutive GPUs: one scale-up domain when the span fits in
    one, else as many domains as the span covers (a broadcast then runs at the NIC)."""
    dom = max(1, hw.scale_up_domain_gpus)
    domains = max(1, -(-span_gpus // dom))
    if domains == 1 or size == 1:
        return GroupPlacement(size, size)
    return GroupPlacement(size, max(1, min(size - 1, -(-size // domains))))


# ---------------------------------------------------------------------------------------------------------------


def _link_s(scn: Scenario, wp: WeightUpdateParams, xfer: float, pp_g: GroupPlacement,
            memo: Memo) -> tuple[float, float]:
    """(time on the link, the link's bandwidth) of moving `xfer` bytes to the engines by the plan's mode."""
    rl, hw, lay = scn.run.rl, scn.hardware, scn.layout
    colocated = rl.placement == "colocated"
    if rl.weight_update.mode == "ipc":
        link = 2.0 * xfer / hbm_rate(hw)  # clone of every flattened bucket into SGLang-owned memory (read + write)
        return link, (_broadcast_busbw(hw, pp_g) if lay.pp > 1 else hbm_rate(hw))
    if rl.weight_update.mode == "broadcast":
        span = rl.actor_gpus + rl.rollout_gpus if not colocated else rl.rollout_gpus
        if scn.stack.weight_update_broadcast_group == "trainer":
            # NeMo-RL v0.4+: every training rank and every rollout GPU in one group, rank 0 the root (grpo.py
            # world_size = train + inference; packed_broadcast_producer(src=0) on every training worker)
            g = _span_placement(hw, span, span)
            return broadcast_s(hw, xfer, g), _broadcast_busbw(hw, g)
        g = _span_placement(hw, rl.rollout_gpus + 1, span)  # a stage leader + every rollout GPU
        # every rollout GPU receives the whole model, one stage after another: Miles serializes the stages'
        # broadcasts with a Ray lock (docs/rl-phases.md, section 2), verl and NeMo-RL v0.3 broadcast from
        # training rank 0; disaggregated, the sender's node-mates are not in the group: its own NIC carries it
        root = None if colocated else 1
        return broadcast_s(hw, xfer, g, root), _broadcast_busbw(hw, g, root)
    if rl.weight_update.mode == "reshard":  # each engine GPU its slice; each training GPU its shard, once per engine
        engine = rl.rollout.engine_gpus
        recv, send = xfer / engine, xfer * (rl.rollout_gpus // engine) / rl.actor_gpus
        return send_recv_s(hw, max(recv, send), same_domain=False), hw.nic_bytes_per_s
    if rl.weight_update.mode == "p2p":
        # each engine rank receives only its own shard (as it holds it), from one source rank; a source serves
        # ceil(rollout GPUs / training GPUs) of them (Miles rollout_engine_rank_assignment.py)
        shard = memoized_rollout_memory(scn, memo).weights_bytes
        fan_out = -(-rl.rollout_gpus // rl.actor_gpus)
        return send_recv_s(hw, fan_out * shard, same_domain=False), hw.nic_bytes_per_s
    # disk: the stage leaders write the checkpoint, every engine reads all of it
    engines = rl.rollout_gpus // rl.rollout.engine_gpus
    link = xfer / wp.disk_write_bytes_per_s + engines * xfer / wp.disk_read_bytes_per_s
    return link, hw.nic_bytes_per_s * hw.collective_bus_efficiency_scale_out


def _risks(bucket_mb: float, every_gpu_gets_all: bool) -> list[str]:
    """What measured runs say can go wrong with these buckets (GB300 Miles DSV4-Flash bring-up)."""
    risks: list[str] = []
    if bucket_mb >= 1024:
        risks.append(f"{bucket_mb:.0f} MiB buckets: the GB300 colocated DSV4-Flash runs with 1 GiB buckets stalled "
                     "(41/533 buckets) and were cancelled; the time shown assumes it completes")
    if every_gpu_gets_all and bucket_mb > 64:
        risks.append("colocated IPC needs free memory for a BF16 bucket and its flattened copy on every GPU; GB300 "
                     "BF16 runs OOMed at the 130 MiB flattened FP8 bucket of a 256 MiB update with SGLang at "
                     "mem_fraction_static 0.6-0.7")
    if bucket_mb < 64:
        risks.append("buckets under 64 MiB: the per-bucket cost dominates (64 MiB already costs 2.3x the 256 MiB "
                     "time on GB300)")
    return risks


def _gather_everything_s(scn: Scenario, p: _Params, gather_bytes: float, tp_g: GroupPlacement,
                         ep_g: GroupPlacement, pp_g: GroupPlacement) -> float:
    """Every GPU assembles every full tensor (colocated CUDA IPC: each GPU's engine rank reads its slice of each).
    The exporters move the shards across pipeline stages first and gather within the stage after: Megatron-Bridge's
    `megatron_to_hf` (broadcast_from_pp_rank, then gather_from_tp_ranks, then gather_from_ep_ranks; NeMo-RL v0.4+),
    Miles' direct iterator (`_get_megatron_full_params`: PP broadcast, EP broadcast, then TP all-gather), NeMo-RL
    v0.3.0's `gather_params` (TP all-gather, PP broadcast, EP all-gather). So the PP broadcast carries each
    stage's local slices (its dense tensors over TP, its experts over EP and expert-TP), and the TP / EP gathers
    then run over every stage's tensors on every GPU. (Broadcasting full experts across stages instead would put
    the whole model through one NIC per GPU: 26 s for DeepSeek-V3 at PP8 on 400 Gb/s, where NeMo-RL v0.3 measured
    12.2 s for its whole gather.)"""
    hw, lay = scn.hardware, scn.layout
    dense, expert = sum(p.stage_dense), sum(p.stage_expert)
    etp_g = group_placement(scn, "etp")
    local = dense / lay.tp + expert / (lay.ep * lay.etp)
    return (broadcast_s(hw, gather_bytes * local * (1.0 - 1.0 / lay.pp), pp_g)
            + all_gather_s(hw, gather_bytes * dense, tp_g)
            + all_gather_s(hw, gather_bytes * expert / lay.etp, ep_g)
            + all_gather_s(hw, gather_bytes * expert, etp_g))


FIXED_CALLS_S = PAUSE_FLUSH_S + POST_PROCESS_FIXED_S + RESUME_S


def weight_update_params_for(scn: Scenario) -> WeightUpdateParams:
    """The fixed costs a scenario's stack states: its fixed calls (`weight_update_fixed_s`, split over pause + flush,
    post-process and resume in the ratio of the assumptions above; a reshard's published timer holds one fixed cost,
    RESHARD_FIXED_S, for all of them), and no sleep / wake without a memory saver."""
    st = scn.stack
    f = st.weight_update_fixed_s / FIXED_CALLS_S
    wp = WeightUpdateParams(pause_flush_s=PAUSE_FLUSH_S * f, post_process_fixed_s=POST_PROCESS_FIXED_S * f,
                            resume_s=RESUME_S * f)
    if scn.run.rl is not None and scn.run.rl.weight_update.mode == "reshard":
        wp = dataclasses.replace(wp, pause_flush_s=RESHARD_FIXED_S, post_process_fixed_s=0.0, resume_s=0.0)
    if not st.memory_saver:
        wp = dataclasses.replace(wp, trainer_sleep_fixed_s=0.0, engine_wake_s=0.0, engine_sleep_s=0.0)
    return wp


def _transfer(scn: Scenario, wp: WeightUpdateParams, p: _Params, parts: dict[str, float], xfer: float,
              n_buckets: int, pp_g: GroupPlacement, memo: Memo) -> float:
    """The transfer's parts, added to `parts` (which holds the gather and quantize already); returns the software
    pipeline rate used. CUDA IPC and disk: per-bucket fixed cost + the GB300 software pipeline + the link.
    Broadcast: the link (the GB300 IPC path's per-bucket and pipeline costs are those of flattening buckets, IPC
    handles and the engines' tensor loads: not a broadcast's). P2P: every HF tensor converted on the sources, the
    RDMA writes of one buffer overlapping the loading (gather, quantize, convert) of the next."""
    mode = scn.run.rl.weight_update.mode
    link, link_bw = _link_s(scn, wp, xfer, pp_g, memo)
    pipe_rate = wp.pipeline_bytes_per_s
    if wp.scale_pipeline_by_link:
        pipe_rate *= link_bw / GB300_REFERENCE_LINK_BYTES_PER_S
    network = mode in ("broadcast", "p2p", "reshard")
    parts["pipeline_s"] = 0.0 if network else 2.0 * p.total / pipe_rate  # the BF16 tensors as bucketed
    bucket_fixed = 0.0 if network else n_buckets * wp.per_bucket_s
    # pipelined buckets (NeMo-RL's refit stream): a bucket's fixed cost hides under the next one's packing
    parts["bucket_fixed_s"] = (max(0.0, bucket_fixed - parts["pipeline_s"]) if scn.stack.weight_update_pipelined
                               else bucket_fixed)
    per_tensor = {"p2p": wp.p2p_tensor_s, "reshard": RESHARD_TENSOR_S}.get(mode, 0.0)
    if mode == "reshard" and scn.run.rl.rollout.precision == "fp8":  # FP8 end to end: NeMo-RL's slower FP8 path
        per_tensor += RESHARD_FP8_TENSOR_S
    parts["convert_s"] = p.tensors * per_tensor
    parts["tensors_s"] = p.tensors * scn.stack.weight_update_tensor_s
    loading = parts["gather_s"] + parts["quantize_s"] + parts["convert_s"]
    # p2p, and a pipelined stack's broadcast (NeMo-RL PR #1379: the exporter fills one buffer while the other is
    # broadcast), pay only what the loading does not hide
    hidden = mode == "p2p" or (mode == "broadcast" and scn.stack.weight_update_pipelined)
    parts["link_s"] = max(0.0, link - loading) if hidden else link
    # a stack's own software stages around the link (verl's checkpoint engines, which funnel full tensors through
    # one rank: verl RFC #7262): the sender assembles and packs every full tensor, the engines load what arrived;
    # one after the other per bucket, as its profile shows. A reshard sends shards as they are: neither stage.
    st, full_tensors = scn.stack, mode in ("broadcast", "p2p")
    for part, rate in (("assemble_s", st.weight_update_assemble_bytes_per_s),
                       ("apply_s", st.weight_update_apply_bytes_per_s)):
        parts[part] = 2.0 * p.total / rate if full_tensors and rate > 0 else 0.0
    return pipe_rate


def _notes(mode: str, wp: WeightUpdateParams) -> list[str]:
    if mode == "p2p":
        return [f"{wp.p2p_tensor_s * 1e6:.0f} us per HF tensor converted, from Miles' H100 P2P runs"]
    if mode == "broadcast":
        return ["the whole model over one sender's link, stage after stage"]
    if mode == "reshard":
        return [f"shard to shard: {RESHARD_TENSOR_S * 1e6:.0f} us per HF tensor and {RESHARD_FIXED_S:.2f} s fixed, "
                "from NeMo-RL's H100 nccl_reshard table"]
    return [f"per-bucket {wp.per_bucket_s * 1e3:.1f} ms and pipeline {wp.pipeline_bytes_per_s / 1e9:.1f} GB/s "
            "from the GB300 256 / 64 MiB measurements"
            + (" (pipeline scaled by the link)" if wp.scale_pipeline_by_link else "")]


# The update's costly inputs, each memoized by what it reads (perfmodel/inputs/keys.py): the model's parameters by
# pipeline stage, the trainer's and the engines' memory. A sweep prices them per layout and engine, not per plan.
STAGE_PARAMS_READS = Reads("wu_stage_params_key", run=("train.layout", "train.pipeline_layers", "train.schedule"))


def weight_update_time(scn: Scenario, params: WeightUpdateParams | None = None,
                       memo: Memo | None = None) -> WeightUpdateResult:
    """Time of one trainer -> engines weight update, by part (see the module docstring). `memo` (the caller's)
    reuses the parameter counts and the engines' weights across plans."""
    memo = memo if memo is not None else Memo()
    wp = params or weight_update_params_for(scn)
    rl = scn.run.rl
    if rl is None:
        raise InputError("", "rl", "weight_update_time needs an rl: section (kind: rl)")
    hw = scn.hardware
    lay = scn.layout
    mode, placement = rl.weight_update.mode, rl.placement
    colocated = placement == "colocated"
    fp8 = rl.rollout.precision == "fp8"
    p = memo.get("wu_stage_params", scenario_key(scn, STAGE_PARAMS_READS, memo), lambda: _params(scn))
    bucket = rl.weight_update.bucket_mb * MIB
    bf16 = 2.0 * p.total
    wq = FP8_BLOCK_WEIGHT_BYTES  # 128 x 128 blocks, one FP32 scale each (Miles quantizer_fp8.py)
    xfer = (p.quantizable * wq + (p.total - p.quantizable) * 2.0) if fp8 else bf16
    stage_bytes = [2.0 * (d + e) for d, e in zip(p.stage_dense, p.stage_expert)]
    # Miles buckets the HF tensors of one pipeline stage at a time
    n_buckets = 0 if mode == "disk" else sum(math.ceil(b / bucket) for b in stage_bytes if b > 0)
    every_gpu_gets_all = colocated and mode == "ipc"
    # every training rank runs the exporter over the whole model: colocated IPC, and NeMo-RL's trainer-wide broadcast
    exports_all = every_gpu_gets_all or (mode == "broadcast" and scn.stack.weight_update_broadcast_group == "trainer")

    parts: dict[str, float] = {}
    after: dict[str, float] = {}
    offload_bytes = 0.0
    if colocated and scn.stack.memory_saver:
        offload_bytes = memoized_training_memory(scn, memo).parked_bytes  # worst pipeline rank
        parts["trainer_sleep_s"] = wp.trainer_sleep_fixed_s + host_copy_s(hw, offload_bytes)
        parts["engine_wake_weights_s"] = wp.engine_wake_s / 2
        after["engine_sleep_s"] = wp.engine_sleep_s
        after["trainer_onload_s"] = host_copy_s(hw, offload_bytes)
    reshard = mode == "reshard"
    parts["pause_flush_s"] = wp.pause_flush_s

    # Gather out of the shards in the trainer's dtype (Megatron BF16; an FSDP state dict FP32).
    gb = scn.stack.weight_update_gather_bytes
    tp_g, ep_g, pp_g = (group_placement(scn, k) for k in ("tp", "ep", "pp"))
    if exports_all:
        parts["gather_s"] = _gather_everything_s(scn, p, gb, tp_g, ep_g, pp_g)
    else:  # each stage's leader gathers its stage (dense over TP, routed experts over EP): the largest sets it
        parts["gather_s"] = 0.0 if reshard else max(
            all_gather_s(hw, gb * d, tp_g) + all_gather_s(hw, gb * e, ep_g)
            for d, e in zip(p.stage_dense, p.stage_expert))  # a reshard sends shards as they are

    if fp8:  # read BF16, write FP8 + one FP32 scale per block; all of it on every GPU that exports everything
        quant_params = p.quantizable if exports_all else p.quantizable / (rl.actor_gpus if reshard else lay.pp)
        parts["quantize_s"] = quant_params * (2.0 + wq) / hbm_rate(hw)
    else:
        parts["quantize_s"] = 0.0

    pipe_rate = _transfer(scn, wp, p, parts, xfer, n_buckets, pp_g, memo)

    rollout_weights = memoized_rollout_memory(scn, memo).weights_bytes
    parts["post_process_s"] = wp.post_process_fixed_s + 2.0 * rollout_weights / hbm_rate(hw)
    parts["resume_s"] = wp.resume_s + (wp.engine_wake_s / 2 if colocated else 0.0)

    scale = scn.stack.weight_update_time_scale  # the stack's named multiplier (1.0 unless calibrated)
    parts = {k: v * scale for k, v in parts.items()}
    risks = _risks(rl.weight_update.bucket_mb, every_gpu_gets_all)
    notes = _notes(mode, wp)
    return WeightUpdateResult(
        mode=mode, placement=placement, total_s=sum(parts.values()), parts=parts, after_rollout_s=sum(after.values()),
        after_rollout_parts=after, bucket_bytes=bucket, num_buckets=n_buckets, bf16_bytes=bf16,
        transferred_bytes=xfer, trainer_offload_bytes_per_gpu=offload_bytes, per_bucket_s=wp.per_bucket_s,
        pipeline_bytes_per_s=pipe_rate, risks=tuple(risks), notes=tuple(notes),
    )
