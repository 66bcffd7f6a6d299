"""`executor launch` dispatches miles plans: --dry-run prints the launch; measured Miles steps land in the same
SQLite store as local runs and `executor show` prints them next to the plan's prediction."""

from __future__ import annotations

import time
from pathlib import Path

from executor.cli import main
from executor.measurement_sink import MeasurementSink
from executor.records import RunRecord, environment
from executor.store import Store

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "seed-mi355x-dsv4.yaml"


def test_dry_run_prints_the_launch(capsys):
    assert main(["launch", "--plan", str(SEED), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "ray job submit" in out and "train_async.py" in out
    assert "--pipeline-model-parallel-size 4" in out and "--decoder-last-pipeline-num-layers 10" in out


def test_miles_flags_refused_for_local_plans(capsys):
    rc = main(["launch", "--plan", str(REPO / "examples" / "local-grpo.yaml"), "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "executor.backend" in err


def test_miles_steps_are_stored_and_shown(tmp_path, capsys):
    store_path = tmp_path / "s.sqlite"
    store = Store(store_path)
    store.create_run(RunRecord(run_id="seed-run", plan_id="seed", plan_hash="x", plan_path=str(SEED),
                               backend="miles", hardware="mi355x", layout="TP1/PP4/EP4", run_dir=str(tmp_path),
                               started_at=time.time(), environment=environment(),
                               predicted={"rollout_time_s": 60.0, "step_time_s": 300.0}))
    sink = MeasurementSink(store)
    for step, rollout in enumerate((70.0, 71.0)):
        sink.add_step(run_id="seed-run", plan_id="seed", backend="miles",
                      measurement={"step": step, "rollout_time_s": rollout, "train_time_s": 100.0,
                                   "step_time_s": 330.0, "train_rollout_logprob_abs_diff": 0.09,
                                   "perf": {"perf/rollout_time": rollout}})
    store.finish_run("seed-run", "finished")
    store.close()
    assert main(["show", "seed-run", "--store", str(store_path)]) == 0
    out = capsys.readouterr().out
    assert "2 steps" in out
    rollout_line = next(line for line in out.splitlines() if line.startswith("rollout"))
    assert "70.50" in rollout_line and "60.00" in rollout_line  # measured median vs predicted
