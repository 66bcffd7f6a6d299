"""The settling measurement: the short run to make before choosing among a sweep's top plans (issue 24).

A candidate is one of the compared plans launched for SETTLE_STEPS steps. Its measured phases fix the parameters
the plans share (`perfmodel calibrate` on the run's record), and its measured step fixes its own error, up to the
run-to-run scatter RUN_SIGMA_LOG; the other plans' own errors stay unknown. In each of the odds' draws
(perfmodel/sweep/odds.py), the plan chosen after the measurement is the one best priced with what it revealed; a
candidate's `p_best_after` is the share of draws in which that choice is the truly best plan (the chance that the
leader after the measurement is the best: the expected value of the information, as a probability), against the
leader's p_best now. The measurement named: the highest p_best_after, the cheapest in GPU-seconds of those within
SETTLE_TOLERANCE of it.

Simplifications, said in summary.json: the shared parameters count as measured exactly (a few steps' phases pin
them far tighter than the plans' own errors spread); measurements smaller than a plan's own launch (one node of it,
a weight update between two nodes, a kernel lane) are not candidates yet.
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
                 measured: int, seed: int = 0) -> float:
    """The share of draws in which the plan chosen after measuring plan `measured` is the best. `values`: the
    plans' objectives (lower is better); `shared`: each draw's ln slow-down of each plan that the parameters give
    (NaN where a plan cannot be priced); `drawn`: the objective drawn, own errors included (rank_odds);
    `plan_sigma_log`: the plans' own spread, one for all or one per plan (0 for a plan already measured)."""
    sign = np.where(values >= 0, 1.0, -1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        own = sign * np.log(drawn / values) - shared  # each draw's own ln error of each plan
    rng = np.random.default_rng(seed)
    seen = own[:, measured] + rng.normal(0.0, RUN_SIGMA_LOG, len(own))  # the launch's step, with its run noise
    sigma = float(np.broadcast_to(plan_sigma_log, values.shape)[measured])
    shrink = sigma ** 2 / (sigma ** 2 + RUN_SIGMA_LOG ** 2)  # posterior mean of the own error
    estimate = shared.copy()
    estimate[:, measured] += shrink * seen
    return float(np.mean(np.argmin(slowed(values, estimate), axis=1) == np.argmin(drawn, axis=1)))


def settle_pick(after: Sequence[float], cost: Sequence[float]) -> int:
    """The candidate to measure: the highest p_best_after, the cheapest (GPU-seconds) of those within
    SETTLE_TOLERANCE of it."""
    best = max(after)
    return min((i for i in range(len(after)) if after[i] >= best - SETTLE_TOLERANCE), key=lambda i: cost[i])


def settling_measurement(rows: list[dict[str, Any]], values: np.ndarray, shared: np.ndarray, drawn: np.ndarray,
                         plan_sigma_log: float) -> dict[str, Any] | None:
    """summary.json's `settle` for the compared top rows (ranked, each with gpus, step_time_s, plan_path): the
    launch that most raises the chance of choosing the best plan; None for a lone plan (nothing to settle)."""
    if len(rows) < 2:
        return None
    after = [p_best_after(values, shared, drawn, plan_sigma_log, i) for i in range(len(rows))]
    cost = [float(r["gpus"]) * SETTLE_STEPS * float(r["step_time_s"]) for r in rows]
    pick = settle_pick(after, cost)
    row = rows[pick]
    return {
        "measurement": f"plan {row['rank']} ({row['label']}) launched for {SETTLE_STEPS} steps: its phases calibrate "
                       "the parameters the plans share, its step its own error",
        "command": shlex.join(["executor", "launch", "--plan", str(row["plan_path"]), "--steps",
                               str(SETTLE_STEPS)]),
        "then": "executor export RUN --out settle.yaml; perfmodel calibrate settle.yaml --out cal.yaml; "
                "perfmodel sweep ... --calibration cal.yaml",
        "gpus": int(row["gpus"]),
        "expected_s": round(SETTLE_STEPS * float(row["step_time_s"]), 1),
        "expected_s_excludes": "start-up (model load, engine start)",
        "p_best_now": round(float(rows[0].get("p_best", 0.0)), 4),
        "p_best_after": round(after[pick], 4),
        "candidates": [{"rank": r["rank"], "p_best_after": round(a, 4), "gpu_s": round(c, 1)}
                       for r, a, c in zip(rows, after, cost)],
        "assumes": "the shared parameters measured exactly by the launch; only whole-plan launches are candidates",
    }
