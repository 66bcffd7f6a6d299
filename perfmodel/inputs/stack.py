"""Software stacks: what ran the kernels (framework, release, kernel choices), as a layer apart from the hardware.

A stack profile is `stacks/<framework>.yaml`: every knob `{value, source}` as in the hardware profiles, and per
release the knobs that differ (`releases: {"25.11": {knobs: {...}}}`). A run names its stack as
`stack: framework[@release]` and may add `stack_options` for facts its source states. Resolution never fails on a
name: an unknown release falls back to the framework's profile, an unknown framework to `stacks/default.yaml`,
each with a one-line note; published runs name stacks the project has not met.

Knobs (each priced by the cost model from FLOPs, bytes and op counts, or a named multiplier with prior 1.0). A
profile lists only what differs from `stacks/default.yaml`, which lists every knob with its source:
- `attention_kernel`: flash (fused kernel) or materialized (scores and softmax through HBM);
  `cost/train/attention.py` prices both.
- `train_compute_scale`: a multiplier on training and log-prob compute, prior 1.0, for what first principles do not
  yet explain of a stack (the place calibration fits a stack's overhead, not the hardware's efficiencies).
- `backward_compute_scale`: a multiplier on the backward's compute on top of `train_compute_scale`, prior 1.0 (the
  backward's GEMMs take transposed operands: a CPU's slow bf16 path runs them slower than the forward's).
- `log_probs_compute_scale`: a multiplier on the RL log-prob (and reference) passes' compute on top of
  `train_compute_scale`, prior 1.0 (Miles' DSV4 log-prob pass runs 13x its kernels' time on GB300, its training 2x).
- `host_op_time_scale`, `host_device_overlap`, `cuda_graphs`: the host's time to issue a layer's ops (op counts and
  per-op times measured for eager megatron-core, `cost/train/moe.py`), how fast this stack's host issues them, and
  whether that time hides under the device's (a GPU: a floor per layer) or adds to it (a CPU runs both). CUDA/HIP
  graphs replay a dense layer without issuing its ops.
- `microbatch_host_s`: host time per micro-batch per pass on every pipeline rank (the schedule's step, the forward
  step and loss functions, the p2p calls), not divided by pipeline parallelism.
- `optimizer_host_s`: host time of one optimizer step beyond its HBM-bound Adam (gradient finalization, clipping,
  the optimizer's Python loop over parameter groups), not hidden by the device.
- `pack_sequences`: RL training packs samples into micro-batches by tokens (Miles/slime dynamic batching) or pads
  every sample of a micro-batch to the rollout's longest.
- `rollout_compute_scale`, `rollout_decode_host_s`, `rollout_request_host_s`, `rollout_token_host_s`,
  `rollout_prefill_host_s`: the serving engine's forwards (a multiplier), and its host time not hidden by the
  device: per decode step, once per request (tokenize, schedule, finish), per request per decode step (sampling,
  detokenizing and streaming a token), and per prefill batch. `rollout_max_engines` caps the engines a stack
  serves the run with (0: as many as the GPUs allow).
- `memory_saver`, `weight_update_fixed_s`, `weight_update_tensor_s`: colocated runs park the trainer and wake the
  engines around the weight update (torch_memory_saver), the fixed calls of an update (pause + flush, post-process,
  resume), and the engine's weight-loader time per HF tensor sent.
- `fsdp_reshard_after_forward`: FSDP / ZeRO-3 frees the gathered parameters after each forward (and gathers them
  again for the backward) or keeps them to the backward; null is torchtitan's default policy (keep them under
  pipeline parallelism, where they also stay gathered across micro-batches). `cost/train/stage.py` counts the
  gathers per step and how much of each the prefetch hides.
- `rl_step_host_s`, `rl_sample_host_s`, `rl_token_bytes`, `rl_host_bytes_per_s`, `rl_advantage_token_s`,
  `rl_weight_restore`, `rl_weight_backup`, `rl_comm_init_s`: the RL step's sub-phases outside the framework's
  phase timers, or inside them but outside the passes' compute (a sleeping trainer's process groups re-created)
  (`perfmodel/sim/rl_subphases.py`, docs/rl-phases.md): the driver's fixed work per step (Ray calls, engine HTTP
  calls, bookkeeping), per sample host work and the rollout data's bytes per token moved from the rollout side to
  the trainer at a serialization rate, host time per response token of the advantages, and whether the log-prob
  passes restore the model's weights from a pinned host copy (Miles `_switch_model`, NeMo-RL
  `prepare_for_lp_inference`) and training backs them up to it afterwards.
- `weight_update_gather_bytes`, `weight_update_pipelined`: the bytes per parameter the update gathers out of the
  trainer's shards (2: Megatron's BF16 parameters; 4: an FSDP/DTensor FP32 state dict) and whether packing the next
  bucket overlaps the engine's loading of this one (NeMo-RL's refit stream) or buckets go one after another (Miles).
- `fp8_recipe`: delayed, tensorwise (current scaling), blockwise or mxfp8: the quantization passes (HBM bytes and
  kernels) each recipe adds per FP8 GEMM input, forward and backward (`cost/train/layers.py::fp8_cast_work`).
- `elementwise_fusion`: fused (TransformerEngine/Apex kernels, or torch.compile) or eager (each norm, RoPE and
  gated activation a chain of ATen ops through HBM, `cost/train/eager.py`). A run's `stack_options.torch_compile`
  sets it: true fused, false eager.
"""

from __future__ import annotations

from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from perfmodel.errors import InputError
from perfmodel.inputs.loading import parse, read_mapping

AttentionKernel = Literal["flash", "materialized"]
Fp8Recipe = Literal["delayed", "tensorwise", "blockwise", "mxfp8"]
ElementwiseFusion = Literal["fused", "eager"]


def stacks_dir() -> Path:
    """`stacks/` of a checkout, or the copy packaged with the wheel."""
    here = Path(__file__).resolve().parent.parent
    for p in (here.parent / "stacks", here / "_data" / "stacks"):
        if p.is_dir():
            return p
    return here.parent / "stacks"


class StackOptions(BaseModel):
    """Facts a run's source states about its stack; each overrides the profile's knob."""

    model_config = ConfigDict(extra="allow", frozen=True)
    attention_kernel: AttentionKernel | None = None
    torch_compile: bool | None = None  # sets elementwise_fusion (true: fused)
    elementwise_fusion: ElementwiseFusion | None = None
    cuda_graphs: bool | None = None
    fp8_recipe: Fp8Recipe | None = None
    fsdp_reshard_after_forward: bool | None = None


class _Knob(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    value: Any
    source: str = Field(..., min_length=1)


class _Release(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    notes: str = ""
    knobs: dict[str, _Knob] = Field(default_factory=dict)


class StackProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    name: str
    description: str = ""
    knobs: dict[str, _Knob]
    releases: dict[str, _Release] = Field(default_factory=dict)


# Knobs whose value is a positive number a calibration may fit (the rest are choices: a kernel, a flag).
NUMERIC_KNOBS = ("train_compute_scale", "backward_compute_scale", "log_probs_compute_scale", "host_op_time_scale",
                 "microbatch_host_s", "optimizer_host_s", "rollout_compute_scale", "rollout_decode_host_s",
                 "rollout_request_host_s", "rollout_token_host_s", "rollout_prefill_host_s", "weight_update_fixed_s",
                 "weight_update_tensor_s")
ROLLOUT_KNOBS = ("rollout_compute_scale", "rollout_decode_host_s", "rollout_request_host_s", "rollout_token_host_s",
                 "rollout_prefill_host_s", "rollout_max_engines")
WEIGHT_UPDATE_KNOBS = ("memory_saver", "weight_update_fixed_s", "weight_update_tensor_s", "weight_update_gather_bytes",
                       "weight_update_pipelined")
# The RL step's sub-phases outside the simulated rollout, passes and update (sim/rl_subphases.py): set per
# framework from its source (docs/rl-phases.md), not fitted (one step's remainder cannot tell them apart).
RL_STEP_KNOBS = ("rl_step_host_s", "rl_sample_host_s", "rl_token_bytes", "rl_host_bytes_per_s",
                 "rl_advantage_token_s", "rl_weight_restore", "rl_weight_backup", "rl_comm_init_s")
KNOBS = ("attention_kernel", "host_device_overlap", "cuda_graphs", "pack_sequences", "memory_saver",
         "rollout_max_engines", "weight_update_gather_bytes", "weight_update_pipelined",
         "fsdp_reshard_after_forward", "fp8_recipe", "elementwise_fusion", *NUMERIC_KNOBS, *RL_STEP_KNOBS)
PART_KNOBS = {
    "rollout": ROLLOUT_KNOBS,
    "weight_update": (*WEIGHT_UPDATE_KNOBS, "rollout_max_engines"),  # the update reads the engines' geometry
    "rl_step": RL_STEP_KNOBS,
    "train": tuple(k for k in KNOBS if k not in ROLLOUT_KNOBS + WEIGHT_UPDATE_KNOBS + RL_STEP_KNOBS),
}
# what a pretraining run's figures inform (`perfmodel calibrate`'s default without RL runs): the training knobs
# except the log-prob passes'; RL runs inform every NUMERIC_KNOB
TRAIN_FIT_KNOBS = tuple(k for k in NUMERIC_KNOBS if k in PART_KNOBS["train"] and k != "log_probs_compute_scale")


class Stack(BaseModel):
    """A resolved stack: the knob values a scenario is priced with, where each came from, and what resolution
    had to assume."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str  # framework[@release] as resolved (the profile actually used)
    requested: str  # what the run named ("" when it named none)
    attention_kernel: AttentionKernel = "flash"
    train_compute_scale: float = Field(1.0, gt=0)
    backward_compute_scale: float = Field(1.0, gt=0)
    log_probs_compute_scale: float = Field(1.0, gt=0)
    host_op_time_scale: float = Field(1.0, ge=0)
    host_device_overlap: bool = True
    cuda_graphs: bool = False
    pack_sequences: bool = True
    rollout_compute_scale: float = Field(1.0, gt=0)
    microbatch_host_s: float = Field(0.0, ge=0)
    optimizer_host_s: float = Field(0.0, ge=0)
    rollout_decode_host_s: float = Field(0.0, ge=0)
    rollout_request_host_s: float = Field(0.0, ge=0)
    rollout_token_host_s: float = Field(0.0, ge=0)
    rollout_max_engines: int = Field(0, ge=0)
    rollout_prefill_host_s: float = Field(5.0e-3, ge=0)
    memory_saver: bool = True
    weight_update_fixed_s: float = Field(0.8, ge=0)
    weight_update_tensor_s: float = Field(0.0, ge=0)
    weight_update_gather_bytes: float = Field(2.0, gt=0)
    weight_update_pipelined: bool = False
    rl_step_host_s: float = Field(0.0, ge=0)
    rl_sample_host_s: float = Field(0.0, ge=0)
    rl_token_bytes: float = Field(0.0, ge=0)
    rl_host_bytes_per_s: float = Field(1.0e9, gt=0)
    rl_advantage_token_s: float = Field(0.0, ge=0)
    rl_weight_restore: bool = False
    rl_weight_backup: bool = False
    rl_comm_init_s: float = Field(0.0, ge=0)
    fsdp_reshard_after_forward: bool | None = True  # None: torchtitan's policy, True unless pipeline parallel
    fp8_recipe: Fp8Recipe = "delayed"
    elementwise_fusion: ElementwiseFusion = "fused"
    ignored_options: tuple[str, ...] = ()  # stack_options the cost model does not price yet
    notes: tuple[str, ...] = ()
    sources: dict[str, str] = Field(default_factory=dict)

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Stack:
        """A validated copy (pydantic's would carry the cached keys below over, stale)."""
        return Stack.model_validate({**self.model_dump(), **(update or {})})

    @cached_property
    def knobs(self) -> tuple:
        """The values costs depend on (a cache key; computed once per stack: cost keys ask for it per chunk)."""
        return tuple(getattr(self, k) for k in KNOBS)

    @cached_property
    def _part_knobs(self) -> dict[str, tuple]:
        values = dict(zip(KNOBS, self.knobs))
        return {part: tuple(values[k] for k in names) for part, names in PART_KNOBS.items()}

    def knobs_for(self, part: str) -> tuple:
        """The values one part of an RL step ("train", "rollout", "weight_update") depends on: a narrower cache
        key, so a calibration trying a training knob reuses the simulated rollout, and the other way round."""
        return self._part_knobs[part]

    def numeric(self) -> dict[str, float]:
        """The knobs a calibration may fit, by name."""
        return {k: float(getattr(self, k)) for k in NUMERIC_KNOBS}

    def with_knobs(self, values: dict[str, Any], source: str) -> Stack:
        """A copy with knobs overwritten (a calibration overlay), each recorded as coming from `source`."""
        unknown = [k for k in values if k not in KNOBS]
        if unknown:
            raise InputError(source, unknown[0], f"not a stack knob; valid: {', '.join(KNOBS)}")
        data = {**self.model_dump(), **values, "sources": {**self.sources, **dict.fromkeys(values, source)}}
        try:
            return Stack.model_validate(data)
        except ValueError as err:
            raise InputError(source, "params", " ".join(str(err).split())[:200]) from None


@lru_cache(maxsize=64)
def load_stack_profile(framework: str) -> StackProfile | None:
    path = stacks_dir() / f"{framework}.yaml"
    if not path.is_file():
        return None
    prof = parse(StackProfile, read_mapping(path), str(path))
    for name in prof.knobs:
        if name not in KNOBS:
            raise InputError(str(path), f"knobs.{name}", f"unknown knob; valid: {', '.join(KNOBS)}")
    return prof


def stack_ids() -> list[str]:
    return sorted(p.stem for p in stacks_dir().glob("*.yaml"))


def resolve_stack(requested: str | None, options: StackOptions | None = None, source: str = "") -> Stack:
    """The stack a run is priced with: its named profile (and release), then its stated options."""
    name = (requested or "").strip()
    framework, _, release = name.partition("@")
    notes: list[str] = []
    prof = load_stack_profile(framework) if framework else None
    if prof is None:
        if framework:
            notes.append(f"stack {framework!r} is not among the shipped profiles ({', '.join(stack_ids())}); "
                         "priced with the default stack")
        prof = load_stack_profile("default")
        if prof is None:
            raise InputError(str(stacks_dir() / "default.yaml"), "", "the default stack profile is missing")
        framework, release = "default", ""
    base = load_stack_profile("default") if prof.id != "default" else None
    knobs = {**(base.knobs if base else {}), **prof.knobs}
    used = prof.id
    if release:
        rel = prof.releases.get(release)
        if rel is None:
            notes.append(f"release {release!r} of {framework} has no profile of its own; priced with the "
                         f"{framework} profile")
        else:
            knobs |= rel.knobs
            used = f"{prof.id}@{release}"
    values = {k: v.value for k, v in knobs.items()}
    sources = {k: v.source for k, v in knobs.items()}
    ignored: list[str] = []
    for key, value in (options.model_dump(exclude_none=True) if options else {}).items():
        if key == "torch_compile":  # compiled: Inductor fuses the elementwise chains; not: they run eagerly
            key, value = "elementwise_fusion", "fused" if value else "eager"
            if options.elementwise_fusion is not None:
                continue  # stated outright: that wins
        if key in KNOBS:
            values[key], sources[key] = value, f"stack_options of {source or 'the run'}"
        else:
            ignored.append(key)
    if ignored:
        notes.append(f"stack_options {', '.join(ignored)} recorded but not priced yet")
    try:
        return Stack(id=used, requested=name, **values, ignored_options=tuple(ignored), notes=tuple(notes),
                     sources=sources)
    except ValueError as err:
        raise InputError(source, "stack_options", " ".join(str(err).split())[:200]) from None
