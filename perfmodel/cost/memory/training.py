"""Per-GPU memory of a training rank.

`training_memory(scn, pipeline_rank)` sums, for one pipeline rank (the worst one when `pipeline_rank` is None):

* weights: BF16 parameters of the rank's virtual stages (+ TE's cached FP8 copies when training in FP8, the
  gathered layer's only under FSDP);
* grads: Megatron's main-grad buffer, FP32 by default (`accumulate_allreduce_grads_in_fp32`, forced on for BF16
  unless `--grad-reduce-in-bf16`), BF16 with the stack knob `grad_reduce_in_bf16` (or the argument);
* optimizer: FP32 master weights + Adam exp_avg + exp_avg_sq = 12 bytes/param, sharded by the distributed optimizer
  (dense params over dp x cp, routed experts over expert_dp); the `optimizer_offload_fraction` share lives on the
  host (`optimizer_host_bytes`, checked against host memory per GPU);
* activations of the micro-batches in flight for the schedule (Korthikanti et al. 2022, generalised per layer kind;
  linear inputs in FP8 under FP8 training), less the layers offloaded to the host (`activation_offload_layers`, in
  `activations_host_bytes` with the offloaded optimizer state against host memory);
* communication buffers (collective-library buffers per process group, the MoE all-to-all send buffer, PP p2p
  buffers, FSDP unshard buffers);
* a margin for allocator fragmentation, the GPU runtime context and library workspaces.

Bytes are SI-free counts (plain bytes); `summary()` prints GB = 1e9 bytes, as GPU memory is sold.

Megatron byte model (megatron/training/theoretical_memory_usage.py in NVIDIA/Megatron-LM, and its
docs/user-guide/features/dist_optimizer.md): 18 bytes/param without the distributed optimizer (2 BF16 weight +
4 FP32 grad + 12 FP32 master/Adam), 6 + 12/dp with it. This module reproduces that and adds what the formula
leaves out (EP-aware experts, MTP/embedding placement per stage, MoE and mHC activations, buffers, margin).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.cost.dtypes import BF16, FP32
from perfmodel.cost.memory.activations import activations_on_rank, tokens_per_microbatch
from perfmodel.cost.params import layer_params_local, layers_of_stage, params_on_rank, stages_on_rank
from perfmodel.inputs.keys import Reads, scenario_key
from perfmodel.inputs.scenario import Scenario
from perfmodel.invariants import check_parts_non_negative
from perfmodel.memo import Memo

GiB = 1024**3
GB = 1e9

# FP32 master weights + Adam exp_avg + exp_avg_sq: Megatron docs/user-guide/features/dist_optimizer.md (12 of the
# 18 bytes/param) and theoretical_memory_usage.py `6 + 12 / data_parallel_size`.
OPTIMIZER_STATE_BYTES = 12
# Megatron HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py) keeps a pinned FP32
# CPU copy of each offloaded parameter's grad (`cpu_copy_map_grad`, pin_cpu_grads=True) next to the CPU state.
HOST_GRAD_COPY_BYTES = 4
# Transformer Engine caches the FP8 weight (row-wise) and its transpose (column-wise, for dgrad) across
# micro-batches when Megatron passes `is_first_microbatch`; 1 byte each per GEMM weight. Estimate.
FP8_WEIGHT_CACHE_BYTES = 2

# Collective-library buffers per communicator: NCCL/RCCL NCCL_BUFFSIZE default 4 MiB per channel and direction
# (NCCL env docs), up to 32 channels (NCCL MAXCHANNELS) x (send + recv) = 256 MiB. Estimate per process group.
COMM_BUFFER_PER_GROUP_BYTES = 4 * 1024**2 * 32 * 2

# Margin: PyTorch caching-allocator fragmentation grows with the pool (5% of HBM) plus a fixed 2 GiB for the GPU
# runtime context, kernels and BLAS (cuBLASLt / hipBLASLt) workspaces. On a 288 GB MI355X this gives 15.4 GiB,
# next to the 16 GiB `--train-memory-margin-bytes` of the Miles AMD launcher used for the seed run (radixark/miles
# PR #1300 scripts/amd/run_deepseek_v4.py); the later colocated AMD launcher uses 3 GiB (see
# docs/reference/dsv4-flash-and-miles.md 2.1, 2.2). Override with `margin_bytes=`.
MARGIN_FRACTION_OF_HBM = 0.05
MARGIN_FIXED_BYTES = 2 * GiB


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes on one training GPU (the given or worst pipeline rank). `total_bytes` is HBM only."""

    pipeline_rank: int
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float  # on the GPU (the share not offloaded)
    optimizer_host_bytes: float  # offloaded optimizer state + its FP32 grad copy, in host memory
    activations_bytes: float
    comm_buffers_bytes: float
    margin_bytes: float
    total_bytes: float
    capacity_bytes: float  # HBM per GPU
    host_capacity_bytes: float  # host memory per GPU (node memory / GPUs per node)
    fits: bool  # HBM and host both fit
    params_dense: float = 0.0  # non-expert parameters held by this rank (weights, not grads)
    params_expert: float = 0.0  # routed-expert parameters held by this rank
    tokens_per_microbatch: float = 0.0  # per GPU, after CP
    microbatches_in_flight: float = 0.0  # stage-micro-batches whose activations the rank holds at peak
    activations_host_bytes: float = 0.0  # offloaded layers' activations, in host memory (activation_offload_layers)

    def __post_init__(self) -> None:
        check_parts_non_negative("memory parts >= 0", f"training memory, pipeline rank {self.pipeline_rank}",
                                 self.components() | {"optimizer_host": self.optimizer_host_bytes,
                                                      "activations_host": self.activations_host_bytes,
                                                      "total": self.total_bytes})

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes

    @property
    def parked_bytes(self) -> float:
        """What a sleeping trainer moves to the host and back (torch_memory_saver): its weights and the optimizer
        state it keeps on the GPU."""
        return self.weights_bytes + self.optimizer_bytes

    @property
    def host_bytes(self) -> float:
        """Host memory this GPU's rank uses: the offloaded optimizer state and the offloaded activations."""
        return self.optimizer_host_bytes + self.activations_host_bytes

    @property
    def host_headroom_bytes(self) -> float:
        return self.host_capacity_bytes - self.host_bytes

    @property
    def hbm_fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def host_fits(self) -> bool:
        return self.host_bytes <= self.host_capacity_bytes

    def components(self) -> dict[str, float]:
        return {
            "weights": self.weights_bytes,
            "grads": self.grads_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "comm_buffers": self.comm_buffers_bytes,
            "margin": self.margin_bytes,
        }

    def summary(self) -> str:
        parts = " + ".join(f"{k} {v / GB:.1f}" for k, v in self.components().items())
        line = (f"pipeline rank {self.pipeline_rank}: {parts} = {self.total_bytes / GB:.1f} GB of "
                f"{self.capacity_bytes / GB:.1f} GB HBM")
        line += " (fits" if self.hbm_fits else f" (does NOT fit: {-self.headroom_bytes / GB:.1f} GB over"
        line += f"); host optimizer {self.optimizer_host_bytes / GB:.1f}"
        if self.activations_host_bytes:
            line += f" + activations {self.activations_host_bytes / GB:.1f}"
        line += f" of {self.host_capacity_bytes / GB:.1f} GB"
        line += "" if self.host_fits else f" (does NOT fit: {-self.host_headroom_bytes / GB:.1f} GB over)"
        return line



# ---------------------------------------------------------------------------------------------------------------
# Training memory


def _process_groups(scn: Scenario) -> int:
    lay = scn.layout
    sizes = (lay.tp, lay.cp, scn.dp * lay.cp, lay.ep * lay.etp, scn.expert_dp, lay.pp)
    return sum(s > 1 for s in sizes)


# What a training rank's memory reads of the scenario (the key derived from it: perfmodel/inputs/keys.py); the
# sweep's pruning, the weight update's parking and the weight copies share one memoized breakdown per layout.
TRAINING_MEMORY_READS = Reads("training_memory_key", run=("kind", "gpus", "train_gpus", "train", "rl.algorithm"),
                              stack_parts=("train",), stack_knobs=("memory_saver",))


def memoized_training_memory(scn: Scenario, memo: Memo) -> MemoryBreakdown:
    """`training_memory(scn)`, reused through the caller's memo by what it reads."""
    return memo.get("training_memory", scenario_key(scn, TRAINING_MEMORY_READS, memo), lambda: training_memory(scn))


def training_memory(
    scn: Scenario,
    pipeline_rank: int | None = None,
    *,
    grad_reduce_in_bf16: bool = False,
    margin_bytes: float | None = None,
    expert_load_imbalance: float = 1.0,
) -> MemoryBreakdown:
    """Per-GPU memory of a training rank; the worst pipeline rank (largest HBM total) when `pipeline_rank` is None.

    grad_reduce_in_bf16: Megatron `--grad-reduce-in-bf16` (BF16 main grads; the seed run's launcher passes it).
    margin_bytes: overrides the default margin (5% of HBM + 2 GiB).
    expert_load_imbalance: routed tokens on the busiest expert rank / the balanced share (1.0 = balanced).
    """
    pp = scn.layout.pp
    if pipeline_rank is None:
        ranks = [_rank_memory(scn, r, grad_reduce_in_bf16, margin_bytes, expert_load_imbalance) for r in range(pp)]
        return max(ranks, key=lambda b: (b.total_bytes, -b.pipeline_rank))
    if not 0 <= pipeline_rank < pp:
        raise ValueError(f"pipeline_rank {pipeline_rank} is outside 0..{pp - 1}")
    return _rank_memory(scn, pipeline_rank, grad_reduce_in_bf16, margin_bytes, expert_load_imbalance)


def _rank_memory(
    scn: Scenario, rank: int, grad_bf16: bool, margin_bytes: float | None, imbalance: float
) -> MemoryBreakdown:
    hw, t, lay = scn.hardware, scn.train, scn.layout
    dense, expert, non_gemm = params_on_rank(scn, rank)
    dense_dp = scn.dp * lay.cp  # Megatron shards dense optimizer state over the DP x CP group
    expert_dp = scn.expert_dp  # tp x cp x dp / (ep x etp): already includes CP
    # FSDP (ZeRO-3) shards weights and grads like the optimizer; the distributed optimizer (ZeRO-1) only the state.
    w_dense, w_expert = (dense / dense_dp, expert / expert_dp) if t.fsdp else (dense, expert)
    held = w_dense + w_expert
    weights = BF16 * held
    if t.precision == "fp8" and not t.fsdp:
        weights += FP8_WEIGHT_CACHE_BYTES * (dense + expert - non_gemm)  # caches of the (unsharded) GEMM weights
    grads = (BF16 if grad_bf16 or scn.stack.grad_reduce_in_bf16 else FP32) * held
    sharded = t.distributed_optimizer or t.fsdp
    state_params = dense / dense_dp + expert / expert_dp if sharded else dense + expert
    state = OPTIMIZER_STATE_BYTES * state_params
    off = t.optimizer_offload_fraction
    optimizer_gpu = state * (1 - off)
    optimizer_host = (state + HOST_GRAD_COPY_BYTES * state_params) * off
    rl = scn.run.rl
    if rl is not None and rl.algorithm == "ppo" and not scn.stack.memory_saver:
        # PPO's critic (the actor's model with a value head, on the same ranks) stays resident beside the actor when
        # the stack parks neither (with torch_memory_saver each is offloaded while the other runs): its weights,
        # gradients and optimizer state as the actor's (the value head's hidden x 1 for the LM head is negligible)
        weights, grads, optimizer_gpu, optimizer_host = 2 * weights, 2 * grads, 2 * optimizer_gpu, 2 * optimizer_host

    acts, token_comm, inflight, acts_host = activations_on_rank(scn, rank, imbalance)
    comm = _process_groups(scn) * COMM_BUFFER_PER_GROUP_BYTES + token_comm
    if t.fsdp:
        # FSDP unshards one layer while prefetching the next (BF16) and reduce-scatters its grads (FP32)
        layers = [x for s in stages_on_rank(scn, rank) for x in layers_of_stage(scn, s)]
        biggest = 0.0
        for x in layers:
            loc, ex = layer_params_local(x, lay.tp, lay.ep * lay.etp)
            biggest = max(biggest, loc.params + ex)
        # under FP8 the gathered layer's FP8 copies too: FSDP keeps no whole-model FP8 cache (Megatron-Bridge's
        # Megatron-FSDP recipes set ddp.keep_fp8_transpose_cache False; FSDP2 casts the gathered weight per use)
        comm += biggest * (2 * BF16 + FP32 + (FP8_WEIGHT_CACHE_BYTES if t.precision == "fp8" else 0))
    margin = hw.hbm_bytes * MARGIN_FRACTION_OF_HBM + MARGIN_FIXED_BYTES if margin_bytes is None else margin_bytes
    total = weights + grads + optimizer_gpu + acts + comm + margin
    host_cap = hw.host_memory_bytes / hw.gpus_per_node
    fits = total <= hw.hbm_bytes and optimizer_host + acts_host <= host_cap
    return MemoryBreakdown(
        pipeline_rank=rank,
        weights_bytes=weights,
        grads_bytes=grads,
        optimizer_bytes=optimizer_gpu,
        optimizer_host_bytes=optimizer_host,
        activations_bytes=acts,
        comm_buffers_bytes=comm,
        margin_bytes=margin,
        total_bytes=total,
        capacity_bytes=hw.hbm_bytes,
        host_capacity_bytes=host_cap,
        fits=fits,
        params_dense=dense,
        params_expert=expert,
        tokens_per_microbatch=tokens_per_microbatch(scn),
        microbatches_in_flight=inflight,
        activations_host_bytes=acts_host,
    )


def all_ranks(
    scn: Scenario,
    *,
    grad_reduce_in_bf16: bool = False,
    margin_bytes: float | None = None,
    expert_load_imbalance: float = 1.0,
) -> list[MemoryBreakdown]:
    """`training_memory` of every pipeline rank, in rank order."""
    return [_rank_memory(scn, r, grad_reduce_in_bf16, margin_bytes, expert_load_imbalance)
            for r in range(scn.layout.pp)]

