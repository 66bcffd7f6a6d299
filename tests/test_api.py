"""The Python API (perfmodel.simulate / sweep / validate / calibrate, executor.launch): each driven as a script
would, and each giving what its command prints (the commands are a thin layer over it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import executor
import perfmodel
import perfmodel.sweep.run  # the API's names stay callable once the package's modules are loaded
import perfmodel.validation
from perfmodel.cli import main
from perfmodel.errors import InputError
from tests.conftest import CASES_DIR

REPO = Path(__file__).resolve().parent.parent
LOOP_CASES = REPO / "studies" / "calibration-loop" / "measured"


def test_simulate_takes_a_file_a_dict_or_a_runspec_and_matches_the_command(capsys):
    from perfmodel.inputs.run_file import load_run_file

    path = REPO / "examples" / "local-grpo.yaml"
    by_path = perfmodel.simulate(path).metrics()
    by_spec = perfmodel.simulate(load_run_file(path)).metrics()
    data = yaml.safe_load(path.read_text())
    run = {k: v for k, v in data.items() if k in ("kind", "hardware", "stack", "gpus", "model", "train", "rl")}
    by_dict = perfmodel.simulate(run).metrics()
    assert by_path == by_spec == by_dict
    assert main(["simulate", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == pytest.approx(by_path)
    with pytest.raises(InputError, match="train.global_batch"):
        perfmodel.simulate({**run, "train": {**run["train"], "global_batch": -1}})


def test_sweep_returns_the_ranking_with_the_plans_it_wrote(tmp_path, monkeypatch):
    from perfmodel.inputs.plan import load_plan
    from tests.sweep.test_sweep import small_spec

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    ranking = perfmodel.api.sweep(small_spec(), out=tmp_path / "s", top=3, workers=1, report=False)
    assert isinstance(ranking, perfmodel.Ranking) and 1 <= len(ranking.top) <= 3
    steps = [r["step_time_s"] for r in ranking.top]
    assert steps == sorted(steps)
    with (tmp_path / "s" / "candidates.csv").open() as f:
        assert ranking.candidates == sum(1 for _ in f) - 1
    best = load_plan(ranking.top[0]["plan_path"])
    assert best.predicted.step_time_s == pytest.approx(steps[0])
    assert (tmp_path / "s" / "candidates.csv") in ranking.files and ranking.report is None


def test_validate_returns_what_the_command_prints_as_json(capsys):
    report = perfmodel.validate(CASES_DIR)
    assert isinstance(report, perfmodel.ValidationReport)
    assert main(["validate", str(CASES_DIR), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(report.to_json()))
    assert report.summary["cases"] == len(list(CASES_DIR.glob("*.yaml")))


def test_calibrate_fits_and_writes_the_overlay_simulate_takes(tmp_path):
    cases = sorted(LOOP_CASES.glob("*fp8*.yaml"))[:2]
    out = tmp_path / "cal.yaml"
    cal = perfmodel.calibrate(cases, out=out)
    assert cal.stack == "local-cpu" and cal.stack_params and out.exists()
    assert [f["file"] for f in cal.provenance["fitted_on"]] == [str(c) for c in cases]
    assert cal.fit["residual_rms_log_after"] < cal.fit["residual_rms_log_before"]
    zero_shot = perfmodel.simulate(cases[0]).metrics()["step_time_s"]
    calibrated = perfmodel.simulate(cases[0], calibration=out).metrics()["step_time_s"]
    measured = yaml.safe_load(cases[0].read_text())["measured"]["step_time_s"]
    assert abs(calibrated - measured) < abs(zero_shot - measured)
    with pytest.raises(InputError, match="--hardware"):
        perfmodel.calibrate(cases, hardware_params=["hbm_efficiency"])


def test_executor_launch_dry_runs_a_miles_plan(tmp_path, capsys):
    outcome = executor.launch(REPO / "examples" / "seed-mi355x-dsv4.yaml", dry_run=True, run_dir=tmp_path / "r",
                              ray_address="http://10.0.0.1:8265")
    assert outcome.status == "dry_run" and outcome.exit_code == 0 and outcome.steps_recorded == 0
    assert "ray job submit" in capsys.readouterr().out
    with pytest.raises(InputError):
        executor.launch(tmp_path / "missing.yaml")
