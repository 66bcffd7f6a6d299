"""`perfmodel calibrate`: stack knobs (and hardware efficiencies) recovered from synthetic records, parameters the
runs do not inform refused, the overlay's provenance, and its round trip through validate / simulate."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from perfmodel.calibration import (
    fit_calibration,
    load_calibration,
    prediction_band,
)
from perfmodel.cli import main
from perfmodel.errors import InputError
from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.plan import load_plan
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import build_scenario
from perfmodel.predict import simulate_scenario
from tests.conftest import write_yaml

LOOP_PLANS = Path(__file__).resolve().parent.parent / "studies" / "calibration-loop" / "plans"
TRUE_LOCAL = {"train_compute_scale": 2.0, "microbatch_host_s": 0.05, "rollout_token_host_s": 1e-3,
              "weight_update_fixed_s": 0.05}


def _measured_on(run: RunSpec, case_id: str, stack_knobs: dict | None = None, hw=None) -> ValidationCase:
    """The run 'measured' on a stack (and hardware) with known parameters: its predicted figures."""
    scn = build_scenario(run, hardware=hw)
    if stack_knobs:
        scn = dataclasses.replace(scn, stack=scn.stack.with_knobs(stack_knobs, "truth"))
    m = simulate_scenario(scn).metrics()
    names = (["rollout_time_s", "log_probs_time_s", "train_time_s", "weight_update_time_s", "step_time_s"]
             if run.rl else ["tokens_per_s_per_gpu"])
    data = run.model_dump(mode="json", by_alias=True, exclude_none=True, include=set(RunSpec.model_fields))
    return ValidationCase.model_validate(data | {"id": case_id, "source": "synthetic",
                                                 "measured": {n: m[n] for n in names}})


def _local_records() -> list[ValidationCase]:
    """Three loop plans and one with 4x smaller micro-batches: host time per layer and micro-batch then separates
    from compute per token (without it the two trade off and the prior decides the split)."""
    plans = sorted(LOOP_PLANS.glob("loop-*.yaml"))[:3]
    runs = [(load_plan(p), p.stem) for p in plans]
    small = load_plan(plans[2])
    runs.append((small.model_copy(update={"train": small.train.model_copy(update={"micro_batch": 16})}), "small-mb"))
    return [_measured_on(run, cid, TRUE_LOCAL) for run, cid in runs]


def test_fit_recovers_known_stack_knobs_within_2_percent():
    cal = fit_calibration(_local_records(), list(TRUE_LOCAL))
    assert cal.stack == "local-cpu" and not cal.refused
    for name, true in TRUE_LOCAL.items():
        assert cal.stack_params[name] == pytest.approx(true, rel=0.02), name
    assert cal.fit["residual_rms_log_after"] < 0.01 < cal.fit["residual_rms_log_before"]
    sig = cal.sigma_log()
    assert all(0 < sig[f"stack.{n}"] < 0.3 for n in TRUE_LOCAL)


def test_uninformed_parameters_are_refused_and_kept(case_dict):
    """One pretraining run cannot tell the compute multiplier from the host's op rate, and says nothing about
    the rollout: both refused, each with its reason, the informed one fitted."""
    run = ValidationCase.model_validate(case_dict)
    case = _measured_on(run, "one", {"train_compute_scale": 1.5})
    cal = fit_calibration([case], ["train_compute_scale", "rollout_compute_scale"])
    assert "stack.rollout_compute_scale" in cal.refused and "no figure" in cal.refused["stack.rollout_compute_scale"]
    assert cal.stack_params == pytest.approx({"train_compute_scale": 1.5}, rel=0.03)
    # one local run: the host's op rate (a small share of its time) and the time per micro-batch (it moves with
    # the same count as the compute) are not told apart from the compute multiplier; the update's fixed cost is
    one = _measured_on(load_plan(sorted(LOOP_PLANS.glob("loop-*.yaml"))[2]), "one",
                       {"weight_update_fixed_s": 0.05, "train_compute_scale": 2.0})
    cal = fit_calibration([one], ["train_compute_scale", "host_op_time_scale", "weight_update_fixed_s",
                                  "microbatch_host_s"])
    assert set(cal.refused) == {"stack.host_op_time_scale", "stack.microbatch_host_s"}, cal.refused
    assert cal.stack_params == pytest.approx({"train_compute_scale": 2.0, "weight_update_fixed_s": 0.05}, rel=0.02)


def test_runs_tell_host_time_per_decode_step_from_per_request_and_per_token():
    """Host time per decode step, per request and per token all start at 0: across runs with different response
    lengths and request counts the one the runs point to is learned, not the one with the most occurrences (tokens
    outnumber decode steps a hundredfold). One run alone cannot tell them apart (studies/calibration-loop)."""
    records = [_measured_on(load_plan(p), p.stem, {"rollout_decode_host_s": 0.03})
               for p in sorted(LOOP_PLANS.glob("loop-*.yaml"))[:3]]
    cal = fit_calibration(records, ["rollout_decode_host_s", "rollout_request_host_s", "rollout_token_host_s"])
    assert cal.stack_params["rollout_decode_host_s"] == pytest.approx(0.03, rel=0.05), cal.stack_params
    assert cal.fit["residual_rms_log_after"] < 0.02
    for name in ("rollout_request_host_s", "rollout_token_host_s"):  # refused, or next to nothing
        assert f"stack.{name}" in cal.refused or cal.stack_params[name] < 1e-5, cal.stack_params


def test_fit_recovers_a_hardware_efficiency_jointly(case_dict):
    hw = load_hardware("h100-sxm")
    true_eff = 0.8 * hw.calibration_params()["gemm_max_efficiency_fp8"]
    truth = hw.with_params({"gemm_max_efficiency_fp8": true_eff})
    run = ValidationCase.model_validate(case_dict)
    cases = [_measured_on(run.model_copy(update={"train": run.train.model_copy(update={"global_batch": g})}),
                          f"gb{g}", hw=truth) for g in (128, 192, 256)]
    cal = fit_calibration(cases, [], ["gemm_max_efficiency_fp8"], hardware=hw)
    assert cal.hardware == "h100-sxm" and cal.stack is None
    assert cal.hardware_params["gemm_max_efficiency_fp8"] == pytest.approx(true_eff, rel=0.02)


def test_calibrate_command_overlay_provenance_and_round_trip(tmp_path, capsys):
    paths = [write_yaml(tmp_path / f"{c.id}.yaml", c.model_dump(mode="json", exclude_none=True))
             for c in _local_records()]
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", *map(str, paths), "--params", ",".join(TRUE_LOCAL), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "stack.train_compute_scale" in printed and "x/" in printed
    overlay = yaml.safe_load(out.read_text())
    assert overlay["stack"] == "local-cpu" and overlay["hardware"] is None
    prov = overlay["provenance"]
    assert [f["id"] for f in prov["fitted_on"]] == [p.stem for p in paths]
    assert prov["fitted_at"].endswith("Z") and "calibrate" in prov["command"]
    assert set(overlay["uncertainty"]["sigma_log"]) == {f"stack.{n}" for n in TRUE_LOCAL}
    # validate with the overlay: the synthetic truth is reproduced, with a band that holds it
    assert main(["validate", *map(str, paths), "--calibration", str(out), "--band", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert all(abs(r["rel_error"]) < 0.02 for r in report["cases"])
    assert all(r["p10"] < r["measured"] < r["p90"] for r in report["cases"])
    # simulate: the overlay applies and the band prints; a run on another stack is refused with one line
    assert main(["simulate", str(paths[0]), "--calibration", str(out), "--band"]) == 0
    assert "P10-P90 from the calibration" in capsys.readouterr().out
    other = yaml.safe_load(paths[0].read_text()) | {"stack": "miles"}
    capsys.readouterr()
    assert main(["simulate", str(write_yaml(tmp_path / "other.yaml", other)), "--calibration", str(out)]) == 2
    err = capsys.readouterr().err
    assert "calibration is for stack 'local-cpu'" in err and err.count("\n") == 1


def test_band_stats_count_what_falls_inside_and_how_wide_the_bands_are() -> None:
    from perfmodel.validation import band_stats

    rows = [{"measured": 10.0, "p10": 8.0, "p90": 12.0}, {"measured": 20.0, "p10": 10.0, "p90": 15.0},
            {"measured": 5.0, "p10": 4.0, "p90": 16.0}, {"measured": 1.0, "p10": None, "p90": None}]
    assert band_stats(rows) == {"banded": 3, "coverage": 2 / 3, "median_width": 1.5}
    assert band_stats(rows[3:]) == {"banded": 0, "coverage": None, "median_width": None}


def test_band_is_wider_uncalibrated_and_brackets_the_prediction():
    run = load_plan(sorted(LOOP_PLANS.glob("loop-*.yaml"))[0])
    scn = build_scenario(run)
    prior = prediction_band(scn, None)
    cal = fit_calibration(_local_records(), list(TRUE_LOCAL))
    post = prediction_band(cal.apply(scn), dataclasses.replace(cal, stack_params={}))
    for m in ("train_time_s", "step_time_s"):
        lo, mid, hi = prior[m]
        assert lo < mid < hi
        assert post[m][2] / post[m][0] < hi / lo


def test_old_hardware_overlays_still_load(tmp_path):
    path = write_yaml(tmp_path / "old.yaml", {"hardware": "h100-sxm", "params": {"hbm_efficiency": 0.7}})
    assert load_calibration(path).hardware_profile(load_hardware("h100-sxm")).hbm_efficiency == pytest.approx(0.7)
    assert load_calibration(path).hardware_params == {"hbm_efficiency": 0.7}


def test_unknown_parameters_are_refused_with_the_valid_names(case_dict):
    case = ValidationCase.model_validate(case_dict)
    with pytest.raises(InputError, match="not a fitted stack knob"):
        fit_calibration([case], ["warp_speed"])
    with pytest.raises(InputError, match="not a calibratable parameter"):
        fit_calibration([case], [], ["warp_speed"], hardware=load_hardware("h100-sxm"))
