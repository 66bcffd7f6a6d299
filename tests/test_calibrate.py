"""`perfmodel calibrate`: fitting recovers a known efficiency from synthetic measurements; the overlay file
round-trips through validate --calibration."""

from __future__ import annotations

import json

import pytest
import yaml

from perfmodel.calibration import apply_calibration_file, fit_calibration
from perfmodel.cli import main
from perfmodel.errors import InputError
from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.scenario import build_scenario
from perfmodel.predict import simulate_scenario
from tests.conftest import write_yaml


def _synthetic_case(case_dict: dict, hw_true) -> dict:
    """The H100 Llama 70B case, 'measured' on a profile whose FP8 GEMMs run at 80% of the shipped efficiency."""
    case = ValidationCase.model_validate(case_dict)
    m = simulate_scenario(build_scenario(case, hardware=hw_true)).metrics()
    case_dict["measured"] = {"tokens_per_s_per_gpu": m["tokens_per_s_per_gpu"]}
    return case_dict


def test_fit_recovers_a_known_efficiency(case_dict):
    hw = load_hardware("h100-sxm")
    true_eff = 0.8 * hw.calibration_params()["gemm_max_efficiency_fp8"]
    d = _synthetic_case(case_dict, hw.with_params({"gemm_max_efficiency_fp8": true_eff}))
    params, report = fit_calibration([ValidationCase.model_validate(d)], hw, ["gemm_max_efficiency_fp8"])
    assert params["gemm_max_efficiency_fp8"] == pytest.approx(true_eff, rel=0.03)
    assert report["residual_rms_after"] < 0.01 < report["residual_rms_before"]


def test_stack_overhead_fits_as_a_software_scale_not_a_hardware_efficiency(case_dict):
    """A stack whose layers run 2.5x slower than their kernels: train_software_scale absorbs it (communication and
    the optimizer untouched), the GEMM efficiencies stay as measured; the shipped profiles leave it at 1."""
    hw = load_hardware("h100-sxm")
    assert hw.train_software_scale == 1.0 and "train_software_scale" in hw.sources
    d = _synthetic_case(case_dict, hw.with_params({"train_software_scale": 2.5}))
    params, report = fit_calibration([ValidationCase.model_validate(d)], hw, ["train_software_scale"])
    assert params["train_software_scale"] == pytest.approx(2.5, rel=0.03)
    assert report["residual_rms_after"] < 0.01 < report["residual_rms_before"]


def test_calibrate_command_and_validate_overlay(tmp_path, case_dict, capsys):
    hw = load_hardware("h100-sxm")
    d = _synthetic_case(case_dict, hw.with_params({"gemm_max_efficiency_fp8": 0.6}))
    case_path = write_yaml(tmp_path / "c.yaml", d)
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", str(case_path), "--hardware", "h100-sxm", "--params", "gemm_max_efficiency_fp8",
                 "--out", str(out)]) == 0
    overlay = yaml.safe_load(out.read_text())
    assert overlay["hardware"] == "h100-sxm" and overlay["fitted_on"] == [d["id"]]
    assert apply_calibration_file(out, "h100-sxm").gemm_curve("fp8").max_efficiency == pytest.approx(0.6, rel=0.03)
    capsys.readouterr()
    assert main(["validate", str(case_path), "--calibration", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert abs(report["cases"][0]["rel_error"]) < 0.02


def test_unknown_parameter_is_refused(case_dict):
    with pytest.raises(InputError, match="not a calibratable parameter"):
        fit_calibration([ValidationCase.model_validate(case_dict)], load_hardware("h100-sxm"), ["warp_speed"])
