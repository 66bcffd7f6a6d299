"""A plan -> its Miles launch (`build_miles_launch`): pure, no I/O beyond the hardware profile and model catalogue.

The train arguments come from one builder per concern, concatenated in the order Miles' launchers write them (the
order is part of the output: golden tests compare it):

  checkpoints (recipe) | data and batch, optimizer, GRPO (algorithm) | wandb (environment)
  | parallelism, memory (layout) | SGLang (rollout) | actor placement (layout) | weight update (rollout)
  | memory margin (layout) | step switches (algorithm) | precision, model flags (recipe) | eval (algorithm)
  | executor.options.extra_args

Sources for the mapping: the AMD async launcher of radixark/miles PR #1300 (`scripts/amd/run_deepseek_v4.py` at
a8684732f), Miles' `miles/utils/arguments.py` and `miles/backends/sglang_utils/arguments.py` (flag names and
constraints, HEAD 31f1ca961), `command_utils.execute_train` (ray job submit and runtime env).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from executor.backends.miles import recipes as R
from executor.backends.miles.args_algorithm import (
    algorithm_args,
    batch_shape,
    check_algorithm,
    data_args,
    eval_args,
    optimizer_args,
    step_behaviour_args,
)
from executor.backends.miles.args_common import ArgGroup, fail
from executor.backends.miles.args_layout import (
    actor_placement_args,
    check_trainer,
    memory_args,
    parallelism_args,
    train_memory_margin_args,
)
from executor.backends.miles.args_recipe import checkpoint_args, precision_and_model_args, runtime_env, wandb_args
from executor.backends.miles.args_rollout import check_engine, sglang_args, weight_update_args
from executor.backends.miles.launch import MilesLaunch, ModelArgsRef
from executor.backends.miles.options import DEFAULT_RAY_ADDRESS, MilesOptions, parse_miles_options
from perfmodel.inputs.plan import Plan
from perfmodel.inputs.scenario import Scenario, build_scenario


@dataclass(frozen=True, slots=True)
class TrainArgs:
    """Everything the plan decides about the job itself (the rest of MilesLaunch is cluster plumbing)."""

    args: list[str]  # after MODEL_ARGS
    env_vars: dict[str, str]
    passthrough_env: list[str]
    notes: list[str]
    steps_per_rollout: int


def build_miles_launch(plan: Plan, plan_path: str = "", run_id: str | None = None) -> MilesLaunch:
    """Map a plan to its Miles launch. Raises InputError (naming the plan field or option) for what Miles cannot run."""
    src = plan_path
    if plan.executor.backend != "miles":
        raise fail(src, "executor.backend", f"is {plan.executor.backend!r}; this is the miles backend")
    opts = parse_miles_options(plan.executor.options, src)
    if plan.kind != "rl" or plan.rl is None:
        raise fail(src, "kind", "the miles backend runs RL plans (kind: rl)")
    sc = build_scenario(plan, source=src)
    recipe = R.recipe_for(plan.model.id, opts.model_type)
    if recipe is None:
        raise fail(src, "executor.options.model_type",
                   f"no Miles model recipe for {plan.model.label()!r}; give the scripts/models name of the model "
                   f"(known ids: {', '.join(sorted(R.RECIPES))})")
    rid = run_id or opts.run_id or plan.id
    train = train_args(plan, sc, opts, recipe, src, rid)

    gpn = sc.hardware.gpus_per_node
    ray_head, ray_worker = _ray_start_commands(opts, gpn)
    ray_address = opts.ray_address or os.environ.get("RAY_ADDRESS") or (
        f"http://{opts.head_ip}:{opts.dashboard_port}" if opts.head_ip else DEFAULT_RAY_ADDRESS)
    fully_async = opts.fully_async if opts.fully_async is not None else plan.rl.async_
    if opts.debug_rollout_only and plan.rl.placement != "disaggregated":
        raise fail(src, "executor.options.debug_rollout_only",
                   "a rollout alone runs on the engines' own GPUs: give rl.placement: disaggregated")
    gpus = plan.rl.rollout_gpus if opts.debug_rollout_only else plan.gpus
    script = "train_async.py" if plan.rl.async_ else "train.py"
    if fully_async and not plan.rl.async_:
        raise fail(src, "executor.options.fully_async", "the fully-async rollout needs rl.async: true (train_async.py)")
    if plan.rl.off_policy_steps > 1 and not fully_async:
        raise fail(src, "executor.options.fully_async", f"rl.off_policy_steps {plan.rl.off_policy_steps} needs the "
                   "fully-async rollout (train_async.py alone generates one step ahead): leave fully_async unset")
    margs = ModelArgsRef(recipe.model_type, opts.miles_root, opts.python,
                         "explicit" if opts.model_args is not None else opts.model_args_format,
                         tuple(opts.model_args) if opts.model_args is not None else None)
    return MilesLaunch(
        plan_id=plan.id, run_id=rid, entry_script=f"{opts.miles_root}/{script}", python=opts.python,
        train_args=tuple(train.args), runtime_env_vars=train.env_vars, passthrough_env=tuple(train.passthrough_env),
        model_args=margs, ray_head=ray_head, ray_worker=ray_worker, num_nodes=max(1, math.ceil(gpus / gpn)),
        gpus_per_node=gpn, ray_address=ray_address, num_steps_per_rollout=train.steps_per_rollout,
        notes=tuple(train.notes), rollout_only=opts.debug_rollout_only)


def train_args(plan: Plan, sc: Scenario, opts: MilesOptions, recipe: R.ModelRecipe, src: str,
               run_id: str) -> TrainArgs:
    """The train arguments, runtime env and notes; refusals are checked first, in a fixed order (the first wins)."""
    rl, t, hw = plan.rl, plan.train, sc.hardware
    assert rl is not None
    notes = check_trainer(t, src)
    check_algorithm(rl, src)
    check_engine(rl.rollout, src)
    batch = batch_shape(plan, sc, src)
    notes += batch.notes
    fully_async = opts.fully_async if opts.fully_async is not None else rl.async_
    groups = [  # in launch order, which is also the order refusals are raised in
        checkpoint_args(rl.rollout, opts, recipe),
        data_args(rl, t, opts, batch, fully_async),
        optimizer_args(t, opts),
        algorithm_args(rl, opts),
        wandb_args(opts, run_id),
        parallelism_args(t, sc, batch.ctx),
        memory_args(t, opts, recipe, src),
        sglang_args(rl.rollout, batch.ctx, recipe, hw),
        actor_placement_args(rl.actor_gpus, hw.gpus_per_node, src),
        weight_update_args(rl, opts, src),
        train_memory_margin_args(opts, recipe),
        step_behaviour_args(rl, opts),
        precision_and_model_args(t, recipe),
        eval_args(opts, src),
        ArgGroup(list(opts.extra_args)),
    ]
    env = runtime_env(t, hw, opts, recipe, fully_async)
    return TrainArgs(
        args=[x for g in groups for x in g.args],
        env_vars=env.env_vars,
        passthrough_env=[*R.NETWORK_ENV_NAMES, *(x for g in groups for x in g.passthrough_env), *env.passthrough_env],
        notes=notes + [n for g in groups for n in g.notes],
        steps_per_rollout=batch.steps_per_rollout)


def _ray_start_commands(opts: MilesOptions, gpus_per_node: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`ray start` on the head node and on each worker node (run inside the training image)."""
    head = opts.head_ip or "$HEAD_IP"
    # the dashboard serves Ray's job API (it runs whatever is submitted): loopback unless the plan says otherwise
    ray_head = ("ray", "start", "--head", "--node-ip-address", head, "--port", str(opts.ray_port),
                "--dashboard-host", opts.dashboard_host, "--dashboard-port", str(opts.dashboard_port),
                "--num-gpus", str(gpus_per_node), "--disable-usage-stats")
    ray_worker = ("ray", "start", "--address", f"{head}:{opts.ray_port}", "--node-ip-address", "$WORKER_IP",
                  "--num-gpus", str(gpus_per_node), "--disable-usage-stats")
    return ray_head, ray_worker
