"""One interface for every backend: the registry covers the plan schema's backends, a launch returns a RunOutcome,
and the measurement sink is the only write path (a full StepRecord lands exactly as Store.write_step stores it)."""

from __future__ import annotations

import io
import time
import typing
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from executor.backends.base import LaunchOptions, RunOutcome
from executor.backends.registry import BACKENDS, backend_for
from executor.measurement_sink import MeasurementSink
from executor.records import MicroBatchTiming, RunRecord, StepRecord, environment
from executor.store import Store
from perfmodel.errors import InputError
from perfmodel.inputs.plan import ExecutorSection, load_plan

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "seed-mi355x-dsv4.yaml"
LOCAL = REPO / "examples" / "local-grpo.yaml"


def test_registry_covers_the_plan_schema():
    assert set(BACKENDS) == set(typing.get_args(ExecutorSection.model_fields["backend"].annotation))
    assert all(b.name == name for name, b in BACKENDS.items())


def test_miles_dry_run_outcome(tmp_path):
    plan = load_plan(SEED)
    out = io.StringIO()
    with redirect_stdout(out):
        outcome = backend_for(plan, str(SEED)).launch(plan, LaunchOptions(str(SEED), tmp_path / "s.sqlite",
                                                                          dry_run=True))
    assert isinstance(outcome, RunOutcome) and outcome.status == "dry_run" and outcome.exit_code == 0
    assert outcome.steps_recorded == 0 and outcome.run_id.startswith("seed-mi355x-dsv4-")
    assert "ray job submit" in out.getvalue()
    assert not (tmp_path / "s.sqlite").exists()  # a dry run records nothing


def test_local_backend_refuses_miles_flags(tmp_path):
    plan = load_plan(LOCAL)
    with pytest.raises(InputError) as e:
        backend_for(plan, str(LOCAL)).launch(plan, LaunchOptions(str(LOCAL), tmp_path / "s.sqlite", timeout_s=5.0))
    assert e.value.field == "executor.backend"


def _record(step: int) -> StepRecord:
    return StepRecord(step=step, started_at=1.0, phases_s={"rollout": 0.5, "step": 1.5, "offload": None},
                      tokens={"prompt": 3}, reward_mean=0.25, reward_std=0.1, train_rollout_logprob_abs_diff=0.01,
                      train_rollout_kl=0.002, rollout_log_prob_mean=-1.0, train_stats={"grad_norm": 2.0},
                      weight_update={"transfer_s": 0.1}, peak_rss_bytes={"rank0": 10},
                      micro_batches=[MicroBatchTiming(0, "train", 0, 0.1, 0.2)], samples=[{"prompt": "1+1="}])


def _run(run_id: str) -> RunRecord:
    return RunRecord(run_id=run_id, plan_id="p", plan_hash="h", plan_path="p.yaml", backend="local",
                     hardware="cpu-local", layout="TP1/PP1/DP1", run_dir=".", started_at=time.time(),
                     environment=environment(), predicted={})


def test_sink_stores_a_step_record_as_the_store_does(tmp_path):
    direct, via_sink = Store(tmp_path / "a.sqlite"), MeasurementSink.open(tmp_path / "b.sqlite")
    direct.create_run(_run("r"))
    via_sink.start_run(_run("r"))
    for step in (1, 2):
        direct.write_step("r", _record(step))
        via_sink.write_step("r", _record(step))
    via_sink.update_run_info("r", engine_start_s=3.0)
    via_sink.finish_run("r", "finished")
    assert via_sink.step_count("r") == 2 and via_sink.steps == 2
    columns = "step, started_at, step_s, rollout_s, log_probs_s, train_s, weight_update_s, reward_mean, " \
              "logprob_abs_diff, rollout_kl, record"
    query = f"SELECT {columns} FROM steps ORDER BY step"
    assert [tuple(r) for r in via_sink.store.conn.execute(query)] == [tuple(r) for r in direct.conn.execute(query)]
    run = via_sink.store.run("r")
    assert run is not None and run["status"] == "finished" and run["info"] == {"engine_start_s": 3.0}
    via_sink.close()
    direct.close()
