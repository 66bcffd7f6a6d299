"""`perfmodel calibrate --kernels`: a profile's kernel parameters fitted to kernel tables, as an overlay the other
commands take."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from perfmodel.calibration import load_calibration
from perfmodel.calibration_kernels import default_kernel_params, fit_kernel_calibration
from perfmodel.cli import main
from perfmodel.inputs.hardware import load_hardware
from perfmodel.kernels.price import lanes_for
from perfmodel.kernels.table import KernelRow, write_table

TRUE = {"collective_latency_scale_up_s": 9.0e-6, "collective_bus_efficiency_scale_up": 0.7,
        "gemm_max_efficiency_bf16": 0.65, "gemm_half_flops_bf16": 8.0e9}


def _rows(hw_id: str = "h100-sxm") -> list[KernelRow]:
    """Rows 'measured' on a profile whose parameters are TRUE: what the fit must find again."""
    truth = load_hardware(hw_id).with_params(TRUE)
    shapes = [("gemm", {"m": m, "n": n, "k": 4096}, 1) for m in (16, 128, 1024, 8192) for n in (1024, 8192)]
    shapes += [("all_reduce", {"bytes": b}, 8) for b in (1024, 65536, 2**20, 2**24, 2**28)]
    out = []
    for op, shape, world in shapes:
        row = KernelRow(op, shape, "bf16", "test", world, 1.0, hw_id, "synthetic")
        out.append(dataclasses.replace(row, latency_s=lanes_for(row)[0].price(row, truth)))
    return out


def test_the_fit_recovers_the_parameters_the_rows_were_made_with() -> None:
    hw = load_hardware("h100-sxm")
    rows = _rows()
    assert set(TRUE) <= set(default_kernel_params(hw, rows))
    cal = fit_kernel_calibration(rows, hw, list(TRUE))
    assert cal.hardware == "h100-sxm" and not cal.refused
    for name, value in TRUE.items():
        assert cal.hardware_params[name] == pytest.approx(value, rel=0.03), name
    assert cal.fit["residual_rms_log_after"] < 0.01 < cal.fit["residual_rms_log_before"]


def test_attention_backward_rows_fit_the_backward_efficiency_and_nothing_else() -> None:
    """A microbenchmark's (or a profiled run's) attention backward rows move the profile's backward attention
    efficiency, bounded at 1, and leave the forward's alone."""
    hw = load_hardware("mi355x")
    truth = hw.with_params({"attention_bwd_rel_efficiency": 0.5})
    rows = []
    for b, s in ((1, 2048), (1, 8192), (8, 4096)):
        row = KernelRow("attention_backward", {"batch": b, "seq": s, "heads": 32, "kv_heads": 8, "head_dim": 128},
                        "bf16", "test", 1, 1.0, "mi355x", "synthetic")
        rows.append(dataclasses.replace(row, latency_s=lanes_for(row)[0].price(row, truth)))
    assert default_kernel_params(hw, rows) == ["attention_bwd_rel_efficiency"]
    cal = fit_kernel_calibration(rows, hw)
    assert cal.hardware_params["attention_bwd_rel_efficiency"] == pytest.approx(0.5, rel=0.03)
    fitted = hw.with_params(cal.hardware_params)
    assert fitted.attention_fwd_rel_efficiency == hw.attention_fwd_rel_efficiency


def test_rows_of_another_gpu_are_not_fitted_and_no_row_is_one_line() -> None:
    with pytest.raises(Exception, match="no table row of h200"):
        fit_kernel_calibration(_rows("h100-sxm"), load_hardware("h200"))


def test_the_command_writes_an_overlay_that_kernels_check_and_validate_take(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    tables = tmp_path / "tables"
    tables.mkdir()
    write_table(tables / "t.csv", _rows())
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--kernels", str(tables), "--hardware", "h100-sxm", "--out", str(out),
                 "--hardware-params", ",".join(TRUE)]) == 0
    printed = capsys.readouterr().out
    assert "kernel rows" in printed and "hardware.collective_latency_scale_up_s" in printed
    data = yaml.safe_load(out.read_text())
    assert data["hardware"] == "h100-sxm" and data["stack"] is None
    cal = load_calibration(out)
    assert cal.hardware_params["collective_latency_scale_up_s"] == pytest.approx(9e-6, rel=0.03)
    assert main(["kernels", "check", str(tables), "--calibration", str(out), "--format", "json"]) == 0
    assert main(["calibrate", "--kernels", str(tables), "--out", str(out)]) == 2  # no --hardware
    assert "--kernels fits one hardware profile" in capsys.readouterr().err


def test_an_aiconfigurator_folder_is_sampled_as_kernels_check_samples_it(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """The shipped excerpt of aiconfigurator-core's tables: `--rows-per-table N` fits at most N rows of each table
    (the whole installed tree is about 4 M rows: minutes unsampled); a negative N is one line, exit 2."""
    from perfmodel.api import calibrate_kernels

    excerpt = Path(__file__).resolve().parents[1] / "data" / "kernels" / "aiconfigurator"
    tables = len(list(excerpt.glob("h200_sxm/*/*/*/*.parquet")))
    few = calibrate_kernels(excerpt, hardware="h200", rows_per_table=5)
    every = calibrate_kernels(excerpt, hardware="h200", rows_per_table=None)
    assert 0 < few.fit["n_figures"] <= 5 * tables < every.fit["n_figures"]
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--kernels", str(excerpt), "--hardware", "h200", "--out", str(out),
                 "--rows-per-table", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--rows-per-table" in err and err.count("\n") == 1 and not out.exists()
