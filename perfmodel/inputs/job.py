"""The job: what is trained (pretrain or RL) and how it is laid out on the GPUs.

The field names follow the validation case format (docs/validation-cases.md) so that a case, a plan and a
sweep candidate are the same object. `ParallelLayout` holds the parallel degrees; `TrainSpec` the training
step (batch, schedule, recompute, optimizer sharding); `RLSpec` the rollout side of an RL step.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from perfmodel.inputs.bounds import (
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_LAYERS,
    MAX_MICRO_BATCH,
    MAX_PARALLEL_DEGREE,
    MAX_RESPONSES_PER_STEP,
    MAX_SEQ_LEN,
)
from perfmodel.schedules import SCHEDULES, default_schedule


def _known_schedule(name: str) -> str:
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; valid: {', '.join(SCHEDULES)}")
    return name


Precision = Literal["bf16", "fp8"]
ScheduleName = Annotated[str, AfterValidator(_known_schedule)]  # a registered schedule (perfmodel/schedules/)
Recompute = Literal["none", "selective", "full"]
# Megatron-core's recompute submodules that the cost model prices (TransformerConfig.recompute_modules; the
# GatedDeltaNet/GDP ones and mHC's are not)
RecomputeModule = Literal["core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "moe", "shared_experts"]
DEFAULT_RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = ("core_attn",)  # megatron-core's default
MoEDispatcher = Literal["alltoall", "deepep", "hybridep"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ParallelLayout(_Strict):
    """Training parallel degrees. dp may be omitted: it is derived from the GPU count."""

    tp: int = Field(1, ge=1, le=MAX_PARALLEL_DEGREE, description="tensor parallel")
    pp: int = Field(1, ge=1, le=MAX_PARALLEL_DEGREE, description="pipeline parallel")
    cp: int = Field(1, ge=1, le=MAX_PARALLEL_DEGREE, description="context parallel")
    ep: int = Field(1, ge=1, le=MAX_PARALLEL_DEGREE, description="expert parallel")
    etp: int = Field(1, ge=1, le=MAX_PARALLEL_DEGREE, description="expert tensor parallel")
    vpp: int = Field(1, ge=1, le=MAX_PARALLEL_DEGREE, description="virtual pipeline stages per rank (interleaved 1F1B)")
    dp: int | None = Field(None, ge=1, le=MAX_GPUS, description="data parallel (derived when omitted)")

    def model_parallel_size(self) -> int:
        return self.tp * self.pp * self.cp

    def short(self) -> str:
        parts = [f"TP{self.tp}", f"PP{self.pp}"]
        if self.vpp > 1:
            parts.append(f"VPP{self.vpp}")
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.etp > 1:
            parts.append(f"ETP{self.etp}")
        parts.append(f"DP{self.dp if self.dp is not None else '?'}")
        return "/".join(parts)


class TrainSpec(_Strict):
    precision: Precision = "bf16"
    seq_len: int = Field(..., ge=1, le=MAX_SEQ_LEN, description="tokens per sequence (rl: the padded cap)")
    global_batch: int = Field(..., ge=1, le=MAX_GLOBAL_BATCH, description="sequences per optimizer step")
    micro_batch: int = Field(1, ge=1, le=MAX_MICRO_BATCH)
    layout: ParallelLayout = ParallelLayout()
    schedule: ScheduleName | None = Field(None, description="default: the registered default for the layout's vpp "
                                          "(1F1B, interleaved when vpp > 1)")
    microbatch_group_size_per_vp_stage: int | None = Field(
        None, ge=1, description="interleaved: contiguous micro-batches per virtual stage (Megatron "
        "--microbatch-group-size-per-virtual-pipeline-stage; default pp)")
    pipeline_layers: tuple[int, ...] | None = Field(None, description="decoder layers per (virtual) pipeline stage")
    recompute: Recompute = "none"
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        None, description="selective: the submodules replayed in the backward, their outputs not kept (Megatron "
        "--recompute-modules; default core_attn)")
    recompute_num_layers: int | None = Field(
        None, ge=1, le=MAX_LAYERS, description="full: only the first N decoder layers of each pipeline chunk "
        "(Megatron --recompute-method block --recompute-num-layers N); default every layer")
    sequence_parallel: bool = False
    distributed_optimizer: bool = True
    fsdp: bool = False
    optimizer_offload_fraction: float = Field(0.0, ge=0.0, le=1.0)
    activation_offload_layers: int = Field(
        0, ge=0, le=MAX_LAYERS, description="decoder layers whose activations go to host memory during the forward "
        "and come back for the backward (Megatron --cpu-offloading with --cpu-offloading-num-layers, activations "
        "only; the first layers): pp 1 and no recompute, as megatron-core requires")
    max_tokens_per_gpu: int | None = Field(None, ge=1, le=MAX_SEQ_LEN * MAX_MICRO_BATCH,
                                           description="dynamic micro-batching by token budget")
    moe_dispatcher: MoEDispatcher = Field(
        "alltoall", description="alltoall: Megatron's alltoall dispatcher, one copy per (token, expert); deepep: "
        "DeepEP-style dispatch (Megatron flex, Primus Turbo DeepEP, MORI), one copy per destination GPU and, across "
        "nodes, per destination node; hybridep: NVIDIA's Hybrid-EP kernels (Megatron flex with the hybridep backend), "
        "the same copies at their own rate over the scale-up domain")

    @model_validator(mode="after")
    def _recompute_options(self) -> TrainSpec:
        if self.recompute_modules is not None and self.recompute != "selective":
            raise ValueError(f"recompute_modules applies to recompute: selective (this run: {self.recompute})")
        if self.recompute_num_layers is not None and self.recompute != "full":
            raise ValueError(f"recompute_num_layers applies to recompute: full (this run: {self.recompute})")
        return self

    def resolved_schedule(self) -> str:
        return self.schedule if self.schedule is not None else default_schedule(self.layout.vpp)

    def recomputed_modules(self) -> frozenset[str]:
        """The submodules selective recompute replays (none without it)."""
        if self.recompute != "selective":
            return frozenset()
        return frozenset(DEFAULT_RECOMPUTE_MODULES if self.recompute_modules is None else self.recompute_modules)

    def layer_recompute(self, position: int) -> Recompute:
        """How the decoder layer at `position` (0-based) in its pipeline chunk is recomputed: full recompute with
        `recompute_num_layers` n covers the chunk's first n layers (Megatron's block method, per TransformerBlock,
        one per virtual stage) and leaves the rest without."""
        if self.recompute == "full" and self.recompute_num_layers is not None and position >= self.recompute_num_layers:
            return "none"
        return self.recompute


class ResponseTokens(_Strict):
    max: int = Field(..., ge=1, le=MAX_SEQ_LEN)
    mean: float | None = Field(None, gt=0)
    truncated_fraction: float | None = Field(None, ge=0.0, le=1.0)
    histogram: tuple[tuple[int, float], ...] | None = Field(
        None, description="empirical distribution: (response tokens, weight) pairs; overrides mean/truncated_fraction"
    )

    @model_validator(mode="after")
    def _consistent(self) -> ResponseTokens:
        if self.mean is not None and self.mean > self.max:
            raise ValueError(f"mean ({self.mean}) cannot exceed max ({self.max})")
        if self.histogram is not None:
            if not self.histogram:
                raise ValueError("histogram needs at least one (tokens, weight) pair")
            for tokens, weight in self.histogram:
                if not 1 <= tokens <= self.max or weight < 0:
                    raise ValueError(
                        f"histogram entries need 1 <= tokens <= max and weight >= 0, got ({tokens}, {weight})")
        return self


def engine_layout(tp: int, ep: int, dp: int, dp_attention: bool) -> str:
    """An engine's shape as the commands print it: TP8/EP8/DP1, `dp-attention` when on."""
    return f"TP{tp}/EP{ep}/DP{dp}" + (" dp-attention" if dp_attention else "")


class RolloutSpec(_Strict):
    precision: Precision = "fp8"
    kv_cache_dtype: Literal["bf16", "fp8"] | None = None
    engine_gpus: int = Field(..., ge=1, le=MAX_PARALLEL_DEGREE, description="GPUs per SGLang engine")
    tp: int = Field(1, ge=1, le=MAX_PARALLEL_DEGREE)
    ep: int = Field(1, ge=1, le=MAX_PARALLEL_DEGREE)
    dp: int = Field(1, ge=1, le=MAX_PARALLEL_DEGREE)
    dp_attention: bool = False
    max_running_requests: int | None = Field(None, ge=1, le=MAX_RESPONSES_PER_STEP)
    mem_fraction_static: float = Field(0.7, gt=0.0, lt=1.0, description="SGLang --mem-fraction-static")
    max_total_tokens: int | None = Field(None, ge=1, description="SGLang --max-total-tokens (KV pool cap)")


class LogProbsSpec(_Strict):
    ref_model: bool = False


class WeightUpdateSpec(_Strict):
    mode: Literal["broadcast", "ipc", "disk", "p2p", "reshard"] = "broadcast"
    bucket_mb: float = Field(256, gt=0)


class RLSpec(_Strict):
    algorithm: Literal["grpo", "ppo"] = "grpo"
    placement: Literal["colocated", "disaggregated"]
    actor_gpus: int = Field(..., ge=1, le=MAX_GPUS)
    rollout_gpus: int = Field(..., ge=1, le=MAX_GPUS)
    async_: bool = Field(False, alias="async")
    off_policy_steps: int = Field(1, ge=1, le=64, description=(
        "async only: how many policy versions a trajectory may lag (NeMo-RL max_trajectory_age_steps, Miles "
        "--max-weight-staleness): the engines keep that many steps' requests in flight, so one step's rollout "
        "shares the engines with the next ones' (sim/rollout.py); 1: rollout of step k+1 overlaps training of k"))
    prompts_per_step: int = Field(..., ge=1, le=MAX_RESPONSES_PER_STEP)
    samples_per_prompt: int = Field(..., ge=1, le=MAX_RESPONSES_PER_STEP)
    prompt_tokens_mean: float = Field(..., gt=0, le=MAX_SEQ_LEN)
    response_tokens: ResponseTokens
    rollout: RolloutSpec
    log_probs: LogProbsSpec = LogProbsSpec()
    weight_update: WeightUpdateSpec = WeightUpdateSpec()
    reward_host_s: float = Field(1.0e-3, ge=0, description="host seconds of the reward function per sample (a "
                                 "rule-based math verifier: ~1 ms; a reward model's forward is not priced)")
    checkpoint_every: int = Field(0, ge=0, description="steps between checkpoints (weights + optimizer state to "
                                  "the shared filesystem), its time spread over them; 0: none")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @model_validator(mode="after")
    def _bounded_step(self) -> RLSpec:
        if self.prompts_per_step * self.samples_per_prompt > MAX_RESPONSES_PER_STEP:
            raise ValueError(f"prompts_per_step x samples_per_prompt = {self.responses_per_step:,} responses a step"
                             f": at most {MAX_RESPONSES_PER_STEP:,} are priced (docs/reliability.md)")
        if self.off_policy_steps > 1 and not self.async_:
            raise ValueError(f"off_policy_steps {self.off_policy_steps} needs async: true (a synchronous step "
                             "generates with the weights it trains); set async: true or off_policy_steps: 1")
        if self.responses_per_step * self.off_policy_steps > MAX_RESPONSES_PER_STEP:
            raise ValueError(f"{self.responses_per_step:,} responses a step x off_policy_steps "
                             f"{self.off_policy_steps} are in flight at once: at most {MAX_RESPONSES_PER_STEP:,} are "
                             "priced (docs/reliability.md)")
        return self

    @property
    def responses_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def steps_in_flight(self) -> int:
        """Steps whose requests the engines hold at once: `off_policy_steps` when async, else 1."""
        return self.off_policy_steps if self.async_ else 1
