"""Calibration overlays: named efficiency parameters of a hardware profile, fitted to measured runs.

File format (YAML): {hardware: <id>, params: {name: value, ...}, fitted_on: [...], source: "..."}. The names are
`HardwareProfile.calibration_params()`; never per-case knobs.
"""

from __future__ import annotations

from pathlib import Path

from perfmodel.errors import InputError
from perfmodel.spec.hardware import HardwareProfile, load_hardware
from perfmodel.spec.loading import read_mapping


def apply_calibration_file(path: str | Path, hardware_ref: str, source: str = "") -> HardwareProfile:
    data = read_mapping(path)
    hw = load_hardware(hardware_ref, source=source)
    if data.get("hardware") not in (None, hw.id):
        raise InputError(str(path), "hardware", f"calibration is for {data.get('hardware')!r}, the run uses {hw.id!r}")
    params = data.get("params")
    if not isinstance(params, dict) or not all(isinstance(v, (int, float)) for v in params.values()):
        raise InputError(str(path), "params", "needs a mapping of parameter name -> number")
    return hw.with_params({str(k): float(v) for k, v in params.items()}, source=str(path))
