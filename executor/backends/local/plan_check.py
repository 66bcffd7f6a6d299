"""Everything `executor launch` checks BEFORE starting anything: each problem is one `InputError` (exit 2).

- the plan file itself (perfmodel.inputs.plan.load_plan: unknown keys, types);
- the backend's options (LocalOptions, extra="forbid");
- the model (an inline hf_config of an architecture the local backend runs);
- the layout against this machine: processes <= CPU cores (no GPU) or GPUs, tp == 1 / cp == 1 on a CPU,
  pp divides the layers, ep divides the experts and the data-parallel size, batch sizes divide evenly;
- the rollout side: one engine without TP/EP/DP, a known weight-update mode, a bounded KV pool;
- the software: SGLang and megatron-core importable.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from perfmodel.errors import InputError
from perfmodel.inputs.loading import parse
from perfmodel.inputs.plan import Plan, load_plan

if TYPE_CHECKING:
    from executor.backends.local.tiny_model import TinyArch
    from perfmodel.inputs.job import RLSpec


@dataclass(frozen=True)
class Machine:
    cpu_cores: int
    gpus: int

    @classmethod
    def this(cls) -> Machine:
        gpus = 0
        try:
            import torch

            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except ImportError:
            pass
        return cls(cpu_cores=os.cpu_count() or 1, gpus=gpus)


@dataclass(frozen=True)
class CheckedPlan:
    plan: Plan
    path: Path
    processes: int
    dp: int


def check_plan(path: str | Path, machine: Machine | None = None, need_software: bool = True) -> CheckedPlan:
    # Each helper raises the first problem it finds, in this order: a plan with several problems always reports
    # the same one.
    src = str(path)
    plan, rl, arch = _check_plan_and_model(src, path)
    machine = machine or Machine.this()  # probed only once the plan itself is valid (this imports torch)
    on_cpu = machine.gpus == 0
    processes = _check_processes(src, plan, rl, machine, on_cpu)
    dp = _check_layout(src, plan, arch, processes, on_cpu)
    _check_batches(src, plan, rl, arch, dp)
    _check_rollout(src, rl, on_cpu)
    if need_software:
        _check_software(src)
    return CheckedPlan(plan=plan, path=Path(path), processes=processes, dp=dp)


def _check_plan_and_model(src: str, path: str | Path) -> tuple[Plan, RLSpec, TinyArch]:
    """The plan file, the backend and its options, a GRPO job and a model the local backend builds."""
    plan = load_plan(path)
    if plan.executor.backend != "local":
        raise InputError(src, "executor.backend", f"'{plan.executor.backend}' plans are not launched here; "
                         "this executor runs backend: local")
    if _missing("torch"):  # the model below is built with torch: say what to install, not a traceback
        raise InputError(src, "executor.backend", "local needs torch: pip install 'perfmodel[exec]'")
    from executor.backends.local.options import LocalOptions
    from executor.backends.local.tiny_model import TinyArch

    options = parse(LocalOptions, plan.executor.options, src, prefix="executor.options")
    _ = options
    if plan.kind != "rl" or plan.rl is None:
        raise InputError(src, "kind", "the local backend runs GRPO: needs kind: rl with an rl: section")
    if plan.model.hf_config is None:
        raise InputError(src, "model", "the local backend needs an inline model.hf_config (a tiny Llama, Mixtral or "
                         "Dsv4Mini)")
    try:
        arch = TinyArch.from_hf_config(plan.model.hf_config)
    except ValueError as err:
        field, _, msg = str(err).partition(": ")
        raise InputError(src, f"model.hf_config.{field}", msg) from None
    return plan, plan.rl, arch


def _check_processes(src: str, plan: Plan, rl: RLSpec, machine: Machine, on_cpu: bool) -> int:
    """Colocated placement on this machine's hardware: returns the number of trainer processes."""
    processes = rl.actor_gpus if rl.placement == "disaggregated" else plan.gpus
    if rl.placement != "colocated":
        raise InputError(src, "rl.placement", "the local backend runs colocated (trainer and engine share the machine)")
    if on_cpu and not plan.hardware.startswith("cpu"):
        raise InputError(src, "hardware", f"this machine has no GPU, the plan is for '{plan.hardware}'; "
                         "use a CPU profile such as cpu-local")
    limit = machine.cpu_cores if on_cpu else machine.gpus
    what = "CPU cores" if on_cpu else "GPUs"
    if processes > limit:
        raise InputError(src, "gpus", f"{processes} trainer processes but this machine has {limit} {what}")
    if rl.actor_gpus != processes:
        raise InputError(src, "rl.actor_gpus", f"colocated: must equal gpus ({processes}), got {rl.actor_gpus}")
    return processes


def _check_layout(src: str, plan: Plan, arch: TinyArch, processes: int, on_cpu: bool) -> int:
    """The trainer's parallel layout and schedule against the processes and the model: returns dp."""
    lay = plan.train.layout
    if on_cpu and lay.tp != 1:
        raise InputError(src, "train.layout.tp", f"tensor parallelism needs GPUs; use tp: 1 on a CPU (got {lay.tp})")
    for name in ("cp", "etp", "vpp"):
        if getattr(lay, name) != 1:
            raise InputError(src, f"train.layout.{name}", f"the local backend supports {name}: 1 only")
    if processes % (lay.tp * lay.pp):
        raise InputError(src, "train.layout.pp", f"tp x pp = {lay.tp * lay.pp} does not divide {processes} processes")
    dp = processes // (lay.tp * lay.pp)
    if lay.dp is not None and lay.dp != dp:
        raise InputError(src, "train.layout.dp", f"{processes} processes / (tp x pp) gives dp {dp}, not {lay.dp}")
    if arch.num_layers % lay.pp:
        raise InputError(src, "train.layout.pp", f"pp {lay.pp} does not divide num_hidden_layers {arch.num_layers}")
    if arch.is_dsv4mini and lay.pp > 1:
        raise InputError(src, "train.layout.pp", "Dsv4MiniForCausalLM keeps its hyper-connection streams on one "
                         "pipeline stage: use pp: 1")
    if lay.ep > 1:
        if not arch.is_moe:
            raise InputError(src, "train.layout.ep", "expert parallelism needs an MoE model (MixtralForCausalLM)")
        if arch.num_experts % lay.ep or (dp * lay.tp) % lay.ep:
            raise InputError(src, "train.layout.ep", f"ep {lay.ep} must divide the experts ({arch.num_experts}) "
                             f"and tp x dp ({dp * lay.tp})")
    if plan.train.schedule not in (None, "1f1b"):
        raise InputError(src, "train.schedule", "the local backend runs megatron's 1f1b schedule")
    if plan.train.recompute != "none":  # the trainer sets none: priced with it, it would run without
        raise InputError(src, "train.recompute", "the local backend runs no activation recompute: use recompute: none")
    if plan.train.activation_offload_layers:  # priced with it, the local trainer would run without
        raise InputError(src, "train.activation_offload_layers", "the local backend offloads no activations: use "
                         "activation_offload_layers: 0")
    if plan.train.moe_dispatcher != "alltoall":
        raise InputError(src, "train.moe_dispatcher", "the local backend runs megatron's alltoall dispatcher "
                         "(DeepEP needs GPUs): set moe_dispatcher: alltoall")
    return dp


def _check_batches(src: str, plan: Plan, rl: RLSpec, arch: TinyArch, dp: int) -> None:
    """Batch sizes split evenly over optimizer steps, DP ranks and micro-batches; sequences fit the model."""
    samples = rl.prompts_per_step * rl.samples_per_prompt
    if samples % plan.train.global_batch:
        raise InputError(src, "train.global_batch", f"must divide prompts_per_step x samples_per_prompt ({samples})")
    per_rank = plan.train.global_batch // dp if plan.train.global_batch % dp == 0 else None
    if per_rank is None or per_rank % plan.train.micro_batch:
        raise InputError(src, "train.micro_batch", f"global_batch / dp ({plan.train.global_batch}/{dp}) must be a "
                         f"multiple of micro_batch ({plan.train.micro_batch})")
    if rl.samples_per_prompt < 2:
        raise InputError(src, "rl.samples_per_prompt", "GRPO needs at least 2 samples per prompt")
    need = 8 + rl.response_tokens.max  # prompt (<= 5 chars + <s>) and response
    if plan.train.seq_len < need:
        raise InputError(src, "train.seq_len", f"needs at least {need} (prompt + response_tokens.max)")
    if arch.max_position_embeddings < plan.train.seq_len:
        raise InputError(src, "model.hf_config.max_position_embeddings",
                         f"must be >= train.seq_len ({plan.train.seq_len})")


def _check_rollout(src: str, rl: RLSpec, on_cpu: bool) -> None:
    """One engine beside the trainer, a bounded KV pool, a colocated weight update, synchronous GRPO."""
    ro = rl.rollout
    if (ro.tp, ro.ep, ro.dp, ro.engine_gpus) != (1, 1, 1, 1) and on_cpu:
        raise InputError(src, "rl.rollout", "on a CPU the engine runs alone: engine_gpus, tp, ep, dp must be 1")
    if ro.max_total_tokens is None:
        raise InputError(src, "rl.rollout.max_total_tokens",
                         "bound the KV pool (SGLang otherwise takes most of the RAM)")
    if ro.kv_cache_dtype == "fp8" and on_cpu:
        raise InputError(src, "rl.rollout.kv_cache_dtype", "an FP8 KV cache needs a GPU; use bf16 or leave it out")
    if rl.weight_update.mode == "broadcast":
        raise InputError(src, "rl.weight_update.mode", "the local backend is colocated: use ipc "
                         "(update_weights_from_tensor) or disk (update_weights_from_disk)")
    if rl.async_:
        raise InputError(src, "rl.async", "the local backend runs synchronous GRPO")


def _check_software(src: str) -> None:
    for module, pkg in (("sglang", "sglang==0.5.23"), ("megatron.core", "megatron-core==0.16.1")):
        if _missing(module):
            raise InputError(src, "executor.backend", f"local needs {pkg}: pip install 'perfmodel[exec]'")


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True
