"""The executor's Python API: `launch(plan)` does what `executor launch --plan PLAN` does and returns the
outcome (run id, status, steps recorded, exit code); the command is a thin layer of flags over it.

    import executor
    outcome = executor.launch("examples/local-grpo.yaml", steps=3)
    outcome.run_id, outcome.status
    executor.resume(outcome.run_id, steps=10)  # a stopped run, from its newest checkpoint

Bad input raises `perfmodel.errors.InputError` (file, field, what to fix) before anything starts.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

from executor.backends.base import LaunchOptions, RunOutcome
from executor.store_path import default_store_path


def launch(plan: str | PathLike, *, steps: int | None = None, store: str | PathLike | None = None,
           run_dir: str | PathLike | None = None, dry_run: bool = False, ray_address: str | None = None,
           timeout_s: float | None = None, profile_step: int | None = None) -> RunOutcome:
    """Run the plan file with the backend its `executor.backend` names (local: this machine; miles: a Ray job),
    recording every step in the SQLite store (default: the per-user one, executor.store_path). `profile_step`
    (local): that step's kernels recorded as kernel tables (0: the first step after the warm-up)."""
    from executor.backends.registry import backend_for
    from perfmodel.inputs.plan import load_plan

    path = str(plan)
    loaded = load_plan(path)
    options = LaunchOptions(plan_path=path, store_path=Path(store) if store else default_store_path(),
                            steps=steps, run_dir=Path(run_dir) if run_dir else None, dry_run=dry_run,
                            ray_address=ray_address, timeout_s=timeout_s, profile_step=profile_step)
    return backend_for(loaded, path).launch(loaded, options)


def resume(run: str, *, steps: int | None = None, store: str | PathLike | None = None) -> RunOutcome:
    """Continue a stopped run (its id, or a unique prefix) from its newest complete checkpoint, in its own folder
    and store row, up to `steps` in all (default: what it asked for). The plan must be the file it ran, unchanged."""
    from executor.backends.registry import backend_for
    from executor.records import launched_plan
    from executor.store import Store, find_run
    from perfmodel.errors import InputError

    store_path = Path(store) if store else default_store_path()
    if not store_path.exists():
        raise InputError(str(store_path), "--store", "no such store; run `executor launch` first or pass --store")
    db = Store(store_path)
    try:
        record = find_run(db, run)
    finally:
        db.close()
    path = Path(record["plan_path"])
    loaded = launched_plan(record)
    if loaded is None:
        raise InputError(str(path), "plan", f"run {record['run_id']} ran this plan with sha256 {record['plan_hash']}; "
                         "it is gone or changed since: restore it, or launch the new plan as a new run")
    options = LaunchOptions(plan_path=str(path), store_path=store_path, steps=steps)
    return backend_for(loaded, str(path)).resume(record, options)
