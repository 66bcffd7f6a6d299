"""The `miles` backend: a plan file -> the real Miles launch (Ray cluster, `ray job submit`, `train.py` /
`train_async.py` arguments, runtime env) and, when submitted, the per-step `perf/*` timings read back from the job log.

Public API (re-exported here)
-----------------------------
- `MilesOptions`, `parse_miles_options`: the backend options (`plan.executor.options`), validated with extra="forbid".
- `build_miles_launch(plan, plan_path="", run_id=None) -> MilesLaunch`: pure; no I/O beyond the hardware profile and
  model catalogue. Every plan field the launch depends on is mapped there.
- `render_dry_run(launch) -> str`: the shell commands (ray start on head/workers, `ray job submit ...`) and the runtime
  env, as text a person can paste.
- `run_miles(plan, plan_path, *, dry_run, ray_address, store, ...) -> MilesRunResult`: dry run: prints
  `render_dry_run`. Otherwise: submits with the Ray Job SDK, follows the job log, parses `perf/*` lines into per-step
  measurement dicts and hands each to `store.add_step(...)` as it completes.
- `MilesBackend`: the above behind `executor launch` (executor.backends.base.Backend).

Modules, imports flowing down this list (none imports one above it):
  backend.py       -> run.py          the launch command: run record, submit, steps into the measurement sink
  run.py           -> build, dry_run, ray_job
  ray_job.py       -> launch, logs    Ray Job SDK submission and log following
  dry_run.py       -> launch          the launch as shell text
  build.py         -> args_*, launch  plan -> MilesLaunch; concatenates the argument groups in launch order
  args_layout.py, args_algorithm.py, args_rollout.py, args_recipe.py
                                      train arguments by concern (parallelism/layout, RL algorithm and batch,
                                      SGLang rollout engine, model recipe and environment)
  args_common.py, options.py, launch.py, logs.py, recipes.py
                                      shared values: ArgGroup, MilesOptions, MilesLaunch/ModelArgsRef/MilesRunResult,
                                      the perf-log parser, per-model and per-vendor recipes
"""

from __future__ import annotations

from executor.backends.miles.args_layout import pipeline_split_args
from executor.backends.miles.backend import MilesBackend
from executor.backends.miles.build import build_miles_launch
from executor.backends.miles.dry_run import render_dry_run
from executor.backends.miles.launch import MODEL_ARGS_PLACEHOLDER, MilesLaunch, MilesRunResult, ModelArgsRef
from executor.backends.miles.logs import MilesLogParser, parse_miles_log
from executor.backends.miles.options import MilesOptions, parse_miles_options
from executor.backends.miles.run import default_run_id, run_miles
from executor.measurement_sink import StepSink

__all__ = [
    "MODEL_ARGS_PLACEHOLDER", "MilesBackend", "MilesLaunch", "MilesLogParser", "MilesOptions", "MilesRunResult",
    "ModelArgsRef", "StepSink", "build_miles_launch", "default_run_id", "parse_miles_log", "parse_miles_options",
    "pipeline_split_args", "render_dry_run", "run_miles",
]
