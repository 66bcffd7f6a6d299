"""The `miles` backend behind `executor launch`: a dry run prints the launch; a real run records the run, submits the
job to Ray and stores each step Miles logs, through the measurement sink."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from executor.backends.base import LaunchOptions, RunOutcome
from executor.backends.miles.run import default_run_id, run_miles
from executor.measurement_sink import MeasurementSink
from executor.records import RunRecord, environment, plan_hash
from executor.store_path import default_run_dir
from executor.watchdog import EXIT_STALLED
from perfmodel.errors import InputError
from perfmodel.inputs.plan import Plan


class MilesBackend:
    name = "miles"

    def launch(self, plan: Plan, options: LaunchOptions) -> RunOutcome:
        if options.profile_step is not None:
            raise InputError(options.plan_path, "executor.backend", "--profile is for backend local (torch.profiler "
                             "in its trainer ranks); this plan runs backend miles: leave --profile out")
        if options.dry_run:  # --steps, --store, --run-dir and --ray-address do not change the printed launch
            result = run_miles(plan, options.plan_path, dry_run=True)
            return RunOutcome(result.run_id, "dry_run", 0, 0)
        run_id = default_run_id(plan)
        run_dir = options.run_dir or default_run_dir(options.store_path, run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        sink = MeasurementSink.open(options.store_path)
        try:
            sink.start_run(_run_record(plan, options.plan_path, run_id, run_dir))
            result = run_miles(plan, options.plan_path, ray_address=options.ray_address, store=sink,
                               log_path=run_dir / "job.log", timeout_s=options.timeout_s, run_id=run_id)
            sink.update_run_info(run_id, job_id=result.job_id, message=result.message,
                                 log_path=str(run_dir / "job.log"), **({"stall": result.stall} if result.stall else {}))
            status = "finished" if result.ok else result.status.lower()
            sink.finish_run(run_id, status)
        finally:
            sink.close()
        if result.stall is not None:
            st = result.stall
            print(f"error: run {run_id} stalled: no log line for {st['silent_s']} s (watchdog {st['timeout_s']:.0f} s)"
                  f" in {st['phase']}; Ray job stopped (status {st['job_status_after_stop']}); {len(result.steps)} "
                  f"steps stored in {options.store_path}; last line: {st['last_progress']!r}", file=sys.stderr)
            return RunOutcome(run_id, status, len(result.steps), EXIT_STALLED)
        print(f"{run_id}: {result.status}, {len(result.steps)} steps stored in {options.store_path}")
        return RunOutcome(run_id, status, len(result.steps), 0 if result.ok else 1)


    def resume(self, run: dict[str, Any], options: LaunchOptions) -> RunOutcome:
        raise InputError(options.plan_path, "executor.backend", f"run {run['run_id']} ran on Miles: --resume "
                         "continues local runs; Miles resumes from its own checkpoints (set executor.options.save and "
                         "save_interval, then launch again with executor.options.load set to that folder)")


def _run_record(plan: Plan, plan_path: str, run_id: str, run_dir: Path) -> RunRecord:
    lay = plan.train.layout
    return RunRecord(
        run_id=run_id, plan_id=plan.id, plan_hash=plan_hash(plan_path), plan_path=str(plan_path), backend="miles",
        hardware=plan.hardware, layout=f"TP{lay.tp}/PP{lay.pp}/EP{lay.ep}", run_dir=str(run_dir),
        started_at=time.time(), environment=environment(),
        predicted=plan.predicted.model_dump(exclude_none=True))
