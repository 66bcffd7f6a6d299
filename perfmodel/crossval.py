"""Accuracy as users meet it: zero-shot and calibrated, both cross-validated within (stack, hardware) groups.

For each case, the stack multiplier of each figure's component (training, the engine, the weight update:
`component_curves`) is fitted on the *other* cases of its group (leave-one-out) and the figure is predicted with
it; never with itself. The fit is a bounded least squares on log errors with a prior
toward 1.0 (the first-principles value), over a surrogate: every case is simulated once per point of a log-spaced
grid of the scale (the caller's memo reuses the layer costs, which the scale does not touch) and predictions in
between are interpolated in log space. One fit is then a 1-D minimization over interpolated curves, so a
leave-one-out pass over hundreds of cases takes the grid's simulations, not hundreds of calibrations.

Bands: P10-P90 of a prediction from the fitted scale's uncertainty (the curvature of the objective) and the
group's residual spread; `coverage` says how often the measured value falls inside.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from perfmodel.calibration import (
    PRIOR_SIGMA_LOG,
    RESIDUAL_SIGMA_FLOOR_LOG,
    RUN_SIGMA_LOG,
    Z90,
    residual_scatter,
    sensitivities,
)
from perfmodel.errors import InputError
from perfmodel.inputs.case import ValidationCase, run_key
from perfmodel.inputs.scenario import build_scenario
from perfmodel.invariants import PhysicsError
from perfmodel.memo import Memo
from perfmodel.predict import simulate_scenario
from perfmodel.priors import PLAN_SIGMA_LOG, refit_parameters, zero_shot_parameters, zero_shot_sigma_log
from perfmodel.validation import band_stats

SCALE_GRID = tuple(float(x) for x in np.exp(np.linspace(math.log(0.25), math.log(4.0), 9)))


@dataclass(slots=True)
class CaseCurve:
    """One case's measured figures and its predictions over the scale grid (log space)."""

    id: str
    group: tuple[str, str]  # (stack, hardware)
    metrics: list[str]
    log_measured: np.ndarray  # [metrics]
    log_pred: np.ndarray  # [grid, metrics]
    zero_shot: dict[str, float] = field(default_factory=dict)  # predicted at scale 1 (the stack's own value)
    run_key: str = ""  # the run itself (hardware, model, job, measured): copies under another id share it
    kind: str = "pretrain"  # pretrain, rl or serve: the summary's per-kind rows
    step_time_s: float | None = None  # the step predicted zero-shot (what launching the run would take)
    knob: str = "train_compute_scale"  # the stack multiplier the grid varies
    # per metric, the zero-shot variance (ln) of the multipliers not refitted (the trainer's host): the cap of a
    # calibrated band (`band`) is the whole zero-shot band, as `perfmodel validate --band` draws it
    other_var: dict[str, float] = field(default_factory=dict)

    def at(self, theta: float) -> np.ndarray:
        """Log predictions at log-scale theta, interpolated on the grid (clamped at its ends)."""
        g = np.log(SCALE_GRID)
        return np.array([np.interp(theta, g, self.log_pred[:, j]) for j in range(len(self.metrics))])

    def slope(self, theta: float, h: float = 0.05) -> np.ndarray:
        return (self.at(theta + h) - self.at(theta - h)) / (2 * h)


def case_curve(case: ValidationCase, path: str, memo: Memo, knob: str = "train_compute_scale") -> CaseCurve | None:
    """Simulate a case over the grid of the stack multiplier `knob`; None when it cannot be predicted (the caller
    lists it as failed)."""
    scn = build_scenario(case, source=path)
    metrics = [m for m, _ in case.measured.items()]
    rows: list[list[float | None] | None] = []
    step_s = None
    for s in SCALE_GRID:
        stack = scn.stack.with_knobs({knob: getattr(scn.stack, knob) * s}, "cv grid")
        try:
            result = simulate_scenario(dataclasses.replace(scn, stack=stack), memo=memo)
        except PhysicsError:  # faster than the hardware allows (MFU > 1): no stack gets there
            rows.append(None)
            continue
        if abs(s - 1.0) < 1e-9:
            step_s = getattr(result, "step_time_s", None)  # a serving benchmark has no step
        pred = result.metrics()
        rows.append([pred.get(m) for m in metrics])
    feasible = [r for r in rows if r is not None]
    if not feasible:
        return None
    # below the physical limit the prediction stays at the fastest feasible one (the curve is flat there)
    rows = [r if r is not None else next(x for x in rows[i:] if x is not None) for i, r in enumerate(rows)]
    keep = [j for j, m in enumerate(metrics) if all(r[j] for r in rows)]
    if not keep:
        return None
    measured = dict(case.measured.items())
    curve = CaseCurve(case.id, (scn.stack.id, case.hardware), [metrics[j] for j in keep],
                      np.log([measured[metrics[j]] for j in keep]),
                      np.log([[r[j] for j in keep] for r in rows]))
    curve.run_key = run_key(case)
    curve.kind = case.kind
    curve.step_time_s = step_s
    curve.knob = knob
    mid = SCALE_GRID.index(min(SCALE_GRID, key=lambda x: abs(x - 1.0)))
    curve.zero_shot = {m: float(np.exp(curve.log_pred[mid, k])) for k, m in enumerate(curve.metrics)}
    return curve


def restricted(curve: CaseCurve, metrics: list[str]) -> CaseCurve:
    """The curve of these of its figures only."""
    idx = [curve.metrics.index(m) for m in metrics]
    return dataclasses.replace(curve, metrics=list(metrics), log_measured=curve.log_measured[idx],
                               log_pred=curve.log_pred[:, idx], zero_shot={m: curve.zero_shot[m] for m in metrics},
                               other_var={m: v for m, v in curve.other_var.items() if m in metrics})


def _unrefitted_variance(case: ValidationCase, path: str, memo: Memo) -> dict[str, float]:
    """Per metric, (ln-sensitivity x zero-shot spread)^2 summed over the case's zero-shot multipliers a calibration
    does not refit (`priors.refit_parameters`): their part of the zero-shot band (`calibration.sensitivities`)."""
    scn = build_scenario(case, source=path)
    refit = refit_parameters(scn)
    if set(zero_shot_parameters(scn)) <= set(refit):
        return {}
    try:
        sens = sensitivities(scn, None, memo)
    except PhysicsError:  # its first-principles prediction is infeasible: the curve prices it from the grid
        return {}
    out: dict[str, float] = {}
    for name, grad, row in zip(sens.names, sens.grads, sens.cov):
        if name not in refit:
            var = row[sens.names.index(name)]
            for m, g in grad.items():
                out[m] = out.get(m, 0.0) + g * g * var
    return out


def component_curves(case: ValidationCase, path: str, memo: Memo) -> list[CaseCurve]:
    """A case's curves over each multiplier a calibration refits (`priors.refit_parameters`: training; for RL
    runs also the engine and the weight update; the engine alone for a serving benchmark), each figure kept on the
    one that moves it most (its ln-slope at first principles): a rollout time is calibrated by the engine's
    multiplier, a weight update by the weight update's, as `perfmodel calibrate` fits them."""
    knobs = [name.removeprefix("stack.") for name in refit_parameters(build_scenario(case, source=path))]
    curves = [c for k in knobs if (c := case_curve(case, path, memo, k)) is not None]
    if curves:
        other = _unrefitted_variance(case, path, memo)
        for c in curves:
            c.other_var = {m: other.get(m, 0.0) for m in c.metrics}
    owner: dict[str, tuple[str, float]] = {}
    for c in curves:
        for m, g in zip(c.metrics, np.abs(c.slope(0.0))):
            if m not in owner or g > owner[m][1]:
                owner[m] = (c.knob, float(g))
    mine = [(c, [m for m in c.metrics if owner[m][0] == c.knob]) for c in curves]
    return [restricted(c, ms) for c, ms in mine if ms]


@dataclass(frozen=True, slots=True)
class Fit:
    theta: float  # log of the fitted scale
    sigma_theta: float
    sigma_resid: float  # log-space spread of the training residuals
    n_runs: int


def fit_scale(train: list[CaseCurve]) -> Fit:
    """Least squares on log errors over `train` (never the case being predicted) with the prior toward 0."""
    from scipy.optimize import minimize_scalar

    lo, hi = math.log(SCALE_GRID[0]), math.log(SCALE_GRID[-1])
    if not train:
        return Fit(0.0, PRIOR_SIGMA_LOG, RESIDUAL_SIGMA_FLOOR_LOG, 0)

    def objective(theta: float) -> float:
        r = np.concatenate([c.at(theta) - c.log_measured for c in train]) / RUN_SIGMA_LOG
        return float(r @ r) + (theta / PRIOR_SIGMA_LOG) ** 2

    theta = float(minimize_scalar(objective, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4}).x)
    resid = np.concatenate([c.at(theta) - c.log_measured for c in train])
    sigma_resid = residual_scatter(resid)
    # Gauss-Newton information: sum of squared slopes over the residual variance, plus the prior's
    info = float(sum((c.slope(theta) ** 2).sum() for c in train)) / sigma_resid ** 2 + 1 / PRIOR_SIGMA_LOG ** 2
    return Fit(theta, 1 / math.sqrt(info), sigma_resid, len(train))


def band(curve: CaseCurve, fit: Fit) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P10, P50, P90) predictions of a case's metrics under `fit`."""
    mid = curve.at(fit.theta)
    own = max(fit.sigma_resid, PLAN_SIGMA_LOG[curve.kind])  # the other runs' scatter says nothing of this run's own
    other = np.array([curve.other_var.get(m, 0.0) for m in curve.metrics])  # not refitted: at its zero-shot spread
    sd = np.sqrt(own ** 2 + (curve.slope(fit.theta) * fit.sigma_theta) ** 2 + other)
    # never wider than the zero-shot band (calibration.prediction_band's rule)
    spread = zero_shot_sigma_log(f"stack.{curve.knob}", curve.kind)
    prior = np.sqrt(RUN_SIGMA_LOG ** 2 + (curve.slope(0.0) * spread) ** 2 + other)
    sd = np.minimum(sd, prior)
    return np.exp(mid - Z90 * sd), np.exp(mid), np.exp(mid + Z90 * sd)


def _errors(curve: CaseCurve, pred: np.ndarray) -> list[float]:
    return [float(p / m - 1) for p, m in zip(pred, np.exp(curve.log_measured))]


def cross_validate(curves: list[CaseCurve], curve_k: tuple[int, ...] = (0, 1, 2, 4)) -> dict:
    """Leave-one-out within (stack, hardware) groups: zero-shot, calibrated and banded predictions of every case,
    and the learning curve (error after k calibration runs of the same group)."""
    groups: dict[tuple[tuple[str, str], str], list[CaseCurve]] = defaultdict(list)
    for c in curves:  # a multiplier is fitted per (stack, hardware) on the figures it owns
        groups[(c.group, c.knob)].append(c)
    rows = []
    # per k: the calibrated |error| of each figure with k calibration runs, and its zero-shot |error| beside it (the
    # same figures: a group with fewer other runs than k drops out of both)
    curve_err: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for ((stack, hardware), knob), members in sorted(groups.items()):
        for i, c in enumerate(members):
            # never the case itself, nor a copy of its run filed under another id (the shared cases reappear in
            # the development set)
            others = [o for j, o in enumerate(members) if j != i and (not c.run_key or o.run_key != c.run_key)]
            fit = fit_scale(others)
            p10, p50, p90 = band(c, fit)
            measured = np.exp(c.log_measured)
            for j, metric in enumerate(c.metrics):
                rows.append({"id": c.id, "run": c.run_key or c.id, "stack": stack, "hardware": hardware,
                             "kind": c.kind, "metric": metric,
                             "measured": float(measured[j]), "zero_shot": c.zero_shot[metric],
                             "calibrated": float(p50[j]), "p10": float(p10[j]), "p90": float(p90[j]),
                             "calibration_runs": len(others), "multiplier": knob, "scale": math.exp(fit.theta)})
            zero = [abs(e) for e in _errors(c, np.array(list(c.zero_shot.values())))]
            for k in curve_k:
                if k <= len(others):
                    pred = np.exp(c.at(fit_scale(others[:k]).theta)) if k else np.array(list(c.zero_shot.values()))
                    curve_err[k].extend(zip((abs(e) for e in _errors(c, pred)), zero))
    return {"rows": rows, "groups": _group_summary(rows), "learning_curve": {
        k: (_mean([e for e, _ in v]), len(v), _mean([z for _, z in v])) for k, v in sorted(curve_err.items())}}


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _summary(rows: list[dict]) -> dict:
    if not rows:
        return {"n": 0}
    zs = [abs(r["zero_shot"] / r["measured"] - 1) for r in rows]
    cal = [abs(r["calibrated"] / r["measured"] - 1) for r in rows]
    bands = band_stats(rows)
    return {"n": len(rows), "zero_shot_mae": sum(zs) / len(zs), "calibrated_mae": sum(cal) / len(cal),
            "calibrated_beyond_25": sum(e > 0.25 for e in cal) / len(cal), "coverage": bands["coverage"],
            "median_width": bands["median_width"]}


def _group_summary(rows: list[dict]) -> dict:
    by: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by[f"{r['stack']} on {r['hardware']}"].append(r)
    runs = {g: len({r["run"] for r in rs}) for g, rs in by.items()}
    out = {g: _summary(rs) | {"runs": runs[g]} for g, rs in sorted(by.items())}
    big = [r for g, rs in by.items() if runs[g] >= 3 for r in rs]
    out["overall (groups of >= 3 runs)"] = _summary(big) | {"runs": sum(n for n in runs.values() if n >= 3)}
    out["overall"] = _summary(rows) | {"runs": sum(runs.values())}
    for kind in sorted({r["kind"] for r in rows}):  # coverage and width per kind of run, as validate's by_kind
        of_kind = [r for r in rows if r["kind"] == kind]
        out[f"overall, {kind}"] = _summary(of_kind) | {"runs": len({r["run"] for r in of_kind})}
    return out


def curves_for(cases: list[tuple[ValidationCase, str]], memo: Memo | None = None,
               knob: str | None = None) -> tuple[list[CaseCurve], list]:
    """Grid curves of every case that can be predicted, over the multiplier `knob`, or (None) each figure over the
    multiplier of its component (`component_curves`); the rest as (id, reason)."""
    memo = memo if memo is not None else Memo()
    curves, failed = [], []
    for case, path in cases:
        try:
            got = component_curves(case, path, memo) if knob is None else \
                [c for c in [case_curve(case, path, memo, knob)] if c is not None]
        except InputError as err:
            failed.append((case.id, str(err)))
            continue
        if not got:
            failed.append((case.id, "no measured figure the model predicts"))
        curves.extend(got)
    return curves, failed
