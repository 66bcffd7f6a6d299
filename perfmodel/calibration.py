"""Calibration: fit a stack's knobs (and, optionally, a hardware profile's efficiencies) to measured runs, with
a prior toward the first-principles values, an uncertainty for every fitted parameter, and a refusal of those the
runs do not inform.

The fit is a bounded least squares (scipy) in log space: each figure a run measured gives a residual
log(predicted / measured) / RUN_SIGMA_LOG, each parameter with a first-principles value a prior residual
log(value / first-principles value) / PRIOR_SIGMA_LOG. The posterior covariance of the log parameters is the inverse
Gauss-Newton information at the solution (the Jacobian of the whitened residuals, the data re-weighted by the spread
the fit left); a parameter whose posterior spread is still near its prior's is refused: it keeps its
first-principles value and the overlay says why. Bands without an overlay use perfmodel/priors.py's spreads.

Overlay (YAML), written by `perfmodel calibrate` and read by `--calibration` of simulate, sweep and validate:
{stack, hardware, stack_params, hardware_params, uncertainty: {sigma_log, covariance_log, residual_sigma_log},
refused, fit, provenance: {fitted_on, fitted_at, perfmodel, command}}. Stack parameters apply to runs on that stack
(any hardware: a stack's overheads travel with it), hardware parameters to runs on that hardware.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.errors import InputError
from perfmodel.files import write_text_atomic
from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.hardware import HardwareProfile, load_hardware
from perfmodel.inputs.loading import parse, read_mapping
from perfmodel.inputs.overlay import RUN_SIGMA_LOG, OverlayFile
from perfmodel.inputs.scenario import Scenario, build_scenario
from perfmodel.inputs.stack import NUMERIC_KNOBS, Stack
from perfmodel.invariants import PhysicsError
from perfmodel.memo import Memo
from perfmodel.priors import PLAN_SIGMA_LOG, zero_shot_parameters, zero_shot_sigma_log

PRIOR_SIGMA_LOG = math.log(2.0)  # a first-principles value is right within a factor of 2 (one sigma)
RESIDUAL_SIGMA_FLOOR_LOG = 0.05  # a handful of runs says little about its own spread
REFUSE_SHRINK = 0.7  # refused unless the runs shrink the parameter's spread below 70% of its prior's
FLAT_REFUSE_SIGMA_LOG = 1.0  # a parameter without a prior: refused when still uncertain to a factor of e
Z90 = 1.2815515655446004  # P10-P90 of a normal
ZERO_START_S = 1.0e-4  # a seconds knob whose first-principles value is 0 starts here (log space needs > 0)


@dataclass(frozen=True, slots=True)
class Param:
    """One fitted parameter: where it lives, its first-principles value and its bounds (log space)."""

    kind: str  # "stack" | "hardware"
    name: str
    start: float
    prior: bool  # a first-principles value to pull toward (a knob that is 0 by default has none)
    lo_log: float
    hi_log: float

    @property
    def key(self) -> str:
        return f"{self.kind}.{self.name}"


def _stack_param(stack: Stack, name: str) -> Param:
    v = stack.numeric()[name]
    if name.endswith("_s"):  # seconds: from a microsecond to 100 s
        start = v if v > 0 else ZERO_START_S
        return Param("stack", name, start, v > 0, math.log(1e-6), math.log(100.0))
    return Param("stack", name, v, True, math.log(v / 100.0), math.log(v * 100.0))


def hardware_param(hw: HardwareProfile, name: str) -> Param:
    """A hardware parameter to fit: its profile value is the prior; bounds a factor of 10 each way (an efficiency
    stays <= 1)."""
    v = hw.calibration_params()[name]
    if v <= 0:
        raise InputError("--hardware-params", name, f"{hw.id} has {name} = {v}: nothing to scale in log space")
    hi = 0.0 if ("efficiency" in name or "fraction" in name) else math.log(v * 10.0)  # a share stays <= 1
    return Param("hardware", name, v, True, math.log(v / 10.0), max(hi, math.log(v)))


@dataclass
class Calibration:
    """A fitted overlay: what it changes, how sure it is, what it refused and where it came from."""

    stack: str | None
    hardware: str | None
    stack_params: dict[str, float] = field(default_factory=dict)
    hardware_params: dict[str, float] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # "stack.x" / "hardware.y", the covariance's order
    covariance_log: list[list[float]] = field(default_factory=list)
    residual_sigma_log: float = RUN_SIGMA_LOG
    refused: dict[str, str] = field(default_factory=dict)
    fit: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    # -- applying ----------------------------------------------------------------------------------------------
    def applies_to(self, scn: Scenario) -> bool:
        return ((not self.stack_params or scn.stack.id == self.stack)
                and (not self.hardware_params or scn.hardware.id == self.hardware))

    def _check_stack(self, stack_id: str, source: str) -> None:
        if self.stack_params and stack_id != self.stack:
            raise InputError(self.path, "stack", f"calibration is for stack {self.stack!r}, {source or 'the run'} "
                             f"is priced with {stack_id!r}; calibrate that stack or drop --calibration")

    def check(self, scn: Scenario, source: str = "") -> None:
        """Refuse loudly a run the overlay was not fitted for."""
        self._check_stack(scn.stack.id, source)
        if self.hardware_params and scn.hardware.id != self.hardware:
            raise InputError(self.path, "hardware", f"calibration is for {self.hardware!r}, {source or 'the run'} "
                             f"uses {scn.hardware.id!r}")

    def apply(self, scn: Scenario) -> Scenario:
        """The scenario with this overlay's parameters (those that apply to it)."""
        stack = scn.stack
        if self.stack_params and stack.id == self.stack:
            stack = stack.with_knobs(self.stack_params, source=self.path or "calibration")
        return dataclasses.replace(scn, hardware=self.hardware_profile(scn.hardware), stack=stack)

    def hardware_profile(self, hw: HardwareProfile) -> HardwareProfile:
        if self.hardware_params and hw.id == self.hardware:
            return hw.with_params(self.hardware_params, source=self.path or "calibration")
        return hw

    def uncertainty_only(self) -> Calibration:
        """This overlay's covariance without its parameters: for bands on a scenario that already has them."""
        return Calibration(stack=self.stack, hardware=self.hardware, names=self.names,
                           covariance_log=self.covariance_log, residual_sigma_log=self.residual_sigma_log,
                           path=self.path)

    def as_stack_options(self, stack_id: str, options: dict[str, Any] | None, source: str) -> dict[str, Any]:
        """A run's stack_options with this overlay's stack parameters (how a sweep's candidates carry them);
        refuses a stack the overlay was not fitted for."""
        self._check_stack(stack_id, source)
        return {**(options or {}), **self.stack_params}

    def sigma_log(self) -> dict[str, float]:
        return {n: math.sqrt(max(0.0, self.covariance_log[i][i])) for i, n in enumerate(self.names)}

    def to_yaml_dict(self) -> dict[str, Any]:
        return {"stack": self.stack, "hardware": self.hardware,
                "stack_params": {k: float(v) for k, v in self.stack_params.items()},
                "hardware_params": {k: float(v) for k, v in self.hardware_params.items()},
                "uncertainty": {"sigma_log": self.sigma_log(),
                                "covariance_log": {"names": list(self.names), "matrix": self.covariance_log},
                                "residual_sigma_log": float(self.residual_sigma_log)},
                "refused": dict(self.refused), "fit": self.fit, "provenance": self.provenance,
                "source": "perfmodel calibrate: bounded least squares on log(predicted / measured) with a prior "
                          "toward the first-principles values (perfmodel/calibration.py)"}


def write_calibration(path: str | Path, cal: Calibration) -> None:
    import yaml

    write_text_atomic(path, yaml.safe_dump(cal.to_yaml_dict(), sort_keys=False))


def load_calibration(path: str | Path) -> Calibration:
    """Read an overlay (its schema: perfmodel/inputs/overlay.py); names are checked against what they apply to."""
    p = str(path)
    data = parse(OverlayFile, read_mapping(path), p)
    unknown = [k for k in data.stack_params if k not in NUMERIC_KNOBS]
    if unknown:
        raise InputError(p, f"stack_params.{unknown[0]}", f"not a fitted stack knob; valid: {', '.join(NUMERIC_KNOBS)}")
    if data.hardware_params:  # names and values checked against the profile now, not mid-sweep
        load_hardware(data.hardware, source=p).with_params(dict(data.hardware_params), source=p)
    cov = data.uncertainty.covariance_log
    return Calibration(stack=data.stack, hardware=data.hardware, stack_params=dict(data.stack_params),
                       hardware_params=dict(data.hardware_params), names=list(cov.names),
                       covariance_log=[list(r) for r in cov.matrix],
                       residual_sigma_log=data.uncertainty.residual_sigma_log, refused=dict(data.refused),
                       fit=dict(data.fit), provenance=dict(data.provenance), path=p)


# ---------------------------------------------------------------------------------------------------------------
# Fitting


def _predict(scn: Scenario, memo: Memo) -> dict[str, float] | None:
    from perfmodel.predict import simulate_scenario

    try:
        return simulate_scenario(scn, memo=memo).metrics()
    except PhysicsError:  # faster than the hardware allows: no parameter value gets there
        return None


def _with(scn: Scenario, values: dict[str, float], source: str) -> Scenario:
    """The scenario with parameters set by key ("stack.<knob>", "hardware.<name>")."""
    st = {k.split(".", 1)[1]: float(v) for k, v in values.items() if k.startswith("stack.")}
    hw = {k.split(".", 1)[1]: float(v) for k, v in values.items() if k.startswith("hardware.")}
    out = scn
    if hw:
        out = dataclasses.replace(out, hardware=out.hardware.with_params(hw, source=source))
    if st:
        out = dataclasses.replace(out, stack=out.stack.with_knobs(st, source=source))
    return out


@dataclass
class _Problem:
    scenarios: list[Scenario]
    cases: list[ValidationCase]
    params: list[Param]
    metrics: tuple[str, ...] | None
    memo: Memo = field(default_factory=Memo)
    evaluations: int = 0
    _seen: dict = field(default_factory=dict)  # residuals by parameter values: a point is simulated once

    def figures(self) -> list[tuple[int, str, float]]:
        return [(i, m, v) for i, c in enumerate(self.cases) for m, v in c.measured.items()
                if self.metrics is None or m in self.metrics]

    def log_residuals(self, u: np.ndarray) -> np.ndarray:
        """log(predicted / measured) of every figure; a figure the model cannot predict there scores 0 (a case
        made infeasible scores a large residual instead: the fit steers away from it)."""
        key = (tuple(p.key for p in self.params), tuple(np.round(u, 12)))
        if key in self._seen:
            return self._seen[key]
        self.evaluations += 1
        values = np.exp(u)
        out = []
        preds: dict[int, dict[str, float] | None] = {}
        for i, metric, measured in self.figures():
            if i not in preds:
                scn = _with(self.scenarios[i], {p.key: v for p, v in zip(self.params, values)}, "calibration fit")
                preds[i] = _predict(scn, self.memo)
            pred = preds[i]
            if pred is None:
                out.append(-3.0)  # infeasible (impossibly fast): as if predicted 20x too fast
            elif pred.get(metric):
                out.append(math.log(pred[metric] / measured))
            else:
                out.append(0.0)
        self._seen[key] = np.array(out)
        return self._seen[key]


def residual_scatter(resid: np.ndarray) -> float:
    """The log-space spread the fit left, floored (a handful of runs says little about its own spread)."""
    return max(RESIDUAL_SIGMA_FLOOR_LOG, float(np.sqrt(np.mean(resid ** 2))))


def _prior_rows(params: list[Param], u: np.ndarray) -> np.ndarray:
    return np.array([(ui - math.log(p.start)) / PRIOR_SIGMA_LOG for p, ui in zip(params, u) if p.prior])


def _whitened(problem: _Problem, u: np.ndarray, sigma: float) -> np.ndarray:
    return np.concatenate([problem.log_residuals(u) / sigma, _prior_rows(problem.params, u)])


def _solve(problem: _Problem, warm: dict[str, float] | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """Two passes: the data weighted as RUN_SIGMA_LOG scatter, then as the scatter that fit left (floored): exact
    records pull harder against the prior, scattered ones less. Returns (log parameters, the Jacobian of the whitened
    residuals, the sigma they were whitened with)."""
    from scipy.optimize import least_squares

    params = problem.params
    u = np.array([(warm or {}).get(p.key, math.log(p.start)) for p in params])  # warm: the previous fit's values
    lo = np.array([p.lo_log for p in params])
    hi = np.array([p.hi_log for p in params])
    u = np.clip(u, lo + 1e-9, hi - 1e-9)
    sigma = RUN_SIGMA_LOG
    for attempt in range(2):
        if attempt and abs(sigma - RUN_SIGMA_LOG) < 0.25 * RUN_SIGMA_LOG:
            break  # the scatter is what the first pass assumed: nothing to re-weight
        # tolerances of 0.1%: the figures scatter by 5% or more, a tighter optimum is noise (and simulations)
        fit = least_squares(lambda x, s=sigma: _whitened(problem, x, s), u, bounds=(lo, hi), diff_step=1e-3,
                            x_scale=1.0, ftol=1e-3, xtol=1e-3, gtol=1e-3, max_nfev=40 * (len(params) + 1))
        used = sigma
        u = fit.x
        sigma = residual_scatter(problem.log_residuals(u))
    return u, fit.jac, used


def _posterior(problem: _Problem, jac: np.ndarray, sigma_used: float, sigma_resid: float) -> np.ndarray:
    """Posterior covariance of the log parameters: data rows re-weighted by the spread the fit left."""
    n_data = len(problem.figures())
    j = jac.copy()
    j[:n_data] *= sigma_used / sigma_resid
    info = j.T @ j
    return np.linalg.pinv(info)


def _refusal(params: list[Param], cov: np.ndarray, jac: np.ndarray, n_data: int) -> tuple[str, str] | None:
    """The least informed parameter the runs leave uninformed, with why; None when every one is informed. One at
    a time: a parameter that looks uninformed only because it trades off against another uninformed one becomes
    informed once that one is fixed."""
    worst: tuple[float, str, str] | None = None
    for i, p in enumerate(params):
        sd = math.sqrt(max(0.0, cov[i, i]))
        if not np.any(np.abs(jac[:n_data, i]) > 1e-9):
            badness, why = math.inf, "no figure of these runs depends on it"
        elif p.prior:
            badness = sd / (REFUSE_SHRINK * PRIOR_SIGMA_LOG)
            why = (f"these runs narrow it only to x/{math.exp(sd):.2f} (the prior alone: "
                   f"x/{math.exp(PRIOR_SIGMA_LOG):.2f}): not informed, kept at its first-principles value")
        else:
            badness = sd / FLAT_REFUSE_SIGMA_LOG
            why = (f"these runs leave it uncertain to x/{math.exp(min(sd, 50.0)):.3g}: not informed, kept at "
                   "its default")
        if badness > 1.0 and (worst is None or badness > worst[0]):
            worst = (badness, p.key, why)
    return None if worst is None else (worst[1], worst[2])


def _fit_params(scenarios: list[Scenario], stack_names: list[str], hardware_names: list[str]) -> list[Param]:
    """The parameters a fit moves, each checked: one stack (and one hardware) across the runs, and names the stack
    or the hardware profile lets a calibration fit."""
    stacks = {s.stack.id for s in scenarios}
    if len(stacks) > 1 and stack_names:
        raise InputError("", "stack", f"the runs are priced with several stacks ({', '.join(sorted(stacks))}); "
                         "calibrate one stack at a time (--stack)")
    hws = {s.hardware.id for s in scenarios}
    if hardware_names and len(hws) > 1:
        raise InputError("--hardware-params", "hardware", f"the runs span several hardware ({', '.join(sorted(hws))})"
                         "; hardware parameters are fitted on one (--hardware)")
    bad = [n for n in stack_names if n not in NUMERIC_KNOBS]
    if bad:
        raise InputError("--params", bad[0], f"not a fitted stack knob; valid: {', '.join(NUMERIC_KNOBS)}")
    params = [_stack_param(scenarios[0].stack, n) for n in stack_names]
    if hardware_names:
        valid = scenarios[0].hardware.calibration_params()
        bad = [n for n in hardware_names if n not in valid]
        if bad:
            raise InputError("--hardware-params", bad[0], f"not a calibratable parameter of "
                             f"{scenarios[0].hardware.id}; valid: {', '.join(sorted(valid))}")
        params += [hardware_param(scenarios[0].hardware, n) for n in hardware_names]
    return params


def refit_until_informed(problem: Any, params: list[Param], n_data: int
                         ) -> tuple[list[Param], np.ndarray, np.ndarray, dict[str, str]]:
    """Fit `problem` (anything with `params`, `figures()` and `log_residuals(u)`), refuse the least informed
    parameter, refit without it, until every one left is informed. Returns (the parameters kept, their log values,
    their posterior covariance, why each refused one was)."""
    refused: dict[str, str] = {}
    active = list(params)
    u = np.array([math.log(p.start) for p in params])
    cov = np.zeros((0, 0))
    last: dict[str, float] = {}
    for _ in range(len(params) + 1):
        problem.params = active
        if not active:
            break
        u, jac, used = _solve(problem, last)
        last = {p.key: float(v) for p, v in zip(active, u)}
        cov = _posterior(problem, jac, used, residual_scatter(problem.log_residuals(u)))
        worst = _refusal(active, cov, jac, n_data)
        if worst is None:
            break
        refused[worst[0]] = worst[1]
        active = [p for p in active if p.key != worst[0]]
    problem.params = active
    return active, u, cov, refused


def fit_calibration(cases: list[ValidationCase], stack_names: list[str], hardware_names: list[str] = (),
                    hardware: HardwareProfile | None = None, metrics: tuple[str, ...] | None = None,
                    sources: list[str] | None = None, command: str = "") -> Calibration:
    """Fit the named stack knobs (and hardware parameters) to `cases`, which share one stack (and, when hardware
    parameters are fitted, one hardware). Parameters the runs do not inform are refused and the rest refitted."""
    from importlib.metadata import PackageNotFoundError, version

    t0 = time.perf_counter()
    if not cases:
        raise InputError("", "cases", "no measured run to calibrate on")
    scenarios = [build_scenario(c, hardware=hardware if hardware and c.hardware == hardware.id else None,
                                source=(sources[i] if sources else c.id)) for i, c in enumerate(cases)]
    params = _fit_params(scenarios, stack_names, hardware_names)
    problem = _Problem(scenarios, cases, params, metrics)
    n_data = len(problem.figures())
    start = np.array([math.log(p.start) for p in params])
    rms_before = float(np.sqrt(np.mean(problem.log_residuals(start) ** 2)))

    active, u, cov, refused = refit_until_informed(problem, params, n_data)
    resid = problem.log_residuals(u if active else np.zeros(0))
    sigma = residual_scatter(resid)
    fitted = {p.key: float(math.exp(v)) for p, v in zip(active, u)} if active else {}
    try:
        pkg = version("perfmodel")
    except PackageNotFoundError:
        pkg = "unknown"
    per_case = []
    for i, c in enumerate(cases):
        errs = {m: float(math.exp(r) - 1) for (j, m, _), r in zip(problem.figures(), resid) if j == i}
        per_case.append({"id": c.id, "errors": errs})
    return Calibration(
        stack=scenarios[0].stack.id if stack_names else None,
        hardware=scenarios[0].hardware.id if hardware_names else None,
        stack_params={p.name: fitted[p.key] for p in active if p.kind == "stack"},
        hardware_params={p.name: fitted[p.key] for p in active if p.kind == "hardware"},
        names=[p.key for p in active], covariance_log=cov.tolist() if active else [],
        residual_sigma_log=sigma, refused=refused,
        fit={"residual_rms_log_before": rms_before, "residual_rms_log_after": float(np.sqrt(np.mean(resid ** 2))),
             "n_figures": n_data, "evaluations": problem.evaluations,
             # a parameter pinned at a bound: its sigma says nothing (the data push past what it may take)
             "at_bound": [p.key for p, v in zip(active, u) if min(v - p.lo_log, p.hi_log - v) < 1e-3],
             "seconds": round(time.perf_counter() - t0, 2), "per_case": per_case,
             "prior_sigma_log": PRIOR_SIGMA_LOG, "run_sigma_log": RUN_SIGMA_LOG},
        provenance={"fitted_on": [{"id": c.id, "file": (sources[i] if sources else ""), "source": c.source}
                                  for i, c in enumerate(cases)],
                    "fitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "perfmodel": pkg,
                    "command": command})


# ---------------------------------------------------------------------------------------------------------------
# Bands


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """Predicted metrics and their ln-sensitivity to each uncertain parameter (`grads[i][metric]`, by finite
    differences), with the parameters' ln-covariance and the scatter of runs about what they explain."""

    names: list[str]
    cov: list[list[float]]
    residual_sigma_log: float
    base: dict[str, float]
    grads: list[dict[str, float]]


def uncertain_parameters(scn: Scenario, cal: Calibration | None
                         ) -> tuple[Scenario, list[str], list[list[float]], float]:
    """The scenario priced with the overlay, its uncertain parameters, their ln-covariance and the run scatter. With
    an overlay: its parameters, covariance and residual spread. Without: perfmodel/priors.py's and RUN_SIGMA_LOG."""
    if cal is not None and cal.names:
        return cal.apply(scn), list(cal.names), [list(map(float, row)) for row in cal.covariance_log], \
            cal.residual_sigma_log
    keys = zero_shot_parameters(scn)
    return scn, keys, np.diag([zero_shot_sigma_log(k, scn.run.kind) ** 2 for k in keys]).tolist(), RUN_SIGMA_LOG


def _parameter_value(scn: Scenario, key: str) -> float:
    kind, name = key.split(".", 1)
    return (scn.stack.numeric()[name] or ZERO_START_S) if kind == "stack" else scn.hardware.calibration_params()[name]


def sensitivities(scn: Scenario, cal: Calibration | None, memo: Memo | None = None) -> Sensitivity:
    """The metrics' ln-sensitivities to each uncertain parameter (`uncertain_parameters`), by finite differences."""
    memo = memo if memo is not None else Memo()
    base_scn, keys, cov, resid = uncertain_parameters(scn, cal)
    base = _predict(base_scn, memo)
    if base is None:
        raise PhysicsError("the calibrated prediction breaks a physical invariant")
    h = 0.05
    grads = []
    for k in keys:
        pred = _predict(_with(base_scn, {k: _parameter_value(base_scn, k) * math.exp(h)}, "band"), memo) or base
        grads.append({m: (math.log(pred[m] / base[m]) / h if base.get(m) and pred.get(m) else 0.0) for m in base})
    return Sensitivity(keys, cov, resid, base, grads)


def repriced(scn: Scenario, cal: Calibration | None, thetas: np.ndarray, metric: str,
             memo: Memo | None = None) -> np.ndarray:
    """`metric` re-priced exactly at each row of `thetas` (the ln-factors of the uncertain parameters, in the order
    of `uncertain_parameters`), over its value at theta = 0: what the model gives when its parameters are off by
    that much. NaN where the draw breaks a physical invariant."""
    memo = memo if memo is not None else Memo()
    base_scn, keys, _, _ = uncertain_parameters(scn, cal)
    base = _predict(base_scn, memo)
    if base is None or not base.get(metric):
        raise PhysicsError("the calibrated prediction breaks a physical invariant")
    values = {k: _parameter_value(base_scn, k) for k in keys}
    out = np.empty(len(thetas))
    for i, theta in enumerate(thetas):
        pred = _predict(_with(base_scn, {k: v * math.exp(float(t)) for (k, v), t in zip(values.items(), theta)},
                              "draw"), memo)
        out[i] = pred[metric] / base[metric] if pred and pred.get(metric) else math.nan
    return out


def prediction_band(scn: Scenario, cal: Calibration | None, memo: Memo | None = None) -> dict[str, tuple[float, ...]]:
    """P10, P50, P90 of each metric from its sensitivities: the parameters' covariance seen through them, and the
    spread runs keep about what the parameters explain (calibrated: at least a run's own, `priors.PLAN_SIGMA_LOG`,
    but never wider than the zero-shot band: a calibration does not make a figure less certain than the prior)."""
    sens = sensitivities(scn, cal, memo)
    own = sens.residual_sigma_log if cal is None else max(sens.residual_sigma_log, PLAN_SIGMA_LOG[scn.run.kind])
    sds = _band_sds(sens, own)
    if cal is not None:
        prior = _band_sds(sensitivities(scn, None, memo), RUN_SIGMA_LOG)
        sds = {m: min(sd, prior.get(m, sd)) for m, sd in sds.items()}
    return {m: (sens.base[m] * math.exp(-Z90 * sd), sens.base[m], sens.base[m] * math.exp(Z90 * sd))
            for m, sd in sds.items()}


def _band_sds(sens: Sensitivity, own: float) -> dict[str, float]:
    """Each metric's ln spread: its own `own` and the parameters' covariance seen through its sensitivities."""
    cov = np.array(sens.cov, dtype=float).reshape(len(sens.names), len(sens.names))
    out = {}
    for m, v in sens.base.items():
        if not v or not isinstance(v, (int, float)) or v <= 0:
            continue
        g = np.array([gr[m] for gr in sens.grads])
        out[m] = math.sqrt(own ** 2 + float(g @ cov @ g))
    return out

