"""The settling measurement: the short run to make before choosing among a sweep's top plans (issue 24).

Candidates: each compared plan launched for SETTLE_STEPS steps, and three smaller launches
(perfmodel/sweep/small_scale.py): the compared plans' cheapest version at their fewest data-parallel replicas, the
cheapest rollout on one of their engines, and the cheapest weight update at their fewest replicas. A
plan's launch measures the parameters the plans share (`perfmodel calibrate` on the run's record) and its own error,
up to the run-to-run scatter RUN_SIGMA_LOG; a smaller version measures the shared parameters only; one engine's
rollout the engine's multiplier only, the weight update launch the update's multiplier only (the other plans' own
errors stay unknown either way). In each of the odds' draws (perfmodel/sweep/odds.py), the plan chosen after the
measurement is the one best priced with what it revealed; a candidate's `p_best_after` is the share of draws in
which that choice is the truly best plan (the chance that the leader after the measurement is the best: the
expected value of the information, as a probability), against the leader's p_best now. Every smaller launch of a
kind reveals the same, so only the cheapest of each kind is a candidate. The measurement named: the highest
p_best_after, the cheapest in GPU-seconds of those within SETTLE_TOLERANCE of it; `cheaper`: the best smaller
launch when it costs less and still gains.

Simplifications, said in summary.json: what a launch measures counts as measured exactly (a few steps' phases pin
the parameters far tighter than the plans' own errors spread), also at small scale, where what only the full plan
has (gradient traffic across more nodes, a weight update to more engines) is not measured; one parameter's
revelation is read through each plan's first-order response to it; a kernel lane alone is not a candidate: the
zero-shot draws are the stack's multipliers, and no kernel parameter is among them.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

import numpy as np

from perfmodel.inputs.overlay import RUN_SIGMA_LOG
from perfmodel.sweep.odds import slowed

SETTLE_STEPS = 3  # steps of the settling launch: the first is a warm-up (docs/measure.md), the median of the rest
SETTLE_TOLERANCE = 0.01  # p_best_after this close to the best candidate's: the cheaper run is named


def p_best_after(values: np.ndarray, shared: np.ndarray, drawn: np.ndarray, plan_sigma_log: float | np.ndarray,
                 measured: int | None, seed: int = 0) -> float:
    """The share of draws in which the plan chosen after measuring plan `measured` is the best. `values`: the
    plans' objectives (lower is better); `shared`: each draw's ln slow-down of each plan that the parameters give
    (NaN where a plan cannot be priced); `drawn`: the objective drawn, own errors included (rank_odds);
    `plan_sigma_log`: the plans' own spread, one for all or one per plan (0 for a plan already measured);
    `measured` None: a run that measures the shared parameters only (a smaller version of the plans)."""
    estimate = shared.copy()
    if measured is not None:
        sign = 1.0 if values[measured] >= 0 else -1.0
        with np.errstate(invalid="ignore", divide="ignore"):  # each draw's own ln error of the measured plan
            own = sign * np.log(drawn[:, measured] / values[measured]) - shared[:, measured]
        rng = np.random.default_rng(seed)
        seen = own + rng.normal(0.0, RUN_SIGMA_LOG, len(own))  # the launch's step, with its run noise
        sigma = float(np.broadcast_to(plan_sigma_log, values.shape)[measured])
        shrink = sigma ** 2 / (sigma ** 2 + RUN_SIGMA_LOG ** 2)  # posterior mean of the own error
        estimate[:, measured] += shrink * seen
    return chosen_right(values, estimate, drawn)


def chosen_right(values: np.ndarray, estimate: np.ndarray, drawn: np.ndarray) -> float:
    """The share of draws in which the plan best priced with `estimate` (each draw's ln slow-down of each plan as
    a measurement reveals it) is the best as drawn."""
    return float(np.mean(np.argmin(slowed(values, estimate), axis=1) == np.argmin(drawn, axis=1)))


def one_parameter_estimate(shared: np.ndarray, thetas: np.ndarray, k: int) -> np.ndarray:
    """Each draw's ln slow-down of each plan as a measurement of parameter `k` alone reveals it: per plan, `shared`
    regressed on every parameter over the draws (least squares, without the draws the plan cannot be priced in),
    then the other parameters at their mean (0). First order in the parameters; the truth stays the exact draws."""
    x = np.column_stack([np.ones(len(thetas)), thetas])
    estimate = np.empty_like(shared)
    for j in range(shared.shape[1]):
        ok = np.isfinite(shared[:, j])
        if ok.sum() <= x.shape[1]:  # too few draws to fit: the plan as if nothing were revealed
            estimate[:, j] = np.nanmean(shared[:, j]) if ok.any() else np.nan
            continue
        coef = np.linalg.lstsq(x[ok], shared[ok, j], rcond=None)[0]
        estimate[:, j] = coef[0] + coef[1 + k] * thetas[:, k]
    return estimate


def settle_pick(after: Sequence[float], cost: Sequence[float]) -> int:
    """The candidate to measure: the highest p_best_after, the cheapest (GPU-seconds) of those within
    SETTLE_TOLERANCE of it."""
    best = max(after)
    return min((i for i in range(len(after)) if after[i] >= best - SETTLE_TOLERANCE), key=lambda i: cost[i])


def settling_measurement(rows: list[dict[str, Any]], values: np.ndarray, shared: np.ndarray, drawn: np.ndarray,
                         plan_sigma_log: float, small: dict[str, Any] | None = None,
                         engine: dict[str, Any] | None = None, thetas: np.ndarray | None = None,
                         names: tuple[str, ...] = (), update: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """summary.json's `settle` for the compared top rows (ranked, each with gpus, step_time_s, plan_path): the
    launch that most raises the chance of choosing the best plan, and under `cheaper` the cheapest smaller launch
    when it costs fewer GPU-seconds and still raises the leader's p best by more than SETTLE_TOLERANCE; None for a
    lone plan (nothing to settle). `small`: the compared plans' cheapest smaller version (rank and label of the plan
    it cuts down, replicas and of, and its own gpus, step_time_s and plan_path); `engine`: the cheapest rollout on
    one engine (rank, label, engines, gpus, step_time_s: its rollout, plan_path, parameter: the multiplier it
    measures) and `update`: the cheapest weight update at the fewest replicas and one engine (rank, label,
    replicas, of, gpus, step_time_s: its launch's whole step, update_s, plan_path, parameter), each priced through
    `thetas` (the odds' parameter draws, named `names`)."""
    if len(rows) < 2:
        return None
    launches = [("plan", r, p_best_after(values, shared, drawn, plan_sigma_log, i)) for i, r in enumerate(rows)]
    if small is not None:
        launches.append(("small", small, p_best_after(values, shared, drawn, plan_sigma_log, None)))
    for kind, one in (("engine", engine), ("update", update)):  # a launch that reveals one multiplier alone
        if one is not None and thetas is not None and one["parameter"] in names:
            k = names.index(one["parameter"])
            launches.append((kind, one, chosen_right(values, one_parameter_estimate(shared, thetas, k), drawn)))
    after = [a for _, _, a in launches]
    cost = [float(r["gpus"]) * SETTLE_STEPS * float(r["step_time_s"]) for _, r, _ in launches]
    pick = settle_pick(after, cost)
    now = float(rows[0].get("p_best", 0.0))
    out = _launch(*launches[pick], now) | {
        "candidates": [{"rank": r["rank"], "p_best_after": round(a, 4), "gpu_s": round(c, 1)} | _size(kind, r)
                       for (kind, r, a), c in zip(launches, cost)],
        "assumes": "what a launch measures, measured exactly: the parameters the plans share (whole plans, and "
                   "their smallest version, where traffic that only the full plan has is not measured), the engine's "
                   "multiplier alone (a rollout on one engine) and the weight update's alone (an update at the "
                   "fewest replicas), each read through each plan's first-order response to it; a plan's own "
                   "launch also its own error",
    }
    smaller = [i for i in range(len(rows), len(launches))
               if cost[i] < cost[pick] and after[i] > now + SETTLE_TOLERANCE]
    if pick < len(rows) and smaller:
        best = settle_pick([after[i] for i in smaller], [cost[i] for i in smaller])
        i = smaller[best]
        out["cheaper"] = _launch(*launches[i], now) | {"gpu_s_share": round(cost[i] / cost[pick], 4)}
    return out


def _size(kind: str, row: dict[str, Any]) -> dict[str, Any]:
    """How a smaller candidate cuts its plan down (summary.json's candidates)."""
    if kind == "small":
        return {"small_scale": f"{row['replicas']} of {row['of']} replicas"}
    if kind == "engine":
        return {"small_scale": f"rollout alone on 1 of {row['engines']} engines"}
    if kind == "update":
        return {"small_scale": f"weight update alone, {row['replicas']} of {row['of']} replicas and 1 engine "
                               f"({row['gpus']} GPUs)"}
    return {}


def _launch(kind: str, row: dict[str, Any], p_best_after: float, p_best_now: float) -> dict[str, Any]:
    """One candidate launch as summary.json says it: what it measures, the command, its size and the odds."""
    if kind == "small":
        what = (f"plan {row['rank']} ({row['label']}) at small scale, {row['replicas']} of its {row['of']} "
                f"data-parallel replicas ({row['gpus']} GPUs), launched for {SETTLE_STEPS} steps: its phases "
                "calibrate the parameters the plans share")
    elif kind == "engine":
        what = (f"the rollout of plan {row['rank']} ({row['label']}) alone on one of its {row['engines']} engines "
                f"(that engine's share of the prompts, no trainer), launched for {SETTLE_STEPS} steps: its rollout "
                "calibrates the engine's multiplier")
    elif kind == "update":
        what = (f"the weight update of plan {row['rank']} ({row['label']}) from {row['replicas']} of its "
                f"{row['of']} training replicas to one engine ({row['gpus']} GPUs, a token-sized rollout and batch "
                f"around it), launched for {SETTLE_STEPS} steps: its update (about {float(row['update_s']):.0f} s "
                "priced) calibrates the weight update's multiplier")
    else:
        what = (f"plan {row['rank']} ({row['label']}) launched for {SETTLE_STEPS} steps: its phases calibrate the "
                "parameters the plans share, its step its own error")
    return {
        "measurement": what,
        "plan": str(row["plan_path"]),
        "command": shlex.join(["executor", "launch", "--plan", str(row["plan_path"]), "--steps",
                               str(SETTLE_STEPS)]),
        # a rollout or an update alone informs one component's knobs, one figure for several: fit the multiplier
        # the odds drew
        "then": "executor export RUN --out settle.yaml; perfmodel calibrate settle.yaml "
                + (f"--params {row['parameter'].removeprefix('stack.')} " if kind in ("engine", "update") else "")
                + "--out cal.yaml; perfmodel sweep ... --calibration cal.yaml",
        "gpus": int(row["gpus"]),
        "expected_s": round(SETTLE_STEPS * float(row["step_time_s"]), 1),
        "expected_s_excludes": "start-up (model load, engine start)",
        "p_best_now": round(p_best_now, 4),
        "p_best_after": round(p_best_after, 4),
    }
