"""The sweep file: what stays fixed (hardware, model, the job) and which layout values the sweep may try."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from perfmodel.errors import InputError
from perfmodel.inputs.bounds import MAX_GPUS, MAX_PARALLEL_DEGREE
from perfmodel.inputs.hardware_file import HardwareOptions
from perfmodel.inputs.job import MoEDispatcher, Recompute, RecomputeModule, ScheduleName
from perfmodel.inputs.loading import parse, read_mapping
from perfmodel.inputs.plan import ExecutorSection
from perfmodel.inputs.run import ModelRef
from perfmodel.schedules import default_schedule

# one degree a sweep tries (TP, PP, EP, an engine's GPUs, ...): what a layout may hold
Degree = Annotated[int, Field(ge=1, le=MAX_PARALLEL_DEGREE)]


def recompute_choice(choice: str) -> tuple[str, tuple[str, ...] | None]:
    """A sweep's recompute value as (train.recompute, train.recompute_modules): none | full | selective (megatron's
    default core_attn) | selective:m1+m2 (those submodules, Megatron --recompute-modules)."""
    mode, sep, modules = choice.partition(":")
    if mode not in get_args(Recompute) or (sep and (mode != "selective" or not modules)):
        raise ValueError(f"{choice!r}: none, full, selective or selective:<module>+<module> (modules: "
                         f"{', '.join(get_args(RecomputeModule))})")
    names = tuple(modules.split("+")) if modules else None
    unknown = [x for x in names or () if x not in get_args(RecomputeModule)]
    if unknown:
        raise ValueError(f"{choice!r}: unknown module {unknown[0]!r}; known: {', '.join(get_args(RecomputeModule))}")
    return mode, names


def _recompute_value(choice: str) -> str:
    recompute_choice(choice)
    return choice


RecomputeChoice = Annotated[str, AfterValidator(_recompute_value)]
Objective = Literal["step_time", "p90_step_time", "tokens_per_gpu", "cost"]


class SweepSpace(BaseModel):
    """Values tried for each knob. The defaults are what RL recipes for large MoE models vary by hand (Miles DSV4
    recipes: TP/PP/EP, full or selective recompute, optimizer offload, engine size and EP, placement); context
    parallelism, interleaving and DP-attention are off by default (short RL contexts; widen them in the file)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    tp: tuple[Degree, ...] = (1, 2, 4, 8)
    pp: tuple[Degree, ...] = (1, 2, 4, 8, 16)
    cp: tuple[Degree, ...] = (1,)
    ep: tuple[Degree, ...] = (1, 2, 4, 8, 16, 32, 64)
    etp: tuple[Degree, ...] = (1,)
    vpp: tuple[Degree, ...] = (1,)
    # none | full | selective (megatron's default, core_attn) | selective:mla_up_proj+moe_act (those submodules)
    recompute: tuple[RecomputeChoice, ...] = ("full", "selective")
    # MoE token dispatch of the trainer (tried only where EP > 1): Miles' DSV4 recipes use Megatron's alltoall;
    # add "deepep" to compare a DeepEP-style dispatcher (Primus Turbo DeepEP, MORI, Megatron flex), "hybridep" for
    # NVIDIA's Hybrid-EP (NVIDIA GPUs only)
    moe_dispatcher: tuple[MoEDispatcher, ...] = ("alltoall",)
    # schedules tried at vpp 1 (the default one also at every vpp > 1, as the default multi-chunk schedule; a
    # multi-chunk one, combined-1f1b, at vpp > 1 too)
    schedule: tuple[ScheduleName, ...] = (default_schedule(1),)
    optimizer_offload_fraction: tuple[Annotated[float, Field(ge=0.0, le=1.0)], ...] = (0.0, 1.0)
    placement: tuple[Literal["colocated", "disaggregated"], ...] = ("colocated", "disaggregated")
    async_: tuple[bool, ...] = Field((False, True), alias="async")
    # share of the nodes that roll out (disaggregated)
    rollout_fraction: tuple[Annotated[float, Field(gt=0.0, lt=1.0)], ...] = (0.25, 0.5, 0.75)
    # how disaggregated plans move the weights (colocated ones: CUDA/HIP IPC): Miles broadcasts by default; add p2p
    # to price its RDMA P2P transfer (--update-weight-transfer-mode p2p) beside it, reshard for NeMo-RL's nccl_reshard
    weight_update_disaggregated: tuple[Literal["broadcast", "p2p", "reshard"], ...] = ("broadcast",)
    engine_gpus: tuple[Degree, ...] = (4, 8, 16)
    engine_ep: tuple[Literal["none", "full"], ...] = ("none", "full")  # SGLang ep 1 or = engine size
    dp_attention: tuple[bool, ...] = (False,)


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)
    hardware: str
    model: ModelRef
    stack: str | None = Field(None, description="software stack every candidate runs on: framework[@release]")
    stack_options: dict[str, Any] | None = Field(None, description="facts stated about the stack")
    hardware_options: HardwareOptions | None = Field(
        None, description="facts measured about the hardware, as in a case (the local executor's host probe): every "
        "candidate carries them")
    nodes: tuple[Annotated[int, Field(ge=1, le=MAX_GPUS)], ...] = Field(..., min_length=1,
                                                                        description="node counts to try")
    job: dict[str, Any] = Field(..., description="kind, train (without layout) and rl (without placement/GPUs)")
    space: SweepSpace = SweepSpace()
    objective: Objective = "step_time"
    target_step_time_s: float | None = Field(None, gt=0, description="objective cost: cheapest plan under this")
    gpu_hour_cost: float = Field(1.0, gt=0, description="price of one GPU-hour, for the cost objective")
    length_samples: int = Field(10, ge=2, le=100, description="objective p90_step_time: response-length draws per "
                                "plan (the rollout's seed), whose steps' 90th percentile ranks it")
    executor: ExecutorSection | None = Field(None, description="the launch every plan file carries (`executor` "
                                             "backend and options, as in a plan); default: the Miles backend")

    @field_validator("job")
    @classmethod
    def _job_shape(cls, job: dict[str, Any]) -> dict[str, Any]:
        """The parts every candidate copies and fills in are mappings (their values are checked per candidate)."""
        if not isinstance(job.get("train"), dict):
            raise ValueError("job.train: a mapping of the training job (precision, seq_len, global_batch, ...)")
        rl = job.get("rl", {})
        if not isinstance(rl, dict):
            raise ValueError("job.rl: a mapping of the RL job (prompts_per_step, rollout, ...)")
        for part in ("rollout", "weight_update", "log_probs", "response_tokens"):
            if part in rl and not isinstance(rl[part], dict):
                raise ValueError(f"job.rl.{part}: a mapping")
        if not isinstance(job.get("kind", "rl"), str):
            raise ValueError("job.kind: rl or pretrain")
        return job

    @model_validator(mode="after")
    def _positive_nodes(self) -> SweepSpec:
        if any(n < 1 for n in self.nodes):
            raise ValueError("node counts must be >= 1")
        if self.objective == "cost" and self.target_step_time_s is None:
            raise ValueError("objective cost needs target_step_time_s")
        return self


def load_sweep_spec(path: str | Path) -> SweepSpec:
    return parse(SweepSpec, read_mapping(path), str(path))


def default_sweep_path() -> Path:
    return Path(__file__).resolve().parent.parent / "defaults" / "seed-sweep.yaml"


def parse_nodes(text: str) -> tuple[int, ...]:
    """SweepSpec.nodes from text: '4-64' (the powers of two from 4 to 64), '4,8,16' or '8'."""
    text = text.strip()
    m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", text)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo < 1 or hi < lo or hi > MAX_GPUS:
            raise InputError("--nodes", "", f"bad range {text!r}; use e.g. 4-64")
        out, n = [], lo
        while n <= hi:
            out.append(n)
            n *= 2
        return tuple(out)
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise InputError("--nodes", "", f"{text!r} is not a node count list; use e.g. 4-64 or 4,8,16") from None
    if any(not 1 <= v <= MAX_GPUS for v in vals) or len(vals) > 64:
        raise InputError("--nodes", "", f"give up to 64 node counts from 1 to {MAX_GPUS:,}")
    return vals
