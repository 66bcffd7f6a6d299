"""`run_miles`: a plan -> its Miles launch -> printed (dry run) or submitted to Ray, its steps handed to a sink."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from executor.backends.miles.build import build_miles_launch
from executor.backends.miles.dry_run import render_dry_run
from executor.backends.miles.launch import MilesLaunch, MilesRunResult
from executor.backends.miles.options import parse_miles_options
from executor.backends.miles.ray_job import submit_and_follow
from executor.measurement_sink import StepSink
from executor.watchdog import Watchdog, watchdog_timeout_s
from perfmodel.inputs.plan import Plan


def default_run_id(plan: Plan, now: _dt.datetime | None = None) -> str:
    """`<plan id>-<UTC yyyymmdd-HHMMSS>`: unique per submission (Ray submission ids must be)."""
    now = now or _dt.datetime.now(_dt.UTC)
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
      perf: {raw perf/* keys}}; see executor.backends.miles.logs.StepRecord.measurement).
    - `timeout_s`: stop the job and return status TIMEOUT after this long.
    - the watchdog: no log line for max(watchdog_floor_s, watchdog_multiple x the plan's predicted step) stops the
      job and returns status STALLED with the watchdog's report (`result.stall`).
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
    model_args = launch.model_args.resolve(source=plan_path)
    opts = opts or parse_miles_options({}, plan_path)
    dog = Watchdog(watchdog_timeout_s(plan.predicted.step_time_s, opts.watchdog_multiple, opts.watchdog_floor_s))
    return submit_and_follow(launch, model_args, environ=environ, store=store, out=out, log_path=log_path,
                             timeout_s=timeout_s, watchdog=dog, client=client)


def _with_address(launch: MilesLaunch, address: str) -> MilesLaunch:
    return dataclasses.replace(launch, ray_address=address)
