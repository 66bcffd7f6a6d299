"""The settling measurement: the short run to make before choosing among a sweep's top plans (issue 24).

Candidates: each compared plan launched for SETTLE_STEPS steps, and the compared plans' smallest version (their
fewest data-parallel replicas, perfmodel/sweep/replica.py) launched as long. A launch's measured phases fix the
parameters the plans share (`perfmodel calibrate` on the run's record); a plan's own launch also measures its own
error, up to the run-to-run scatter RUN_SIGMA_LOG, which a smaller version does not (the other plans' own errors stay
unknown either way). In each of the odds' draws (perfmodel/sweep/odds.py), the plan chosen after the measurement is
the one best priced with what it revealed; a candidate's `p_best_after` is the share of draws in which that choice
is the truly best plan (the chance that the leader after the measurement is the best: the expected value of the
information, as a probability), against the leader's p_best now. Every smaller version reveals the same (the shared
parameters), so only the cheapest is a candidate. The measurement named: the highest p_best_after, the cheapest in
GPU-seconds of those within SETTLE_TOLERANCE of it.

Simplifications, said in summary.json: the shared parameters count as measured exactly (a few steps' phases pin
them far tighter than the plans' own errors spread), also at small scale, where what only the full plan has (gradient
traffic across more nodes, a weight update to more engines) is not measured; a weight update between two nodes, one
engine's rollout or a kernel lane alone are not candidates yet.
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
    sign = np.where(values >= 0, 1.0, -1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        own = sign * np.log(drawn / values) - shared  # each draw's own ln error of each plan
    estimate = shared.copy()
    if measured is not None:
        rng = np.random.default_rng(seed)
        seen = own[:, measured] + rng.normal(0.0, RUN_SIGMA_LOG, len(own))  # the launch's step, with its run noise
        sigma = float(np.broadcast_to(plan_sigma_log, values.shape)[measured])
        shrink = sigma ** 2 / (sigma ** 2 + RUN_SIGMA_LOG ** 2)  # posterior mean of the own error
        estimate[:, measured] += shrink * seen
    return float(np.mean(np.argmin(slowed(values, estimate), axis=1) == np.argmin(drawn, axis=1)))


def settle_pick(after: Sequence[float], cost: Sequence[float]) -> int:
    """The candidate to measure: the highest p_best_after, the cheapest (GPU-seconds) of those within
    SETTLE_TOLERANCE of it."""
    best = max(after)
    return min((i for i in range(len(after)) if after[i] >= best - SETTLE_TOLERANCE), key=lambda i: cost[i])


def settling_measurement(rows: list[dict[str, Any]], values: np.ndarray, shared: np.ndarray, drawn: np.ndarray,
                         plan_sigma_log: float, small: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """summary.json's `settle` for the compared top rows (ranked, each with gpus, step_time_s, plan_path): the
    launch that most raises the chance of choosing the best plan, and under `cheaper` the smaller version when it
    costs fewer GPU-seconds and still raises the leader's p best by more than SETTLE_TOLERANCE; None for a lone
    plan (nothing to settle). `small`: the compared plans' cheapest smaller version, if any (rank and label of the
    plan it cuts down, replicas and of, and its own gpus, step_time_s and plan_path)."""
    if len(rows) < 2:
        return None
    launches = [(r, p_best_after(values, shared, drawn, plan_sigma_log, i)) for i, r in enumerate(rows)]
    if small is not None:
        launches.append((small, p_best_after(values, shared, drawn, plan_sigma_log, None)))
    after = [a for _, a in launches]
    cost = [float(r["gpus"]) * SETTLE_STEPS * float(r["step_time_s"]) for r, _ in launches]
    pick = settle_pick(after, cost)
    now = float(rows[0].get("p_best", 0.0))
    out = _launch(launches[pick][0], now, after[pick], small=pick == len(rows)) | {
        "candidates": [{"rank": r["rank"], "p_best_after": round(a, 4), "gpu_s": round(c, 1)}
                       | ({} if j < len(rows) else {"small_scale": f"{r['replicas']} of {r['of']} replicas"})
                       for j, ((r, a), c) in enumerate(zip(launches, cost))],
        "assumes": "the shared parameters measured exactly by the launch, also at small scale (where traffic that "
                   "only the full plan has is not measured); whole plans and the plans' smallest version are the "
                   "candidates",
    }
    if small is not None and pick < len(rows) and cost[-1] < cost[pick] and after[-1] > now + SETTLE_TOLERANCE:
        out["cheaper"] = _launch(small, now, after[-1], small=True) | {"gpu_s_share": round(cost[-1] / cost[pick], 4)}
    return out


def _launch(row: dict[str, Any], p_best_now: float, p_best_after: float, small: bool) -> dict[str, Any]:
    """One candidate launch as summary.json says it: what it measures, the command, its size and the odds."""
    what = (f"plan {row['rank']} ({row['label']}) at small scale, {row['replicas']} of its {row['of']} "
            f"data-parallel replicas ({row['gpus']} GPUs), launched for {SETTLE_STEPS} steps: its phases calibrate "
            "the parameters the plans share") if small else \
        (f"plan {row['rank']} ({row['label']}) launched for {SETTLE_STEPS} steps: its phases calibrate the "
         "parameters the plans share, its step its own error")
    return {
        "measurement": what,
        "plan": str(row["plan_path"]),
        "command": shlex.join(["executor", "launch", "--plan", str(row["plan_path"]), "--steps",
                               str(SETTLE_STEPS)]),
        "then": "executor export RUN --out settle.yaml; perfmodel calibrate settle.yaml --out cal.yaml; "
                "perfmodel sweep ... --calibration cal.yaml",
        "gpus": int(row["gpus"]),
        "expected_s": round(SETTLE_STEPS * float(row["step_time_s"]), 1),
        "expected_s_excludes": "start-up (model load, engine start)",
        "p_best_now": round(p_best_now, 4),
        "p_best_after": round(p_best_after, 4),
    }
