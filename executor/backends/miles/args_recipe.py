"""Miles train arguments and runtime env from the model recipe and the environment: checkpoints, precision and the
model's own Megatron arguments, wandb, and the job's env vars (vendor, recipe, paths, head node)."""

from __future__ import annotations

from dataclasses import dataclass

from executor.backends.miles import recipes as R
from executor.backends.miles.args_common import ArgGroup
from executor.backends.miles.options import MilesOptions
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.job import RolloutSpec, TrainSpec


@dataclass(frozen=True, slots=True)
class RuntimeEnv:
    env_vars: dict[str, str]
    passthrough_env: list[str]  # names copied from the submitting shell when set


def checkpoint_args(ro: RolloutSpec, opts: MilesOptions, recipe: R.ModelRecipe) -> ArgGroup:
    """The HF checkpoint the engines serve (an FP8 one for FP8 rollout), the actor's initial weights, load and save."""
    g = ArgGroup()
    hf = opts.hf_checkpoint or f"{opts.model_dir}/{recipe.hf_name}"
    if ro.precision == "fp8":
        if opts.fp8_hf_checkpoint:
            hf = opts.fp8_hf_checkpoint
        elif "fp8" not in hf.lower():
            g.notes.append(f"rollout precision is fp8 but the HF checkpoint {hf} does not look FP8; "
                           "set executor.options.fp8_hf_checkpoint")
    g.args += ["--hf-checkpoint", hf, "--ref-load", opts.ref_load or f"{opts.model_dir}/{recipe.hf_name}_torch_dist"]
    if opts.load:
        g.args += ["--load", opts.load]
    if opts.save:
        g.args += ["--save", opts.save]
        if opts.save_interval:
            g.args += ["--save-interval", str(opts.save_interval)]
    return g


def wandb_args(opts: MilesOptions, run_id: str) -> ArgGroup:
    g = ArgGroup()
    if opts.wandb_project:
        g.args += ["--use-wandb", "--wandb-project", opts.wandb_project, "--wandb-group", opts.wandb_group or run_id,
                   "--disable-wandb-random-suffix"]
        if opts.wandb_team:
            g.args += ["--wandb-team", opts.wandb_team]
        g.passthrough_env.append("WANDB_API_KEY")  # a secret: from the submitting shell, never from the plan
    return g


def precision_and_model_args(t: TrainSpec, recipe: R.ModelRecipe) -> ArgGroup:
    """Training precision (FP8 recipes still need --bf16 for what is not FP8) and the recipe's Megatron flags."""
    a = [*recipe.fp8_train_args, "--bf16"] if t.precision == "fp8" else ["--bf16"]
    return ArgGroup(a + list(recipe.megatron_args))


def runtime_env(t: TrainSpec, hw: HardwareProfile, opts: MilesOptions, recipe: R.ModelRecipe,
                fully_async: bool) -> RuntimeEnv:
    """The job's env vars; later layers override earlier ones: Miles base, vendor, recipe, switches, plan options."""
    gpn = hw.gpus_per_node
    passthrough: list[str] = []
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
    effort = (opts.apply_chat_template_kwargs or {}).get("reasoning_effort")
    if effort and "SGLANG_REASONING_EFFORT" in env:  # one effort: the prompts' chat template and the engine agree
        env["SGLANG_REASONING_EFFORT"] = str(effort)
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
    return RuntimeEnv(env, passthrough)
