"""Software stacks: what ran the kernels (framework, release, kernel choices), as a layer apart from the hardware.

A stack profile is `stacks/<framework>.yaml`: every knob `{value, source}` as in the hardware profiles, and per
release the knobs that differ (`releases: {"25.11": {knobs: {...}}}`). A run names its stack as
`stack: framework[@release]` and may add `stack_options` for facts its source states. Resolution never fails on a
name: an unknown release falls back to the framework's profile, an unknown framework to `stacks/default.yaml`,
each with a one-line note; published runs name stacks the project has not met.

Knobs are each priced by the cost model from FLOPs, bytes and op counts, or are a named multiplier with prior 1.0.
Each is declared once, as a `Stack` field made by `knob()`: its default, bounds, the part of the RL step it
scales, whether a calibration fits it and its doc line. KNOBS, the parts' cache keys (PART_KNOBS), the fitted
knobs, the names profiles and overlays may set, the typed `StackOptions` and the table in docs/stacks.md
(`knob_table_markdown`) derive from those declarations. A profile lists only what differs from
`stacks/default.yaml`, which lists every knob with its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from perfmodel.errors import InputError
from perfmodel.inputs.cuda_graph_scope import CudaGraphScope
from perfmodel.inputs.loading import first_error, parse, read_mapping

AttentionKernel = Literal["flash", "materialized"]
Fp8Recipe = Literal["delayed", "tensorwise", "blockwise", "mxfp8"]
ElementwiseFusion = Literal["fused", "eager"]
FlopsConvention = Literal["mbridge-25.11", "mbridge-26.06"]
GroupedGemmLaunch = Literal["multi_stream", "single"]
EngineMemoryRule = Literal["sglang", "vllm"]




def stacks_dir() -> Path:
    """`stacks/` of a checkout, or the copy packaged with the wheel."""
    here = Path(__file__).resolve().parent.parent
    for p in (here.parent / "stacks", here / "_data" / "stacks"):
        if p.is_dir():
            return p
    return here.parent / "stacks"


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


Part = Literal["train", "rollout", "weight_update", "rl_step"]
# the runs whose figures inform a fitted knob: any run (a pretraining run's too), or only RL runs
FitBy = Literal["any", "rl"]


def knob(default: Any, *, part: Part, doc: str, fit: FitBy | None = None, also_reads: tuple[Part, ...] = (),
         option: bool = False, gt: float | None = None, ge: float | None = None) -> Any:
    """A `Stack` field that is a knob, declared once: `part` is the part of the RL step it scales (its cache key
    holds it), `also_reads` the other parts that read it, `fit` which runs a calibration fits it on (None: a choice,
    or a number set per framework from its source), `option` whether a run's `stack_options` states it typed, and
    `doc` its line in docs/stacks.md. The metadata rides in json_schema_extra; `KNOB_SPECS` reads it back."""
    bounds = {k: v for k, v in (("gt", gt), ("ge", ge)) if v is not None}
    meta = {"part": part, "also_reads": list(also_reads), "fit": fit, "option": option}
    return Field(default, description=doc, json_schema_extra={"knob": meta}, **bounds)


class Stack(BaseModel):
    """A resolved stack: the knob values a scenario is priced with, where each came from, and what resolution
    had to assume."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str  # framework[@release] as resolved (the profile actually used)
    requested: str  # what the run named ("" when it named none)
    # The knobs: training's, the rollout's, the weight update's, training's FSDP/FP8/fusion choices, the RL step's.
    # This order yields the derived tuples below in the order they had when written out by hand (cache keys,
    # calibration's parameter order), which tests/inputs/test_knob_declarations.py checks.
    attention_kernel: AttentionKernel = knob(
        "flash", part="train", option=True,
        doc="`cost/train/attention.py`: a fused kernel (flash), or (materialized) the batched QK^T over every s^2 "
            "pair, a BF16 scale-mask-softmax through HBM and the PV GEMM (selective recompute replays all three; "
            "without recompute the softmax output stays in memory)")
    train_compute_scale: float = knob(
        1.0, part="train", fit="any", gt=0,
        doc="a named multiplier on training and log-prob compute (communication excluded), for what first "
            "principles do not explain yet: where calibration fits a stack's overhead, not the hardware's")
    backward_compute_scale: float = knob(
        1.0, part="train", fit="any", gt=0,
        doc="the backward's compute on top of `train_compute_scale`: its GEMMs take transposed operands, which a "
            "CPU's slow bf16 path runs slower (local-cpu: 1.31 from the measured forward / dgrad / wgrad GEMM rates)")
    log_probs_compute_scale: float = knob(
        1.0, part="train", fit="rl", gt=0,
        doc="the RL log-prob (and reference) passes' compute on top of `train_compute_scale` (Miles' DSV4 log-prob "
            "pass runs 13x its kernels' time on GB300, its training 2x)")
    host_op_time_scale: float = knob(
        1.0, part="train", fit="any", ge=0,
        doc="`cost/train/stage.py::_on_stack`: the host's time to issue a layer's ops (op counts and per-op times "
            "measured for eager megatron-core, `cost/train/moe.py`, `benchmarks/results/host-ops.json`) x this")
    host_device_overlap: bool = knob(
        True, part="train",
        doc="true (a GPU): the host runs ahead, its time is a floor on each layer's pass; false (a CPU runs "
            "both): it adds to compute")
    cuda_graph_scope: CudaGraphScope = knob(
        "none", part="train", option=True,
        doc="what CUDA/HIP graphs replay, so the host does not issue it op by op (`cost/train/cuda_graphs.py`): "
            "none; full_iteration (the whole forward-backward, megatron-core --cuda-graph-impl full_iteration); or "
            "TransformerEngine's per-layer parts joined with '+' (attn, mlp, moe, moe_router, moe_preprocess, as "
            "--cuda-graph-scope names them)")
    microbatch_host_s: float = knob(
        0.0, part="train", fit="any", ge=0,
        doc="host time per micro-batch per pass on every pipeline rank (the schedule's step, the forward step and "
            "loss functions, the p2p calls), not divided by pipeline parallelism")
    optimizer_host_s: float = knob(
        0.0, part="train", fit="any", ge=0,
        doc="host time of one optimizer step beyond its HBM-bound Adam (`optimizer_step_s`): gradient "
            "finalization, clipping, the optimizer's Python loop over parameter groups; not hidden by the device")
    pack_sequences: bool = knob(
        True, part="train",
        doc="RL training packs samples into micro-batches by tokens (Miles/slime dynamic batching) or pads every "
            "sample of a micro-batch to the rollout's longest (`sim/rl_step.py`)")
    deterministic: bool = knob(
        False, part="train", option=True,
        doc="megatron-core --deterministic-mode (bit-exact training: torch deterministic algorithms, NCCL Ring, no "
            "non-deterministic TransformerEngine kernels): each layer's compute x its measured cost "
            "(`cost/train/determinism.py`: dense 1.04, MoE 1.17)")
    grouped_gemm_launch: GroupedGemmLaunch = knob(
        "multi_stream", part="train", option=True,
        doc="how the training MoE's expert GEMMs launch: multi_stream (TransformerEngine's GroupedLinear module, one "
            "GEMM per local expert over a few streams, each hit expert paying the profile's "
            "`grouped_gemm.train_per_expert_s`) or single (one grouped kernel: TE's op fuser / fused grouped MLP, "
            "torch._grouped_mm, Primus-Turbo's CK grouped GEMM)")
    memory_saver: bool = knob(
        True, part="weight_update",
        doc="colocated runs park the trainer and release / resume the engines around the weight update "
            "(torch_memory_saver); false: no sleep, wake or onload")
    rollout_compute_scale: float = knob(
        1.0, part="rollout", fit="rl", gt=0,
        doc="a multiplier on the serving engine's forwards (`cost/serve/engine.py`): every rate they run at, their "
            "kernels' floors and the host's issue of an eager one")
    rollout_decode_host_s: float = knob(
        0.0, part="rollout", fit="rl", ge=0,
        doc="the serving engine's host time per decode step not hidden by the device")
    rollout_request_host_s: float = knob(
        0.0, part="rollout", fit="rl", ge=0,
        doc="host time once per request (tokenize, schedule, finish) not hidden by the device")
    rollout_token_host_s: float = knob(
        0.0, part="rollout", fit="rl", ge=0,
        doc="host time per request per decode step (sampling, detokenizing, streaming) not hidden by the device")
    rollout_prefill_host_s: float = knob(
        5.0e-3, part="rollout", fit="rl", ge=0, doc="host time per prefill batch not hidden by the device")
    rollout_prefill_kernel_host_s: float = knob(
        4.8e-5, part="rollout", fit="rl", ge=0,
        doc="host time to issue one kernel of an eager prefill forward (0: a CUDA graph or the host keeps ahead); "
            "a forward takes at least its kernels' issue time")
    rollout_rocm_dense_gemm_call_s: float = knob(
        0.0, part="rollout", ge=0,
        doc="device time of one of the FP8 engine's dense projection GEMM calls on ROCm (aiter's block-FP8 GEMM) where "
            "a release is measured to run them far slower than their bytes (0: the roofline and the kernel floor "
            "price them; CUDA builds run other kernels and keep it); a forward's dense GEMMs take at least their "
            "calls (`cost/serve/decode_kernels.py`) x this")
    rollout_memory_rule: EngineMemoryRule = knob(
        "sglang", part="rollout",
        doc="how the engine sizes its KV pool (`cost/memory/rollout.py` engine_static_bytes): sglang, its "
            "mem_fraction_static of the memory free when it starts (the profile's `runtime_reserved_bytes` held "
            "before) less the weights; vllm, its gpu_memory_utilization of the whole memory less the weights and "
            "its profile run's sampler peak (max_num_seqs x vocab logits, sorted for top-k / top-p)")
    rollout_max_engines: int = knob(
        0, part="rollout", also_reads=("weight_update",), ge=0,  # the update reads the engines' geometry
        doc="caps the engines serving the run (local-cpu: 1, one SGLang engine on a CPU); 0: as many as the GPUs "
            "allow (rollout GPUs / engine GPUs)")
    weight_update_fixed_s: float = knob(
        0.8, part="weight_update", fit="rl", ge=0,
        doc="the fixed calls of an update (pause + flush, post-process, resume; `cost/serve/weight_update.py`)")
    weight_update_tensor_s: float = knob(
        0.0, part="weight_update", fit="rl", ge=0,
        doc="the engine's weight-loader time per HF tensor sent (`cost/serve/weight_update.py`)")
    weight_update_time_scale: float = knob(
        1.0, part="weight_update", fit="rl", gt=0,
        doc="a named multiplier on the whole weight update (every part of `cost/serve/weight_update.py`), for what "
            "the mechanisms priced there do not explain yet (the zero-shot band's weight-update spread)")
    weight_update_gather_bytes: float = knob(
        2.0, part="weight_update", gt=0,
        doc="the bytes per parameter the update gathers out of the trainer's shards (2: Megatron's BF16 "
            "parameters; 4: an FSDP/DTensor FP32 state dict)")
    weight_update_assemble_bytes_per_s: float = knob(
        0.0, part="weight_update", ge=0,
        doc="the sender's full-tensor assembly and bucket packing, BF16 bytes per second (verl's checkpoint engines "
            "build every full HF tensor on one rank before it is sent); 0: no such stage beyond the gather")
    weight_update_apply_bytes_per_s: float = knob(
        0.0, part="weight_update", ge=0,
        doc="the engines' load of the received full tensors, BF16 bytes per second, after the transfer (verl's "
            "receivers: update_weights_from_tensor per bucket); 0: inside the mechanism's own price")
    weight_update_pipelined: bool = knob(
        False, part="weight_update",
        doc="the next bucket's packing (a broadcast's: export) overlaps this one's loading (broadcast): NeMo-RL's "
            "refit stream and PR #1379; or buckets go one after another (Miles)")
    weight_update_broadcast_group: Literal["sources", "trainer"] = knob(
        "sources", part="weight_update",
        doc="who joins a disaggregated broadcast: the senders and rollout GPUs (Miles, verl, NeMo-RL v0.3: a lone "
            "sender's NIC) or every training rank too, each exporting every tensor (NeMo-RL v0.4+: all NICs)")
    fsdp_reshard_after_forward: bool | None = knob(
        True, part="train", option=True,
        doc="FSDP / ZeRO-3 frees the gathered parameters after each forward (and gathers them again for the "
            "backward) or keeps them to the backward; null: torchtitan's policy (keep them under pipeline "
            "parallelism, where they also stay gathered across micro-batches). `cost/train/stage.py` counts the "
            "gathers per step and how much of each the prefetch hides (below)")
    fp8_recipe: Fp8Recipe = knob(
        "delayed", part="train", option=True,
        doc="the quantization passes (HBM bytes and kernels) each recipe adds per FP8 GEMM input, forward and "
            "backward (`cost/train/layers.py::fp8_cast_work`; below)")
    elementwise_fusion: ElementwiseFusion = knob(
        "fused", part="train", option=True,
        doc="fused (TransformerEngine/Apex kernels, or torch.compile) or eager (each norm, RoPE and gated "
            "activation a chain of ATen ops through HBM, `cost/train/eager.py`; below); a run's "
            "`stack_options.torch_compile` sets it: true fused, false eager")
    grad_reduce_in_bf16: bool = knob(
        False, part="train", option=True,
        doc="the main-grad buffer in BF16 (Megatron --grad-reduce-in-bf16, megatron-core DDP grad_reduce_in_fp32 "
            "False) or FP32 (Megatron's default for BF16 training): its bytes per parameter in training memory")
    flops_convention: FlopsConvention = knob(
        "mbridge-25.11", part="train",
        doc="how the run's framework counts model FLOPs for its TFLOP/s and MFU (`cost/train/flops.py`): "
            "Megatron-Bridge's formula before its v0.5.0 (NeMo 26.06) counts a GLU as 3 matrices only with SiLU and "
            "every attention layer as full causal; from 26.06 every GLU, and a sliding-window layer at its exact "
            "average context (Megatron-Bridge PR #3947)")
    hybridep_units: int = knob(
        16, part="train", ge=1,
        doc="SMs NVIDIA's Hybrid-EP dispatch and combine kernels run on (megatron-core --moe-hybridep-num-sms, "
            "default 16): what an all-to-all hidden under another micro-batch's compute takes from it "
            "(`sim/pipeline.py`; DeepEP's are the profile's `ep_kernel.units`)")
    # The RL step's sub-phases outside the simulated rollout, passes and update (sim/rl_subphases.py,
    # docs/rl-phases.md): set per framework from its source, not fitted (one step's remainder cannot tell them apart).
    rl_step_host_s: float = knob(
        0.0, part="rl_step", ge=0,
        doc="the driver's fixed work per RL step outside the framework's phase timers (Ray calls, engine HTTP "
            "calls, bookkeeping; `sim/rl_subphases.py`)")
    rl_sample_host_s: float = knob(
        0.0, part="rl_step", ge=0,
        doc="host time per sample beyond the priced phases (the samples' conversion to training data, their split "
            "across data-parallel ranks)")
    rl_token_bytes: float = knob(
        0.0, part="rl_step", ge=0,
        doc="the rollout data's bytes per token moved from the rollout side to the trainer, serialized at "
            "`rl_host_bytes_per_s`")
    rl_host_bytes_per_s: float = knob(
        1.0e9, part="rl_step", gt=0, doc="the serialization rate of `rl_token_bytes` (read only when they are > 0)")
    rl_advantage_token_s: float = knob(0.0, part="rl_step", ge=0, doc="host time per response token of the advantages")
    rl_weight_restore: bool = knob(
        False, part="rl_step",
        doc="the log-prob passes restore the model's weights from a pinned host copy (Miles `_switch_model`, "
            "NeMo-RL `prepare_for_lp_inference`)")
    rl_weight_backup: bool = knob(
        False, part="rl_step", doc="training backs the weights up to that host copy afterwards")
    rl_comm_init_s: float = knob(
        0.0, part="rl_step", ge=0,
        doc="time per communicator a colocated trainer creates again after its sleep destroyed its process groups: "
            "inside the phase timers (its first log-prob and training passes), outside the passes' compute")
    rl_log_probs_timer_has_ref: bool = knob(
        False, part="rl_step",
        doc="the framework's log-prob timer holds the reference pass too (NeMo-RL's "
            "`policy_and_reference_logprobs`): `log_probs_time_s` is then the two passes together")
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


@dataclass(frozen=True)
class KnobSpec:
    """One knob as its `Stack` field declares it (read back from the field)."""

    name: str
    part: Part
    also_reads: tuple[Part, ...]
    fit: FitBy | None
    option: bool
    doc: str
    default: Any
    annotation: Any
    bound: str  # "> 0", ">= 0", or "" for choices


def _knob_specs() -> dict[str, KnobSpec]:
    specs: dict[str, KnobSpec] = {}
    for name, field in Stack.model_fields.items():
        extra = field.json_schema_extra
        meta = extra.get("knob") if isinstance(extra, dict) else None
        if not isinstance(meta, dict):
            continue  # id, requested, notes, sources: not knobs
        bound = next((f"{op} {getattr(m, attr):g}" for m in field.metadata for attr, op in (("gt", ">"), ("ge", ">="))
                      if getattr(m, attr, None) is not None), "")
        specs[name] = KnobSpec(name, meta["part"], tuple(meta["also_reads"]), meta["fit"], meta["option"],
                               field.description or "", field.default, field.annotation, bound)
    return specs


KNOB_SPECS = _knob_specs()
# Knobs whose value is a positive number a calibration may fit (the rest are choices, or set from a source).
NUMERIC_KNOBS = tuple(k for k, s in KNOB_SPECS.items() if s.fit)
# what a pretraining run's figures inform (`perfmodel calibrate`'s default without RL runs); RL runs inform every
# NUMERIC_KNOB
TRAIN_FIT_KNOBS = tuple(k for k, s in KNOB_SPECS.items() if s.fit == "any")
ROLLOUT_KNOBS, WEIGHT_UPDATE_KNOBS, RL_STEP_KNOBS = (
    tuple(k for k, s in KNOB_SPECS.items() if s.part == part) for part in ("rollout", "weight_update", "rl_step"))
# the order `Stack.knobs` (a cache key) has always had: the choices, the fitted knobs, the RL step's
KNOBS = (*(k for k, s in KNOB_SPECS.items() if not s.fit and s.part != "rl_step"), *NUMERIC_KNOBS, *RL_STEP_KNOBS)


def _part_knobs(part: Part, order: tuple[str, ...]) -> tuple[str, ...]:
    """A part's cache key: its own knobs, then those of other parts it also reads."""
    return (*(k for k in order if KNOB_SPECS[k].part == part), *(k for k in order if part in KNOB_SPECS[k].also_reads))


# training's key in KNOBS order, the others in declaration order: the orders these keys have always had
PART_KNOBS: dict[str, tuple[str, ...]] = {part: _part_knobs(part, KNOBS if part == "train" else tuple(KNOB_SPECS))
                                          for part in ("rollout", "weight_update", "rl_step", "train")}

StackOptions = create_model(
    "StackOptions", __config__=ConfigDict(extra="allow", frozen=True),
    __doc__="Facts a run's source states about its stack; each overrides the profile's knob. The knobs declared "
            "`option` are typed here; another knob passes through (`Stack` validates it), anything else is recorded "
            "as not priced yet.",
    torch_compile=(bool | None, Field(None, description="sets elementwise_fusion (true: fused)")),
    **{k: (s.annotation | None, None) for k, s in KNOB_SPECS.items() if s.option})

_UNITS = (("_bytes_per_s", "bytes/s"), ("_s", "seconds"), ("_bytes", "bytes"), ("_scale", "multiplier"))
_FIT_SHOWN = {"any": "any run", "rl": "RL runs", None: "no"}


def _values_shown(spec: KnobSpec) -> str:
    if get_origin(spec.annotation) is Literal:
        return ", ".join(f"`{v}`" for v in get_args(spec.annotation))
    kinds = get_args(spec.annotation) or (spec.annotation,)
    if bool in kinds:
        return "bool or null" if type(None) in kinds else "bool"
    unit = next((u for suffix, u in _UNITS if spec.name.endswith(suffix)), spec.annotation.__name__)
    return f"{unit}, {spec.bound}" if spec.bound else unit


def _default_shown(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()
    if isinstance(value, float) and "e" in f"{value:g}":  # 1e9, not 1000000000.0
        return f"{value:g}".replace("e+0", "e").replace("e-0", "e-")
    return str(value)


def knob_table_markdown() -> str:
    """The knob table of docs/stacks.md, one row per knob in declaration order (scripts/knob_table.py writes it,
    tests/inputs/test_knob_declarations.py checks the doc's is current)."""
    rows = ["| knob | part | values | default | fitted on | priced by |", "|---|---|---|---|---|---|"]
    for s in KNOB_SPECS.values():
        doc = s.doc.replace("|", r"\|")  # a pipe would end the cell
        rows.append(f"| `{s.name}` | {', '.join((s.part, *s.also_reads))} | {_values_shown(s)} | "
                    f"`{_default_shown(s.default)}` | {_FIT_SHOWN[s.fit]} | {doc} |")
    return "\n".join(rows)


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


_RESOLVED: dict[tuple, tuple[StackProfile | None, StackProfile | None, Stack]] = {}


def resolve_stack(requested: str | None, options: StackOptions | None = None, source: str = "") -> Stack:
    """The stack a run is priced with: its named profile (and release), then its stated options. A sweep's
    candidates name the same stack: they share one (immutable) Stack, whose knob tuples are built once; the
    profiles it was resolved from are part of the reuse (a re-read profile resolves anew)."""
    framework = (requested or "").strip().partition("@")[0]
    prof, default = (load_stack_profile(framework) if framework else None), load_stack_profile("default")
    key = (requested, options.model_dump_json() if options is not None else None, source, id(prof), id(default))
    hit = _RESOLVED.get(key)
    if hit is None or hit[0] is not prof or hit[1] is not default:
        if len(_RESOLVED) >= 256:
            _RESOLVED.clear()
        hit = _RESOLVED[key] = (prof, default, _resolve_stack(requested, options, source))
    return hit[2]


def _resolve_stack(requested: str | None, options: StackOptions | None, source: str) -> Stack:
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
    except ValidationError as err:  # a knob out of its bounds: named with its bound, as any field of a file is
        raise first_error(err, source, "stack_options", Stack) from None
    except ValueError as err:
        raise InputError(source, "stack_options", " ".join(str(err).split())[:200]) from None
