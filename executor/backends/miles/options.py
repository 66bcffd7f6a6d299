"""`executor.options` of a plan whose backend is `miles`: what the plan itself does not say about a Miles launch
(paths inside the training image, data, GRPO hyper-parameters, runtime switches, Ray)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from executor.watchdog import DEFAULT_FLOOR_S, DEFAULT_MULTIPLE
from perfmodel.errors import InputError
from perfmodel.inputs.loading import first_error

DEFAULT_RAY_ADDRESS = "http://127.0.0.1:8265"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:\-]*$")
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
# A filter for `dynamic_sampling_filter_path`: drop prompt groups whose rewards are all equal (no GRPO signal).
DYNAMIC_SAMPLING_NONZERO_STD = "miles.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"


class MilesOptions(BaseModel):
    """`executor.options` of a plan whose backend is `miles`. Paths are paths on the cluster nodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Where Miles, Megatron and the checkpoints are (inside the training image).
    miles_root: str = Field(
        "/root/miles", description="Miles checkout on every node (rlsys/miles ROCm image: /workspace/miles)")
    megatron_path: str = Field("/root/Megatron-LM", description="Megatron-LM checkout, put on PYTHONPATH")
    python: str = Field("python3", description="interpreter of the job's entry point")
    model_dir: str = Field("/root/models", description="folder of the default checkpoint paths")
    data_dir: str = Field("/root/datasets", description="folder of the default data paths")
    model_type: str | None = Field(None, description="scripts/models/<model_type>.{py,sh}; default from the model id")
    model_args: list[str] | None = Field(None, description="explicit Megatron MODEL_ARGS (skips scripts/models)")
    model_args_format: Literal["auto", "py", "sh"] = Field(
        "auto",
        description="py: model_args_utils.py (Miles >= Aug 2026); sh: source scripts/models/<type>.sh (PR #1300)")
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
    # PPO (rl.algorithm: ppo): Miles' critic arguments and defaults (miles/utils/arguments.py, docs/rl-phases.md)
    value_clip: float = Field(0.2, ge=0.0, description="--value-clip")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="--gamma (GAE)")
    lambd: float = Field(1.0, ge=0.0, le=1.0, description="--lambd (GAE lambda)")
    critic_lr: float | None = Field(None, gt=0.0, description="--critic-lr (Miles: the actor's lr when unset)")
    critic_load: str | None = Field(None, description="--critic-load (Miles: --load when unset)")
    num_critic_only_steps: int = Field(0, ge=0, description="--num-critic-only-steps (actor frozen meanwhile)")
    normalize_advantages: bool = Field(False, description="--normalize-advantages")
    lr: float = Field(1e-6, gt=0.0)
    lr_decay_style: str = "constant"
    weight_decay: float = Field(0.1, ge=0.0)
    adam_beta1: float = Field(0.9, gt=0.0, lt=1.0)
    adam_beta2: float = Field(0.98, gt=0.0, lt=1.0)

    # Runtime behaviour
    fully_async: bool | None = Field(None, description="fully-async rollout function; default: rl.async")
    pause_generation_mode: Literal["in_place", "retract", "abort"] = "in_place"
    deterministic: bool = True
    debug_rollout_only: bool = Field(
        False, description="Miles' --debug-rollout-only: the rollout alone on the plan's engines, no trainer (a "
                           "settling measurement of the engine: perfmodel/sweep/small_scale.py); disaggregated plans")
    rollout_routing_replay: bool = Field(False, description="R3: --use-rollout-routing-replay --use-miles-router")
    qkv_format: Literal["bshd", "thd"] | None = Field(None, description="default: the model recipe's")
    dynamic_batch_size: bool | None = Field(
        None, description="default: on when max_tokens_per_gpu is set and qkv is not bshd")
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
    watchdog_multiple: float = Field(DEFAULT_MULTIPLE, gt=0, description="the job is stalled after this many "
                                     "predicted steps without a log line (executor/watchdog.py)")
    watchdog_floor_s: float = Field(DEFAULT_FLOOR_S, gt=0, description="but never before this many seconds")

    # Ray
    ray_address: str | None = Field(
        None, description=f"Ray dashboard address (default $RAY_ADDRESS or {DEFAULT_RAY_ADDRESS})")
    head_ip: str | None = Field(None, description="head node IP for the ray start commands and MASTER_ADDR")
    ray_port: int = Field(6379, ge=1, le=65535)
    dashboard_port: int = Field(8265, ge=1, le=65535)
    dashboard_host: str = Field("127.0.0.1", description="where the head's dashboard (Ray's job API) listens; "
                                "loopback: jobs are submitted from the head node")
    run_id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")

    # Every string here becomes an argument, a path or an env value of a job that a shell starts: it is quoted
    # where it is used (shlex), and checked here for what no quoting makes safe or meaningful.
    @field_validator("*")
    @classmethod
    def _one_line(cls, v: Any) -> Any:
        items = v if isinstance(v, list) else list(v.values()) if isinstance(v, dict) else [v]
        for item in items:
            if isinstance(item, str) and any(c in item for c in "\0\n\r"):
                raise ValueError(f"a NUL or line break in {item[:40]!r}; give one line")
        return v

    @field_validator("extra_env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
        return v

    @field_validator("head_ip", "dashboard_host")
    @classmethod
    def _host(cls, v: str | None) -> str | None:
        if v is not None and not _HOST.match(v):
            raise ValueError(f"{v!r} is not an IP address or host name")
        return v

    @field_validator("model_type")
    @classmethod
    def _model_type(cls, v: str | None) -> str | None:
        if v is not None and not _TOKEN.match(v):
            raise ValueError(f"{v!r} names scripts/models/<model_type>: letters, digits, '.', '_', '-'")
        return v

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
