"""The `miles` backend: a plan file -> the real Miles launch (Ray cluster, `ray job submit`, `train.py` /
`train_async.py` arguments, runtime env) and, when submitted, the per-step `perf/*` timings read back from the job log.

Public API
----------
- `MilesOptions`: the backend options (`plan.executor.options`), validated with extra="forbid".
- `build_miles_launch(plan, plan_path="", run_id=None) -> MilesLaunch`: pure; no I/O beyond the hardware profile and
  model catalogue. Every plan field the launch depends on is mapped here; the rules are in `_train_args`.
- `render_dry_run(launch) -> str`: the shell commands (ray start on head/workers, `ray job submit ...`) and the runtime
  env, as text a person can paste.
- `run_miles(plan, plan_path, *, dry_run, ray_address, store, ...) -> MilesRunResult`: what `executor launch --plan`
  calls for `executor.backend: miles`. Dry run: prints `render_dry_run`. Otherwise: submits with the Ray Job SDK,
  follows the job log, parses `perf/*` lines (executor.backends.miles_logs) into per-step measurement dicts and hands
  each to `store.add_step(...)` as it completes.

Sources for the mapping: the AMD async launcher of radixark/miles PR #1300 (`scripts/amd/run_deepseek_v4.py` at
a8684732f), Miles' `miles/utils/arguments.py` and `miles/backends/sglang_utils/arguments.py` (flag names and
constraints, HEAD 31f1ca961), `command_utils.execute_train` (ray job submit and runtime env).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from executor.backends import miles_recipes as R
from executor.backends.miles_logs import MilesLogParser, parse_miles_log  # noqa: F401  (re-exported)
from perfmodel.errors import InputError
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.loading import first_error
from perfmodel.inputs.plan import Plan
from perfmodel.inputs.scenario import Scenario, build_scenario

__all__ = [
    "MilesLaunch", "MilesLogParser", "MilesOptions", "MilesRunResult", "ModelArgsRef", "StepSink",
    "build_miles_launch", "default_run_id", "parse_miles_log", "parse_miles_options", "pipeline_split_args",
    "render_dry_run", "run_miles",
]

MODEL_ARGS_PLACEHOLDER = "${MODEL_ARGS[@]}"
FULLY_ASYNC_ROLLOUT_FUNCTION = "fully_async_rollout.generate_rollout_fully_async"  # examples/fully_async
DYNAMIC_SAMPLING_NONZERO_STD = "miles.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"
DEFAULT_RAY_ADDRESS = "http://127.0.0.1:8265"
MIB = 1024 * 1024


# ---------------------------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------------------------


class MilesOptions(BaseModel):
    """`executor.options` of a plan whose backend is `miles`. Paths are paths on the cluster nodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Where Miles, Megatron and the checkpoints are (inside the training image).
    miles_root: str = Field("/root/miles", description="Miles checkout on every node (rlsys/miles ROCm image: /workspace/miles)")
    megatron_path: str = Field("/root/Megatron-LM", description="Megatron-LM checkout, put on PYTHONPATH")
    python: str = Field("python3", description="interpreter of the job's entry point")
    model_dir: str = Field("/root/models", description="folder of the default checkpoint paths")
    data_dir: str = Field("/root/datasets", description="folder of the default data paths")
    model_type: str | None = Field(None, description="scripts/models/<model_type>.{py,sh}; default from the model id")
    model_args: list[str] | None = Field(None, description="explicit Megatron MODEL_ARGS (skips scripts/models)")
    model_args_format: Literal["auto", "py", "sh"] = Field(
        "auto", description="py: model_args_utils.py (Miles >= Aug 2026); sh: source scripts/models/<type>.sh (PR #1300)")
    hf_checkpoint: str | None = Field(None, description="HF checkpoint (tokenizer, config, rollout weights)")
    fp8_hf_checkpoint: str | None = Field(None, description="FP8 HF checkpoint served when rl.rollout.precision is fp8")
    ref_load: str | None = Field(None, description="Megatron torch_dist checkpoint of the initial actor/reference")
    load: str | None = None
    save: str | None = None
    save_interval: int | None = Field(None, ge=1)

    # Task and data
    prompt_data: str | None = Field(None, description="default: <data_dir>/dapo-math-17k/dapo-math-17k.jsonl")
    input_key: str = "prompt"
    label_key: str = "label"
    rm_type: str = "math"
    apply_chat_template: bool = True
    apply_chat_template_kwargs: dict[str, Any] | None = None
    rollout_shuffle: bool = True
    rollout_temperature: float = Field(0.8, ge=0.0)
    balance_data: bool = True
    log_passrate: bool = True
    over_sampling_batch_size: int | None = Field(None, ge=1)
    dynamic_sampling_filter_path: str | None = None
    num_rollout: int = Field(100, ge=1, description="rollout steps of the run")

    # Evaluation
    eval_interval: int | None = Field(None, ge=1)
    eval_prompt_data: dict[str, str] = Field(default_factory=dict, description="name -> path")
    n_samples_per_eval_prompt: int = Field(1, ge=1)
    eval_max_response_len: int | None = Field(None, ge=1)
    eval_top_p: float | None = Field(None, gt=0.0, le=1.0)
    eval_function_path: str | None = None

    # Algorithm (GRPO; the DSV4 recipes' values)
    use_tis: bool = Field(False, description="truncated importance sampling (off-policy correction)")
    eps_clip: float = Field(0.2, ge=0.0)
    eps_clip_high: float = Field(0.28, ge=0.0)
    kl_loss_coef: float = Field(0.0, ge=0.0)
    kl_loss_type: str = "low_var_kl"
    entropy_coef: float = Field(0.0, ge=0.0)
    lr: float = Field(1e-6, gt=0.0)
    lr_decay_style: str = "constant"
    weight_decay: float = Field(0.1, ge=0.0)
    adam_beta1: float = Field(0.9, gt=0.0, lt=1.0)
    adam_beta2: float = Field(0.98, gt=0.0, lt=1.0)

    # Runtime behaviour
    fully_async: bool | None = Field(None, description="fully-async rollout function; default: rl.async")
    pause_generation_mode: Literal["in_place", "retract", "abort"] = "in_place"
    deterministic: bool = True
    rollout_routing_replay: bool = Field(False, description="R3: --use-rollout-routing-replay --use-miles-router")
    qkv_format: Literal["bshd", "thd"] | None = Field(None, description="default: the model recipe's")
    dynamic_batch_size: bool | None = Field(None, description="default: on when max_tokens_per_gpu is set and qkv is not bshd")
    log_probs_max_tokens_per_gpu: int | None = Field(None, ge=1, description="default: train.max_tokens_per_gpu")
    train_memory_margin_bytes: int | None = Field(None, ge=0)
    update_weight_disk_dir: str | None = None
    update_weight_local_checkpoint_dir: str | None = None
    nccl_debug: bool = False
    wandb_project: str | None = None
    wandb_group: str | None = None
    wandb_team: str | None = None
    extra_args: list[str] = Field(default_factory=list, description="appended to the train arguments")
    extra_env: dict[str, str] = Field(default_factory=dict, description="added to (and overriding) the runtime env")

    # Ray
    ray_address: str | None = Field(None, description=f"Ray dashboard address (default $RAY_ADDRESS or {DEFAULT_RAY_ADDRESS})")
    head_ip: str | None = Field(None, description="head node IP for the ray start commands and MASTER_ADDR")
    ray_port: int = Field(6379, ge=1, le=65535)
    dashboard_port: int = Field(8265, ge=1, le=65535)
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")

    @field_validator("extra_args", mode="before")
    @classmethod
    def _split_extra_args(cls, v: Any) -> Any:
        return shlex.split(v) if isinstance(v, str) else v

    @field_validator("extra_env", mode="before")
    @classmethod
    def _env_strings(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {str(k): (json.dumps(x) if isinstance(x, bool) else str(x)) for k, x in v.items()}
        return v


def parse_miles_options(options: Mapping[str, Any], plan_path: str = "") -> MilesOptions:
    """Validate `executor.options`; a bad or unknown key -> InputError naming `executor.options.<key>`."""
    try:
        return MilesOptions.model_validate(dict(options))
    except ValidationError as err:
        e = err.errors(include_url=False)[0]
        if e.get("type") == "extra_forbidden":
            key = ".".join(str(x) for x in e.get("loc", ()))
            valid = ", ".join(MilesOptions.model_fields)
            raise InputError(plan_path, f"executor.options.{key}",
                             f"unknown option of the miles backend; valid: {valid}") from None
        raise first_error(err, plan_path, prefix="executor.options") from None


# ---------------------------------------------------------------------------------------------------------------
# The launch
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelArgsRef:
    """Where the Megatron MODEL_ARGS of the model come from (they are long: resolved on the submitting node)."""

    model_type: str
    miles_root: str
    python: str = "python3"
    fmt: Literal["auto", "py", "sh", "explicit"] = "auto"
    explicit: tuple[str, ...] | None = None

    @property
    def py_script(self) -> str:
        return f"{self.miles_root}/scripts/models/{self.model_type}.py"

    @property
    def sh_script(self) -> str:
        return f"{self.miles_root}/scripts/models/{self.model_type}.sh"

    @property
    def py_command(self) -> list[str]:
        return [self.python, f"{self.miles_root}/miles/utils/external_utils/model_args_utils.py", self.model_type]

    def shell_setup(self) -> str:
        """Shell lines that define the bash array MODEL_ARGS."""
        if self.explicit is not None:
            return "MODEL_ARGS=(" + " ".join(shlex.quote(a) for a in self.explicit) + ")"
        py = f"read -ra MODEL_ARGS <<< \"$({shlex.join(self.py_command)})\""
        sh = f"source {shlex.quote(self.sh_script)}"
        if self.fmt == "py":
            return py
        if self.fmt == "sh":
            return sh
        return (f"if [ -f {shlex.quote(self.py_script)} ]; then {py}; "
                f"else {sh}; fi   # scripts/models/{self.model_type}.py (Miles HEAD) or .sh (PR #1300)")

    def resolve(self, run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                exists: Callable[[str], bool] = os.path.exists, source: str = "") -> list[str]:
        """The MODEL_ARGS tokens, computed on this (the submitting) machine."""
        if self.explicit is not None:
            return list(self.explicit)
        fmt = self.fmt
        if fmt == "auto":
            fmt = "py" if exists(self.py_script) else "sh" if exists(self.sh_script) else ""
        if not fmt:
            raise InputError(source, "executor.options.miles_root",
                             f"no {self.py_script} or {self.sh_script} on this machine; run from a node with the Miles "
                             "checkout or give executor.options.model_args")
        if fmt == "py":
            proc = run(self.py_command, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise InputError(source, "executor.options.model_type",
                                 f"{shlex.join(self.py_command)} failed: {(proc.stderr or '').strip()[-300:]}")
            return proc.stdout.split()
        cmd = ["bash", "-c", 'source "$1" >/dev/null && printf "%s\\0" "${MODEL_ARGS[@]}"', "_", self.sh_script]
        proc = run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise InputError(source, "executor.options.model_type",
                             f"sourcing {self.sh_script} failed: {(proc.stderr or '').strip()[-300:]}")
        return [t for t in proc.stdout.split("\0") if t]


@dataclass(frozen=True, slots=True)
class MilesLaunch:
    """Everything needed to run one plan on a Ray cluster with Miles."""

    plan_id: str
    run_id: str
    entry_script: str  # <miles_root>/train.py or train_async.py
    python: str
    train_args: tuple[str, ...]  # everything after MODEL_ARGS
    runtime_env_vars: dict[str, str]  # the runtime env's env_vars (before pass-through)
    passthrough_env: tuple[str, ...]  # copied from the submitting shell when set
    model_args: ModelArgsRef
    ray_head: tuple[str, ...]
    ray_worker: tuple[str, ...]
    num_nodes: int
    gpus_per_node: int
    ray_address: str
    num_steps_per_rollout: int
    notes: tuple[str, ...] = ()

    @property
    def entry_point(self) -> str:
        return Path(self.entry_script).name

    @property
    def runtime_env(self) -> dict[str, Any]:
        return {"env_vars": dict(self.runtime_env_vars)}

    def entrypoint_argv(self, model_args: Sequence[str] | None = None) -> list[str]:
        margs = [MODEL_ARGS_PLACEHOLDER] if model_args is None else list(model_args)
        return [self.python, self.entry_script, *margs, *self.train_args]

    @property
    def submit_argv(self) -> tuple[str, ...]:
        """`ray job submit` as Miles' execute_train runs it (MODEL_ARGS left as the bash array reference)."""
        return ("ray", "job", "submit", "--address", self.ray_address, "--submission-id", self.run_id,
                "--runtime-env-json", json.dumps(self.runtime_env, sort_keys=True), "--",
                *self.entrypoint_argv())

    def resolved_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The runtime env vars with the pass-through names taken from `environ` (MASTER_ADDR defaults to 127.0.0.1)."""
        env = dict(self.runtime_env_vars)
        for name in self.passthrough_env:
            if name not in env and environ.get(name):
                env[name] = environ[name]
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        return env

    def values(self, flag: str) -> list[str]:
        """The values following each occurrence of `flag` in the train arguments (for tests and reports)."""
        out: list[str] = []
        args = self.train_args
        for i, a in enumerate(args):
            if a == flag:
                j = i + 1
                while j < len(args) and not args[j].startswith("--"):
                    out.append(args[j])
                    j += 1
        return out

    def has(self, flag: str) -> bool:
        return flag in self.train_args


def _fmt(x: float | int) -> str:
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return str(x)
    return repr(float(x))


def _fail(source: str, field_: str, message: str) -> InputError:
    return InputError(source, field_, message)


def pipeline_split_args(stage_layers: Sequence[int], pp: int, vpp: int) -> tuple[list[str], str]:
    """Megatron arguments that reproduce `stage_layers` (decoder layers per virtual stage, model order).

    vpp == 1: nothing for an even split; else `--decoder-first-pipeline-num-layers` and/or
    `--decoder-last-pipeline-num-layers` (Megatron spreads the rest evenly over the other stages), choosing the fewest
    flags that give exactly this split. vpp > 1: `--num-virtual-stages-per-pipeline-rank` for an even split. Any split
    these cannot express becomes `--pipeline-model-parallel-layout` (E = embedding, t = decoder layer, L = loss,
    | = next virtual stage in model order)."""
    s = list(stage_layers)
    if len(s) != pp * vpp:
        raise ValueError(f"{len(s)} stages for pp x vpp = {pp * vpp}")
    if pp == 1 and vpp == 1:
        return [], "no pipeline parallelism"
    even = len(set(s)) == 1
    if vpp == 1:
        if even:
            return [], f"even split, {s[0]} layers per stage"
        first, last, middle = s[0], s[-1], s[1:-1]
        if len(set(s[:-1])) == 1:
            return ["--decoder-last-pipeline-num-layers", str(last)], f"split {s}: last stage {last}"
        if len(set(s[1:])) == 1:
            return ["--decoder-first-pipeline-num-layers", str(first)], f"split {s}: first stage {first}"
        if len(set(middle)) <= 1:
            return (["--decoder-first-pipeline-num-layers", str(first), "--decoder-last-pipeline-num-layers", str(last)],
                    f"split {s}: first {first}, last {last}")
    elif even:
        return ["--num-virtual-stages-per-pipeline-rank", str(vpp)], f"even split, {vpp} virtual stages per rank"
    layout = "|".join(("E" if i == 0 else "") + "t" * n + ("L" if i == len(s) - 1 else "") for i, n in enumerate(s))
    return ["--pipeline-model-parallel-layout", layout], f"split {s} as an explicit pipeline layout"


def _nodes(gpus: int, per_node: int, source: str, field_: str, what: str) -> tuple[int, int]:
    if gpus <= per_node:
        return 1, gpus
    if gpus % per_node:
        raise _fail(source, field_, f"{what} ({gpus}) must be a multiple of the {per_node} GPUs per node when it spans "
                    "nodes (Miles places actors as nodes x GPUs per node)")
    return gpus // per_node, per_node


def build_miles_launch(plan: Plan, plan_path: str = "", run_id: str | None = None) -> MilesLaunch:
    """Map a plan to its Miles launch. Raises InputError (naming the plan field or option) for what Miles cannot run."""
    src = plan_path
    if plan.executor.backend != "miles":
        raise _fail(src, "executor.backend", f"is {plan.executor.backend!r}; this is the miles backend")
    opts = parse_miles_options(plan.executor.options, src)
    if plan.kind != "rl" or plan.rl is None:
        raise _fail(src, "kind", "the miles backend runs RL plans (kind: rl)")
    sc = build_scenario(plan, source=src)
    recipe = R.recipe_for(plan.model.id, opts.model_type)
    if recipe is None:
        raise _fail(src, "executor.options.model_type",
                    f"no Miles model recipe for {plan.model.label()!r}; give the scripts/models name of the model "
                    f"(known ids: {', '.join(sorted(R.RECIPES))})")
    rid = run_id or opts.run_id or plan.id
    args, env, passthrough, notes, steps_per_rollout = _train_args(plan, sc, opts, recipe, src, rid)

    hw = sc.hardware
    gpn = hw.gpus_per_node
    num_nodes = max(1, math.ceil(plan.gpus / gpn))
    head = opts.head_ip or "$HEAD_IP"
    ray_head = ("ray", "start", "--head", "--node-ip-address", head, "--port", str(opts.ray_port),
                "--dashboard-port", str(opts.dashboard_port), "--num-gpus", str(gpn), "--disable-usage-stats")
    ray_worker = ("ray", "start", "--address", f"{head}:{opts.ray_port}", "--node-ip-address", "$WORKER_IP",
                  "--num-gpus", str(gpn), "--disable-usage-stats")
    ray_address = opts.ray_address or os.environ.get("RAY_ADDRESS") or (
        f"http://{opts.head_ip}:{opts.dashboard_port}" if opts.head_ip else DEFAULT_RAY_ADDRESS)

    fully_async = opts.fully_async if opts.fully_async is not None else plan.rl.async_
    script = "train_async.py" if plan.rl.async_ else "train.py"
    if fully_async and not plan.rl.async_:
        raise _fail(src, "executor.options.fully_async", "the fully-async rollout needs rl.async: true (train_async.py)")
    margs = ModelArgsRef(recipe.model_type, opts.miles_root, opts.python,
                         "explicit" if opts.model_args is not None else opts.model_args_format,
                         tuple(opts.model_args) if opts.model_args is not None else None)
    return MilesLaunch(
        plan_id=plan.id, run_id=rid, entry_script=f"{opts.miles_root}/{script}", python=opts.python,
        train_args=tuple(args), runtime_env_vars=env, passthrough_env=tuple(passthrough), model_args=margs,
        ray_head=ray_head, ray_worker=ray_worker, num_nodes=num_nodes, gpus_per_node=gpn, ray_address=ray_address,
        num_steps_per_rollout=steps_per_rollout, notes=tuple(notes))


def _train_args(plan: Plan, sc: Scenario, opts: MilesOptions, recipe: R.ModelRecipe, src: str,
                run_id: str) -> tuple[list[str], dict[str, str], list[str], list[str], int]:
    rl = plan.rl
    assert rl is not None
    t = plan.train
    lay = t.layout
    ro = rl.rollout
    hw: HardwareProfile = sc.hardware
    gpn = hw.gpus_per_node
    notes: list[str] = []
    a: list[str] = []

    # --- unsupported layouts -----------------------------------------------------------------------------------
    if t.fsdp:
        raise _fail(src, "train.fsdp", "the miles backend builds Megatron launches; fsdp is not supported")
    if t.resolved_schedule() not in ("1f1b", "interleaved"):
        raise _fail(src, "train.schedule", f"Megatron in Miles runs 1f1b or interleaved, not {t.resolved_schedule()}")
    if rl.algorithm != "grpo":
        raise _fail(src, "rl.algorithm", "the miles backend builds GRPO launches (PPO needs a critic model)")
    if ro.dp > 1 and not ro.dp_attention:
        raise _fail(src, "rl.rollout.dp_attention", "Miles requires SGLang DP attention when rollout dp > 1")
    if not t.distributed_optimizer:
        notes.append("train.distributed_optimizer is false, but Miles turns the distributed optimizer on for Adam")

    ctx = t.seq_len
    resp = rl.response_tokens.max
    if resp >= ctx:
        raise _fail(src, "train.seq_len", f"the context length ({ctx}) must exceed the max response "
                    f"({resp}) to leave room for the prompt")
    responses = rl.responses_per_step
    if responses % t.global_batch:
        raise _fail(src, "train.global_batch", f"prompts_per_step x samples_per_prompt = {responses} must be a "
                    f"multiple of global_batch ({t.global_batch}): Miles trains num_steps_per_rollout = "
                    "responses / global_batch optimizer steps per rollout")
    steps_per_rollout = responses // t.global_batch
    if rl.prompts_per_step % (t.micro_batch * sc.dp) and t.max_tokens_per_gpu is None:
        notes.append(f"rollout batch {rl.prompts_per_step} is not a multiple of micro_batch x dp = "
                     f"{t.micro_batch * sc.dp}")

    # --- checkpoints -------------------------------------------------------------------------------------------
    hf = opts.hf_checkpoint or f"{opts.model_dir}/{recipe.hf_name}"
    if ro.precision == "fp8":
        if opts.fp8_hf_checkpoint:
            hf = opts.fp8_hf_checkpoint
        elif "fp8" not in hf.lower():
            notes.append(f"rollout precision is fp8 but the HF checkpoint {hf} does not look FP8; "
                         "set executor.options.fp8_hf_checkpoint")
    a += ["--hf-checkpoint", hf, "--ref-load", opts.ref_load or f"{opts.model_dir}/{recipe.hf_name}_torch_dist"]
    if opts.load:
        a += ["--load", opts.load]
    if opts.save:
        a += ["--save", opts.save]
        if opts.save_interval:
            a += ["--save-interval", str(opts.save_interval)]

    # --- rollout / data ----------------------------------------------------------------------------------------
    fully_async = opts.fully_async if opts.fully_async is not None else rl.async_
    if fully_async:
        a += ["--rollout-function-path", FULLY_ASYNC_ROLLOUT_FUNCTION]
    a += ["--prompt-data", opts.prompt_data or f"{opts.data_dir}/dapo-math-17k/dapo-math-17k.jsonl",
          "--input-key", opts.input_key, "--label-key", opts.label_key]
    if opts.apply_chat_template:
        a += ["--apply-chat-template"]
        if opts.apply_chat_template_kwargs:
            a += ["--apply-chat-template-kwargs", json.dumps(opts.apply_chat_template_kwargs, separators=(",", ":"))]
    if opts.rollout_shuffle:
        a += ["--rollout-shuffle"]
    a += ["--rm-type", opts.rm_type,
          "--num-rollout", str(opts.num_rollout),
          "--rollout-batch-size", str(rl.prompts_per_step),
          "--n-samples-per-prompt", str(rl.samples_per_prompt),
          "--rollout-max-context-len", str(ctx),
          "--rollout-max-prompt-len", str(ctx - resp),
          "--rollout-max-response-len", str(resp),
          "--rollout-temperature", _fmt(opts.rollout_temperature),
          "--num-steps-per-rollout", str(steps_per_rollout),
          "--global-batch-size", str(t.global_batch)]
    if opts.balance_data:
        a += ["--balance-data"]
    if opts.log_passrate:
        a += ["--log-passrate"]
    if rl.async_:
        a += ["--pause-generation-mode", opts.pause_generation_mode]
    if opts.over_sampling_batch_size:
        a += ["--over-sampling-batch-size", str(opts.over_sampling_batch_size)]
    if opts.dynamic_sampling_filter_path:
        a += ["--dynamic-sampling-filter-path", opts.dynamic_sampling_filter_path]

    # --- optimizer ---------------------------------------------------------------------------------------------
    a += ["--optimizer", "adam", "--lr", _fmt(opts.lr), "--lr-decay-style", opts.lr_decay_style,
          "--weight-decay", _fmt(opts.weight_decay), "--adam-beta1", _fmt(opts.adam_beta1),
          "--adam-beta2", _fmt(opts.adam_beta2)]
    if t.optimizer_offload_fraction > 0:
        a += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--overlap-cpu-optimizer-d2h-h2d",
              "--optimizer-offload-fraction", _fmt(t.optimizer_offload_fraction)]

    # --- GRPO --------------------------------------------------------------------------------------------------
    a += ["--advantage-estimator", "grpo", "--kl-loss-coef", _fmt(opts.kl_loss_coef), "--kl-loss-type",
          opts.kl_loss_type, "--entropy-coef", _fmt(opts.entropy_coef), "--eps-clip", _fmt(opts.eps_clip),
          "--eps-clip-high", _fmt(opts.eps_clip_high)]
    if rl.log_probs.ref_model:
        a += ["--use-kl-loss"]
        if opts.kl_loss_coef == 0:
            notes.append("rl.log_probs.ref_model is true with kl_loss_coef 0: the reference pass runs, its loss weighs 0")
    if opts.use_tis:
        a += ["--use-tis"]

    # --- wandb -------------------------------------------------------------------------------------------------
    passthrough = list(R.NETWORK_ENV_NAMES)
    if opts.wandb_project:
        a += ["--use-wandb", "--wandb-project", opts.wandb_project, "--wandb-group", opts.wandb_group or run_id,
              "--disable-wandb-random-suffix"]
        if opts.wandb_team:
            a += ["--wandb-team", opts.wandb_team]
        passthrough.append("WANDB_API_KEY")

    # --- Megatron layout and memory ----------------------------------------------------------------------------
    a += ["--tensor-model-parallel-size", str(lay.tp)]
    if lay.tp > 1 and t.sequence_parallel:
        a += ["--sequence-parallel"]
    elif lay.tp > 1:
        notes.append("tp > 1 without train.sequence_parallel: Megatron MoE layers expect sequence parallelism")
    a += ["--pipeline-model-parallel-size", str(lay.pp),
          "--context-parallel-size", str(lay.cp),
          "--expert-model-parallel-size", str(lay.ep),
          "--expert-tensor-parallel-size", str(lay.etp)]
    if t.moe_dispatcher == "deepep":  # megatron-core 0.16: the flex dispatcher with the DeepEP backend
        a += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"]
    split_args, split_note = pipeline_split_args(sc.stage_layers, lay.pp, lay.vpp)
    a += split_args
    if t.microbatch_group_size_per_vp_stage is not None:
        a += ["--microbatch-group-size-per-virtual-pipeline-stage", str(t.microbatch_group_size_per_vp_stage)]
    if t.attention_kernel == "materialized":  # TransformerEngine's unfused attention (scores through HBM)
        a += ["--attention-backend", "unfused"]
    notes.append(f"pipeline: {split_note} ({sc.split_note})")
    a += ["--seq-length", str(ctx)]
    if t.recompute == "full":
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif t.recompute == "selective":
        a += ["--recompute-granularity", "selective"]
    a += ["--micro-batch-size", str(t.micro_batch)]
    qkv = opts.qkv_format or recipe.qkv_format
    if t.max_tokens_per_gpu is not None:
        a += ["--max-tokens-per-gpu", str(t.max_tokens_per_gpu),
              "--log-probs-max-tokens-per-gpu", str(opts.log_probs_max_tokens_per_gpu or t.max_tokens_per_gpu)]
    dyn = opts.dynamic_batch_size
    if dyn is None:
        dyn = t.max_tokens_per_gpu is not None and qkv != "bshd"
    if dyn:
        if t.max_tokens_per_gpu is None:
            raise _fail(src, "executor.options.dynamic_batch_size", "needs train.max_tokens_per_gpu")
        if qkv == "bshd":
            raise _fail(src, "executor.options.dynamic_batch_size", "Miles forbids dynamic batch size with "
                        "qkv_format bshd (the DeepSeek-V4 recipes' format); use micro batches or qkv_format thd")
        a += ["--use-dynamic-batch-size"]
    elif t.max_tokens_per_gpu is not None:
        notes.append(f"max_tokens_per_gpu {t.max_tokens_per_gpu} without --use-dynamic-batch-size "
                     f"(qkv_format {qkv}): Miles keeps micro_batch {t.micro_batch}")
    if qkv:
        a += ["--qkv-format", qkv]

    # --- SGLang rollout ----------------------------------------------------------------------------------------
    a += ["--rollout-num-gpus-per-engine", str(ro.engine_gpus),
          "--sglang-tp-size", str(ro.tp), "--sglang-dp-size", str(ro.dp), "--sglang-ep-size", str(ro.ep)]
    if ro.dp_attention:
        a += ["--sglang-enable-dp-attention"]
    a += ["--sglang-mem-fraction-static", _fmt(ro.mem_fraction_static)]
    if ro.max_running_requests is not None:
        a += ["--sglang-max-running-requests", str(ro.max_running_requests)]
    if ro.max_total_tokens is not None:
        a += ["--sglang-max-total-tokens", str(ro.max_total_tokens)]
    if ro.kv_cache_dtype == "fp8":
        a += ["--sglang-kv-cache-dtype", "fp8_e4m3"]
    a += [x.replace("{ctx}", str(ctx)) for x in recipe.sglang_args]
    if hw.vendor == "amd":
        a += list(recipe.amd_sglang_args)
    a += list(recipe.router_args)

    # --- resources and weight update ---------------------------------------------------------------------------
    actor_nodes, actor_per_node = _nodes(rl.actor_gpus, gpn, src, "rl.actor_gpus", "actor_gpus")
    a += ["--actor-num-nodes", str(actor_nodes), "--actor-num-gpus-per-node", str(actor_per_node),
          "--num-gpus-per-node", str(gpn)]
    if rl.placement == "colocated":
        a += ["--colocate"]
        if rl.weight_update.mode != "ipc":
            notes.append(f"weight_update.mode {rl.weight_update.mode}: Miles always updates colocated engines from "
                         "tensors (CUDA IPC)")
    else:
        a += ["--rollout-num-gpus", str(rl.rollout_gpus)]
        if rl.weight_update.mode == "broadcast":
            a += ["--update-weight-transfer-mode", "broadcast"]
        elif rl.weight_update.mode == "disk":
            if not (opts.update_weight_disk_dir and opts.update_weight_local_checkpoint_dir):
                raise _fail(src, "executor.options.update_weight_disk_dir", "weight_update.mode disk (Miles "
                            "disk-delta) needs update_weight_disk_dir and update_weight_local_checkpoint_dir")
            a += ["--update-weight-transfer-mode", "disk-delta",
                  "--update-weight-disk-dir", opts.update_weight_disk_dir,
                  "--update-weight-local-checkpoint-dir", opts.update_weight_local_checkpoint_dir]
    a += ["--update-weight-buffer-size", str(int(round(rl.weight_update.bucket_mb * MIB)))]
    margin = opts.train_memory_margin_bytes if opts.train_memory_margin_bytes is not None else recipe.train_memory_margin_bytes
    if margin is not None:
        a += ["--train-memory-margin-bytes", str(margin)]
    if not rl.log_probs.ref_model:
        a += ["--disable-weights-backuper"]
    if opts.deterministic:
        a += ["--deterministic-mode"]
    if opts.rollout_routing_replay:
        a += ["--use-rollout-routing-replay", "--use-miles-router"]

    # --- precision and model facts -----------------------------------------------------------------------------
    if t.precision == "fp8":
        a += [*recipe.fp8_train_args, "--bf16"]
    else:
        a += ["--bf16"]
    a += list(recipe.megatron_args)

    # --- eval --------------------------------------------------------------------------------------------------
    if opts.eval_interval:
        if not opts.eval_prompt_data:
            raise _fail(src, "executor.options.eval_prompt_data", "eval_interval needs eval_prompt_data (name: path)")
        a += ["--eval-interval", str(opts.eval_interval)]
        if opts.eval_top_p is not None:
            a += ["--eval-top-p", _fmt(opts.eval_top_p)]
        if opts.eval_function_path:
            a += ["--eval-function-path", opts.eval_function_path]
        a += ["--eval-prompt-data"]
        for name, path in opts.eval_prompt_data.items():
            a += [name, path]
        a += ["--n-samples-per-eval-prompt", str(opts.n_samples_per_eval_prompt)]
        if opts.eval_max_response_len:
            a += ["--eval-max-response-len", str(opts.eval_max_response_len)]

    a += list(opts.extra_args)

    # --- runtime env -------------------------------------------------------------------------------------------
    env: dict[str, str] = dict(R.MILES_BASE_ENV)
    if hw.vendor == "amd":
        devices = ",".join(str(i) for i in range(gpn))
        env |= R.ROCM_ENV | R.RCCL_TUNING_ENV | R.AMD_MILES_ENV
        env |= {"HIP_VISIBLE_DEVICES": devices, "CUDA_VISIBLE_DEVICES": devices}
    elif hw.vendor == "nvidia":
        env["NCCL_NVLS_ENABLE"] = "1" if hw.scale_up_topology == "switch" else "0"
    env["RAY_DEDUP_LOGS"] = "0"  # every perf line must reach the job log
    if opts.nccl_debug:
        env |= R.NCCL_DEBUG_ENV
    env |= recipe.env
    if hw.vendor == "amd":
        env |= recipe.amd_env
    if opts.deterministic:
        env |= R.DETERMINISTIC_ENV
    if t.precision == "fp8":
        env |= recipe.fp8_train_env
    py_path = [opts.miles_root]
    if fully_async:
        py_path.append(f"{opts.miles_root}/examples/fully_async")
    py_path.append(opts.megatron_path)
    env["PYTHONPATH"] = ":".join(py_path)
    if opts.head_ip:
        env["MASTER_ADDR"] = opts.head_ip
        env["no_proxy"] = env["NO_PROXY"] = f"localhost,127.0.0.1,{opts.head_ip}"
    else:
        passthrough.append("MASTER_ADDR")
        env["no_proxy"] = env["NO_PROXY"] = "localhost,127.0.0.1"
    env |= opts.extra_env
    return a, env, passthrough, notes, steps_per_rollout


# ---------------------------------------------------------------------------------------------------------------
# Dry run
# ---------------------------------------------------------------------------------------------------------------


def _word(tok: str) -> str:
    """Shell-quote a token, leaving `$VAR`, `$VAR:port` and the MODEL_ARGS array reference to the shell."""
    if tok == MODEL_ARGS_PLACEHOLDER:
        return f'"{tok}"'
    if tok.startswith("$") and tok[1:].replace("_", "").replace(":", "").isalnum():
        return tok
    return shlex.quote(tok)


def _cmd(argv: Sequence[str], indent: str = "  ") -> str:
    """One command, a flag and its values per line."""
    lines: list[list[str]] = [[]]
    for tok in argv:
        if tok.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(_word(tok))
    return (" \\\n" + indent).join(" ".join(x) for x in lines)


def render_dry_run(launch: MilesLaunch, plan_path: str = "", environ: Mapping[str, str] | None = None) -> str:
    """The launch as text: the Ray cluster commands, the job submission, the runtime env and the notes."""
    env = launch.runtime_env_vars
    out: list[str] = []
    out.append(f"# Miles launch of plan {launch.plan_id}" + (f" ({plan_path})" if plan_path else "")
               + f": run {launch.run_id}, entry point {launch.entry_point}")
    out.append(f"# {launch.num_nodes} node(s) x {launch.gpus_per_node} GPUs; run the ray start lines in the "
               "training image on each node, then the submission on the head node.")
    out.append("")
    out.append("# 1. Ray head node")
    out.append(_cmd(launch.ray_head))
    if launch.num_nodes > 1:
        out.append(f"# 2. Each of the {launch.num_nodes - 1} worker node(s)")
        out.append(_cmd(launch.ray_worker))
    out.append("")
    out.append("# 3. On the head node: the Megatron model arguments, then the job")
    if launch.passthrough_env:
        out.append("# copied into the runtime env from this shell when set: " + " ".join(launch.passthrough_env))
    out.append(launch.model_args.shell_setup())
    out.append(_cmd(launch.submit_argv))
    out.append("")
    out.append("# Runtime env (env_vars of --runtime-env-json), one per line:")
    shown = launch.resolved_env(environ) if environ is not None else env
    for k in sorted(shown):
        out.append(f"#   {k}={shown[k]}")
    if launch.notes:
        out.append("")
        out.append("# Notes:")
        out.extend(f"#   - {n}" for n in launch.notes)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Run (submit + follow + parse)
# ---------------------------------------------------------------------------------------------------------------


class StepSink(Protocol):
    """What run_miles needs from the measurement store: one call per completed step."""

    def add_step(self, *, run_id: str, plan_id: str, backend: str, measurement: dict[str, Any]) -> None: ...


@dataclass(slots=True)
class MilesRunResult:
    run_id: str
    status: str  # DRY_RUN | SUCCEEDED | FAILED | STOPPED | TIMEOUT
    launch: MilesLaunch
    job_id: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    eval: dict[int, dict[str, float]] = field(default_factory=dict)
    message: str = ""
    log_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("DRY_RUN", "SUCCEEDED")


def default_run_id(plan: Plan, now: _dt.datetime | None = None) -> str:
    """`<plan id>-<UTC yyyymmdd-HHMMSS>`: unique per submission (Ray submission ids must be)."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{plan.id}-{now.strftime('%Y%m%d-%H%M%S')}"


def run_miles(
    plan: Plan,
    plan_path: str,
    *,
    dry_run: bool = False,
    ray_address: str | None = None,
    store: StepSink | None = None,
    out: TextIO | None = None,
    log_path: str | Path | None = None,
    timeout_s: float | None = None,
    run_id: str | None = None,
    environ: Mapping[str, str] | None = None,
    client: Any = None,
) -> MilesRunResult:
    """Launch a plan with Miles (what `executor launch --plan P [--dry-run] [--ray-address A]` calls).

    - `dry_run`: build the launch and print `render_dry_run` to `out` (default stdout); no Ray import, no I/O.
    - otherwise: resolve MODEL_ARGS on this machine (the head node), submit with `JobSubmissionClient(address)`
      (address: `ray_address` > executor.options.ray_address > $RAY_ADDRESS > http://127.0.0.1:8265), follow the
      job log (copied to `log_path` when given, and to `out` when given), parse Miles' `perf N: {...}` lines and call
      `store.add_step(run_id=..., plan_id=..., backend="miles", measurement=m)` once per step as it completes
      (measurement: {step, rollout_time_s, log_probs_time_s, train_time_s, weight_update_time_s, step_time_s, ...,
      perf: {raw perf/* keys}}; see miles_logs.StepRecord.measurement).
    - `timeout_s`: stop the job and return status TIMEOUT after this long.
    - `run_id`: default executor.options.run_id or `<plan id>-<UTC time>`; also the Ray submission id.
    - `client`: a JobSubmissionClient-like object (tests); default a real one for the address.
    Raises InputError for a plan or options Miles cannot run; returns the job's final status otherwise.
    """
    environ = os.environ if environ is None else environ
    opts = parse_miles_options(plan.executor.options, plan_path) if plan.executor.backend == "miles" else None
    rid = run_id or (opts.run_id if opts and opts.run_id else None) or default_run_id(plan)
    launch = build_miles_launch(plan, plan_path, run_id=rid)
    if ray_address:
        launch = _with_address(launch, ray_address)
    if dry_run:
        (out or sys.stdout).write(render_dry_run(launch, plan_path))
        return MilesRunResult(run_id=rid, status="DRY_RUN", launch=launch)
    from executor.backends.miles_ray import submit_and_follow

    model_args = launch.model_args.resolve(source=plan_path)
    return submit_and_follow(launch, model_args, environ=environ, store=store, out=out, log_path=log_path,
                             timeout_s=timeout_s, client=client)


def _with_address(launch: MilesLaunch, address: str) -> MilesLaunch:
    import dataclasses

    return dataclasses.replace(launch, ray_address=address)
