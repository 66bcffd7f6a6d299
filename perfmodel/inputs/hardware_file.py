"""The hardware profile file's schema (`hwprofiles/<id>.yaml`): every number `{value: ..., source: "..."}`, so
that each constant names where it comes from; `perfmodel/inputs/hardware.py` flattens a checked file into the
`HardwareProfile` the cost functions read. `HardwareOptions`: the facts a run measured about its own hardware."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Num(_Strict):
    value: float
    source: str = Field(min_length=3, description="URL, paper table or measurement file")

    @field_validator("source")
    @classmethod
    def _source_named(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("every number needs its source (URL, paper table, or measurement file)")
        return v


class Text(_Strict):
    value: str
    source: str = Field(min_length=3)


class Frac(Num):
    @field_validator("value")
    @classmethod
    def _in_unit(cls, v: float) -> float:
        if not 0.0 < v <= 1.0:
            raise ValueError("an efficiency must be in (0, 1]")
        return v


class Positive(Num):
    @field_validator("value")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be > 0")
        return v


class NonNegative(Num):
    @field_validator("value")
    @classmethod
    def _non_negative(cls, v: float) -> float:
        if v < 0:
            raise ValueError("must be >= 0")
        return v


class PeakTflops(_Strict):
    bf16: Positive
    fp8: Positive | None = None
    fp4: Positive | None = None


class ScaleUpFile(_Strict):
    topology: Text  # full_mesh | switch
    domain_gpus: Positive
    links_per_gpu: Positive
    link_bandwidth_bytes_per_s: Positive  # one link, one direction
    gpu_bandwidth_bytes_per_s: Positive  # all links of one GPU, one direction
    latency_s: NonNegative

    @field_validator("topology")
    @classmethod
    def _topology(cls, v: Text) -> Text:
        if v.value not in ("full_mesh", "switch"):
            raise ValueError("topology.value must be full_mesh or switch")
        return v


class ScaleOutFile(_Strict):
    nic_bandwidth_bytes_per_s: Positive  # per GPU, one direction
    latency_s: NonNegative


class HostFile(_Strict):
    memory_bytes: Positive  # per node
    link_bandwidth_bytes_per_s: Positive  # per GPU, host <-> device, one direction
    op_time_factor: Positive | None = None  # the host CPU's time to issue one op over an x86 server's; absent: 1


class GemmCurveFile(_Strict):
    max: Frac  # efficiency reached by large GEMMs
    half_flops: Positive  # GEMM size (FLOPs) at which half of `max` is reached


class PerFabric(_Strict):
    scale_up: Num
    scale_out: Num


class GroupedGemmFile(_Strict):
    """One grouped GEMM kernel over an MoE layer's local experts (cost/compute.py grouped_gemm_time_s)."""

    rel_efficiency: Positive  # compute rate relative to the dense curve's max (no production-shape factor)
    engine_rel_efficiency: Positive | None = None  # the inference engine's fused MoE kernel; default: rel_efficiency
    fixed_s: NonNegative  # per grouped-GEMM kernel (launch, routing metadata, ramp, tail)
    per_expert_s: NonNegative  # per expert that gets rows: a sequential per-expert loop's launch; 0 when fused
    tile_rows: Positive  # an expert's rows run in tiles of this many (padding): the engine's fused MoE kernel
    train_tile_rows: Positive | None = None  # the training grouped GEMM's row tile; default: tile_rows
    # per expert that gets rows, in a training grouped GEMM run as one GEMM per expert on a few streams
    # (TransformerEngine's multi-stream GroupedLinear; stack knob grouped_gemm_launch); absent: 0
    train_per_expert_s: NonNegative | None = None
    overlap_norm: NonNegative | None = None  # compute and memory time combined as a p-norm; 0 or absent: their max


class EPKernelFile(_Strict):
    """A DeepEP-style (normal mode) expert-parallel dispatch / combine kernel (cost/dispatch.py)."""

    dispatch_floor_s: NonNegative  # per call: notify, layout, host sync of the receive counts
    combine_floor_s: NonNegative
    dispatch_unit_bytes_per_s: Positive  # bytes/s one SM / CU given to the kernel moves (scale-up)
    combine_unit_bytes_per_s: Positive
    units: Positive  # SMs / CUs the framework gives it by default


class AttentionFloorFile(_Strict):
    """The fixed times of one attention kernel (launch, scheduling metadata, tail) and of its work units."""
    decode: NonNegative  # an engine's decode attention (paged KV, one query per sequence)
    prefill: NonNegative  # a causal prefill / training flash-attention forward (its backward pays it too)
    decode_kv_head: NonNegative  # an engine's decode, per request and KV head on the GPU (its work item), any context
    decode_query_head: NonNegative  # ... and per request and query head (the query's load, the output's store)
    prefill_query_head: NonNegative  # a flash forward per query row and head (Q load, softmax bookkeeping, output)


class AttentionRelFile(_Strict):
    """A flash-attention kernel's math rate relative to the BF16 GEMM curve's max (cost/compute.py
    attention_time_s): the kernel the GPU's engines and trainers run (FlashAttention-3 on Hopper, -2 on Ampere)."""

    forward: Frac
    backward: Frac
    # DeepSeek-V4's fused sparse-MLA core (one 512-dim latent shared as K and V by every head, gathered top-k
    # entries, a sink): its own kernels, slower than a dense flash core on some GPUs; absent: the dense values
    sparse_mla_forward: Frac | None = None
    sparse_mla_backward: Frac | None = None


class EngineGemmRelFile(_Strict):
    """An engine's low-precision GEMM rate relative to the dense curve's (no production-shape factor), per recipe."""

    fp8: Positive  # per-tensor / per-token scaled FP8 (w8a8, dynamic activation scales)
    fp8_block: Positive  # block-scaled FP8 (128x128 weight blocks, 1x128 activation groups; MXFP8 alike)
    fp4: Positive  # NVFP4 / MXFP4


class EngineGemmFile(_Strict):
    """An inference engine's linear layer (SGLang, vLLM, TRT-LLM): the GEMM at its recipe's rate and, in low
    precision, the kernel that quantizes the activations first (cost/compute.py engine_gemm_time_s)."""

    # the dynamic activation-quantize kernel's fixed time (launch, reduction, tail); 0: the engine has no
    # low-precision GEMM and quantizes nothing (cpu-local)
    quant_fixed_s: NonNegative
    rel_efficiency: EngineGemmRelFile


class TrainGemmRelFile(_Strict):
    """A training FP8 recipe's GEMM kernel rate relative to per-tensor FP8 (the fp8 curve), per recipe; its casts
    are priced apart (cost/train/layers.py fp8_cast_work)."""

    mxfp8: Positive  # MXFP8: E8M0 scales per 32 elements fed to the block-scaled MMA


class ProtocolFile(_Strict):
    """Two protocols, the faster taken per message: a low-latency one at a fraction of the bus bandwidth (NCCL's
    LL, a custom all-reduce's one-shot) and a bulk one at the full bus bandwidth after an extra latency."""

    small_bw_fraction: Frac
    bulk_extra_latency_s: NonNegative


class EfficiencyFile(_Strict):
    gemm: dict[Literal["bf16", "fp8", "fp4"], GemmCurveFile]
    hbm: Frac
    collective_bus: PerFabric
    # switch fabrics: a ring collective over p < 7 peers of one domain reaches the bus efficiency (an 8-GPU figure)
    # x p (7 + c) / (7 (p + c)), c this value (cost/comm.py peer_ramp); absent: 0, no ramp
    collective_peer_ramp: NonNegative | None = None
    all_to_all_bus: PerFabric
    collective_latency_s: PerFabric  # per-call base of a collective (what a 1-step ring would pay)
    collective_step_latency_s: PerFabric  # added per ring step: 2(n-1) for all-reduce, n-1 for all-gather
    graph_all_reduce_latency_s: Num  # an engine's in-graph custom all-reduce inside one scale-up domain
    small_protocol: ProtocolFile  # NCCL collectives inside one scale-up domain (cost/comm.py _protocols)
    graph_small_protocol: ProtocolFile  # the same for the engine's in-graph custom all-reduce
    all_to_all_latency_s: PerFabric | None = None  # per-call floor of an all-to-all; default: collective_latency_s
    grouped_gemm: GroupedGemmFile
    ep_kernel: EPKernelFile
    attention_floor_s: AttentionFloorFile
    # exponentials/s of the attention softmax where it runs between the two attention MMAs instead of under them
    # (cost/compute.py softmax_exp_s); absent: hidden under the MMAs, or inside the fitted attention terms
    attention_softmax_exp_per_s: NonNegative | None = None
    # the flash-attention kernel's rate vs the BF16 GEMM max; absent: FlashAttention-3 on Hopper's (inputs/hardware.py
    # ATTENTION_FWD_REL_EFFICIENCY / ATTENTION_BWD_REL_EFFICIENCY)
    attention_rel_efficiency: AttentionRelFile | None = None
    engine_gemm: EngineGemmFile
    train_gemm: TrainGemmRelFile | None = None  # absent: every training FP8 recipe's GEMM at the fp8 curve
    optimizer_hbm: Frac
    host_link: Frac

    @field_validator("gemm")
    @classmethod
    def _bf16_required(cls, v: dict[str, GemmCurveFile]) -> dict[str, GemmCurveFile]:
        if "bf16" not in v:
            raise ValueError("gemm needs at least a bf16 curve")
        return v


class HardwareOptions(_Strict):
    """Facts a run's source measured about its hardware; each overrides the profile's number (the local
    executor's host probe: a `cpu-local` host runs bf16 matmuls at 6 or at 200 GFLOP/s depending on its CPU)."""

    source: str = Field(min_length=3, description="where the numbers were measured")
    peak_tflops_bf16: float | None = Field(None, gt=0)
    peak_tflops_fp8: float | None = Field(None, gt=0)
    gemm_half_flops_bf16: float | None = Field(None, gt=0)
    gemm_half_flops_fp8: float | None = Field(None, gt=0)


class HardwareFile(_Strict):
    id: str
    name: str
    vendor: Literal["amd", "nvidia", "cpu"]
    peak_tflops: PeakTflops
    hbm_bytes: Positive
    # what the GPU runtime and the communicators hold when an engine starts, before its weights (CUDA/HIP context,
    # NCCL/RCCL buffers): SGLang takes its static fraction of the rest; absent: 0
    runtime_reserved_bytes: NonNegative | None = None
    hbm_bandwidth_bytes_per_s: Positive
    gpus_per_node: Positive
    # SMs (NVIDIA) or CUs (AMD) of one GPU: the share of them communication kernels take from the compute they
    # run beside (sim/pipeline.py, the EP all-to-all hidden under another micro-batch); absent: not priced
    compute_units: Positive | None = None
    scale_up: ScaleUpFile
    scale_out: ScaleOutFile
    host: HostFile
    efficiency: EfficiencyFile
    notes: str = ""
