"""Calibration overlays: named efficiency parameters of a hardware profile, fitted to measured runs.

File format (YAML): {hardware: <id>, params: {name: value, ...}, fitted_on: [...], source: "..."}. The names are
`HardwareProfile.calibration_params()`; never per-case knobs.
"""

from __future__ import annotations

from pathlib import Path

from perfmodel.errors import InputError
from perfmodel.inputs.hardware import HardwareProfile, load_hardware
from perfmodel.inputs.loading import read_mapping


def apply_calibration_file(path: str | Path, hardware_ref: str | None = None, source: str = "") -> HardwareProfile:
    """The profile with the overlay applied; `hardware_ref` None takes the overlay's own hardware id."""
    data = read_mapping(path)
    if hardware_ref is None:
        hardware_ref = data.get("hardware")
        if not isinstance(hardware_ref, str):
            raise InputError(str(path), "hardware", "a calibration overlay names its hardware id")
    hw = load_hardware(hardware_ref, source=source or str(path))
    if data.get("hardware") not in (None, hw.id):
        raise InputError(str(path), "hardware", f"calibration is for {data.get('hardware')!r}, the run uses {hw.id!r}")
    params = data.get("params")
    if not isinstance(params, dict) or not all(isinstance(v, (int, float)) for v in params.values()):
        raise InputError(str(path), "params", "needs a mapping of parameter name -> number")
    return hw.with_params({str(k): float(v) for k, v in params.items()}, source=str(path))


def write_calibration(path: str | Path, hardware_id: str, params: dict[str, float], fitted_on: list[str],
                      report: dict) -> None:
    import yaml

    data = {"hardware": hardware_id, "params": {k: float(v) for k, v in params.items()}, "fitted_on": fitted_on,
            "source": "perfmodel calibrate (scipy least squares on log(predicted / measured))", "fit": report}
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def fit_calibration(cases: list, hw: HardwareProfile, names: list[str], metrics: tuple[str, ...] | None = None,
                    ) -> tuple[dict[str, float], dict]:
    """Fit the named parameters of `hw` so the cases' predicted metrics match their measured ones.

    Residuals are log(predicted / measured) of every scored metric (relative errors, symmetric); each
    parameter is bounded to (0, 1] for efficiencies and [0, 10 x start] for other quantities. Returns the fitted
    parameters and a small report (residual RMS before and after, per-case errors after)."""
    import numpy as np
    from scipy.optimize import least_squares

    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.memo import Memo
    from perfmodel.predict import simulate_scenario

    start = hw.calibration_params()
    unknown = [n for n in names if n not in start]
    if unknown:
        raise InputError("--params", unknown[0], f"not a calibratable parameter of {hw.id}; valid: "
                         + ", ".join(sorted(start)))
    x0 = np.array([start[n] for n in names], dtype=float)
    is_eff = [("efficiency" in n) for n in names]
    lo = np.array([1e-3 if e else 0.0 for e in is_eff])
    hi = np.array([1.0 if e else max(10 * v, 1e-3) for e, v in zip(is_eff, x0)])
    x0 = np.clip(x0, lo + 1e-9, hi)

    memo = Memo()  # what a trial's parameters do not touch (hash-routing tables) is priced once for the fit

    def residuals(x: np.ndarray) -> np.ndarray:
        trial = hw.with_params(dict(zip(names, map(float, x))), source="calibration fit")
        out = []
        for case in cases:
            try:
                pred = simulate_scenario(build_scenario(case, hardware=trial), memo=memo).metrics()
            except InputError:
                continue
            for metric, measured in case.measured.items():
                if (metrics is None or metric in metrics) and pred.get(metric):
                    out.append(np.log(pred[metric] / measured))
        return np.array(out) if out else np.zeros(1)

    r0 = residuals(x0)
    fit = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-3, max_nfev=60 * len(names))
    r1 = fit.fun
    params = dict(zip(names, map(float, fit.x)))
    report = {"residual_rms_before": float(np.sqrt(np.mean(r0 ** 2))),
              "residual_rms_after": float(np.sqrt(np.mean(r1 ** 2))),
              "n_residuals": int(len(r1)), "evaluations": int(fit.nfev)}
    return params, report
