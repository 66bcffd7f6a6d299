"""The `local` backend: check the plan against this machine, then run it with torchrun (local/runner.py)."""

from __future__ import annotations

import secrets
import time
from typing import Any

from executor.backends.base import LaunchOptions, RunOutcome
from executor.backends.local.options import LocalOptions
from executor.backends.local.plan_check import check_plan
from executor.backends.local.runner import launch as run_local
from executor.backends.local.runner import resume as resume_local
from executor.store_path import default_run_dir
from perfmodel.errors import InputError
from perfmodel.inputs.plan import Plan


class LocalBackend:
    name = "local"

    def launch(self, plan: Plan, options: LaunchOptions) -> RunOutcome:
        # The plan is re-read by check_plan, which also checks this machine; `plan` only says it is a local plan.
        if options.dry_run or options.ray_address or options.timeout_s:
            raise InputError(options.plan_path, "executor.backend", "--dry-run, --ray-address and --timeout are for "
                             "backend miles; this plan runs backend local")
        if options.steps is not None and options.steps < 1:
            raise InputError("--steps", "", f"needs a positive number of steps, got {options.steps}")
        checked = check_plan(options.plan_path)
        steps = options.steps or LocalOptions.model_validate(checked.plan.executor.options).steps
        profile_step = _profile_step(options.profile_step, steps)
        # unique even when two launches of one plan start in the same second (they may share a store)
        run_id = f"{checked.plan.id}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        run_dir = options.run_dir or default_run_dir(options.store_path, run_id)
        if run_dir.exists() and any(run_dir.iterdir()):
            raise InputError(str(run_dir), "--run-dir", "exists and is not empty; choose another folder")
        return run_local(checked, run_id, run_dir, options.store_path, steps, profile_step)

    def resume(self, run: dict[str, Any], options: LaunchOptions) -> RunOutcome:
        if options.steps is not None and options.steps < 1:
            raise InputError("--steps", "", f"needs a positive number of steps, got {options.steps}")
        checked = check_plan(options.plan_path)
        steps = options.steps or int(run["info"].get("steps_requested") or 0)
        return resume_local(checked, run, options.store_path, steps)


def _profile_step(asked: int | None, steps: int) -> int | None:
    """The step `--profile` runs under torch.profiler: the one asked for, or (0) the first after the warm-up."""
    if asked is None:
        return None
    if asked == 0:
        return min(2, steps)
    if not 1 <= asked <= steps:
        raise InputError("--profile", "", f"step {asked} is not one of the run's steps 1-{steps}; give one of them, "
                         "or no number for the first step after the warm-up")
    return asked
