"""How sure a sweep's ranking is: the top plans re-priced under joint draws of what the model is unsure of.

Most of the model's error is shared by the plans of one sweep (one stack, one hardware, one engine): a factor that
slows every plan alike cannot change their order. So each draw of the uncertain parameters is the same for every
plan (common random numbers), and each plan is re-priced exactly under it (`calibration.repriced`: a first-order
draw through sensitivities misses the kinks of a step, as when a slower rollout becomes the critical path of an
async plan: benchmarks/odds_linearity.py measures a median ln-error of 0.03 but a P90 of 0.59 on the default
sweep's top plans; with one uncertain parameter, as a pretraining sweep has, exactly on a grid of it:
`_repriced_draws`). Each plan also gets its own error, independent between plans (PLAN_SIGMA_LOG, measured on
published pairs), OWN_DRAWS times per parameter draw. Then, per top plan: `p_best`, the share of draws in which it
is the best of the compared plans, and `tie_group`: plans the draws cannot tell apart share a group (the rule:
`tie_groups`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.memo import Memo
from perfmodel.priors import PLAN_SIGMA_LOG

PARAMETER_DRAWS = 32  # draws of the shared parameters, each an exact re-pricing of every compared plan
OWN_DRAWS = 64  # draws of each plan's own error per parameter draw: 2,048 in all, p_best to about +-0.01
TIE_CONFIDENCE = 0.9  # a plan is told apart from its group's head when the head beats it in 90% of the draws
ODDS_PLANS = 10  # top plans compared (each costs PARAMETER_DRAWS simulations, or about GRID_POINTS with one parameter)
# One uncertain parameter (a pretraining sweep's compute multiplier, where its host's moves none of its plans:
# `_moving`): each plan is re-priced exactly at GRID_POINTS values of it across +-GRID_SIGMAS of its spread and each
# draw read off the line through them, kinks included to the grid's spacing: 9 simulations instead of 32 per plan
# (benchmarks/bench_sweep_odds.py on the 4,096-GPU GPT-3 sweep: odds 9.4 -> 4.7 s, against 1.5 s evaluating its
# plans); draws past the grid take its last slope.
GRID_POINTS = 9
GRID_SIGMAS = 3.0


def rank_odds(values: np.ndarray, shared: np.ndarray, plan_sigma_log: float | np.ndarray,
              own_draws: int = OWN_DRAWS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """For plans with objective `values` (lower is better; a negative one, such as -tokens/s, improves as the plan
    speeds up) and `shared` (parameter draws x plans): the ln-factor by which each draw slows each plan. Each draw
    is repeated `own_draws` times with each plan's own error added (`plan_sigma_log`: one spread for all, or one
    per plan, 0 for a plan already measured). Returns each plan's share of draws in which it
    is best, and the objective drawn (draws x plans)."""
    rng = np.random.default_rng(seed)
    slow = np.repeat(shared, own_draws, axis=0)
    if np.any(np.asarray(plan_sigma_log) > 0):
        slow = slow + rng.normal(0.0, plan_sigma_log, size=slow.shape)
    drawn = slowed(values, slow)
    return np.bincount(np.argmin(drawn, axis=1), minlength=len(values)) / len(drawn), drawn


def slowed(values: np.ndarray, slow: np.ndarray) -> np.ndarray:
    """The objectives `values` with each plan slowed by `slow` (draws x plans, ln): a time grows, a negative
    objective (-tokens/s) shrinks toward zero; inf (lost) where the slow-down is not finite (the plan cannot be
    priced in that draw)."""
    with np.errstate(invalid="ignore", over="ignore"):
        drawn = values[None, :] * np.exp(np.where(values[None, :] >= 0, slow, -slow))
    return np.where(np.isfinite(slow), drawn, np.inf)


def beats(drawn: np.ndarray, i: int, j: int) -> float:
    """The share of draws in which plan i beats plan j."""
    return float(np.mean(drawn[:, i] < drawn[:, j]))


def tie_groups(n: int, beats: Callable[[int, int], float]) -> list[int]:
    """Groups of consecutive plans in rank order: a plan joins the current group unless the group's first plan
    beats it (`beats(i, j)`: the share of draws in which i beats j) in TIE_CONFIDENCE of the draws, when it starts
    the next group. Ids from 1."""
    group: list[int] = []
    head = current = 0
    for j in range(n):
        if j == 0 or beats(head, j) >= TIE_CONFIDENCE:
            head, current = j, current + 1
        group.append(current)
    return group


@dataclass
class Odds:
    """How the compared plans' odds were drawn (`info`, for summary.json) and the draws (the settling measurement
    reads them): the plans' objective `values`, `shared` (draws x plans: the ln slow-down the parameters give, each
    parameter draw repeated OWN_DRAWS times; NaN where a plan cannot be priced) and `drawn` (the objective with each
    plan's own error too); `names` and `thetas` (draws x parameters, ln, repeated as `shared` is): each draw's
    parameter values, so a measurement of one of them can be priced (perfmodel/sweep/settle.py)."""

    info: dict[str, Any]
    values: np.ndarray
    shared: np.ndarray
    drawn: np.ndarray
    plan_sigma_log: float
    names: tuple[str, ...] = ()
    thetas: np.ndarray | None = None


def add_odds(top_rows: list[dict[str, Any]], by_index: dict[int, Any], hw: Any, cal: Any,
             seed: int = 0) -> Odds | None:
    """`p_best`, `tie_group` and `draws_lost` in each of the first ODDS_PLANS top rows (ranked, best first): p_best is
    the share of draws in which the plan is the best of those; draws_lost, the parameter draws that break the plan's
    physics (out of memory, an impossible result), each counted as a draw it loses. Returns the odds (None without
    plans)."""
    from perfmodel.calibration import uncertain_parameters
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.scenario import build_scenario

    top_rows = top_rows[:ODDS_PLANS]
    if not top_rows:
        return None
    memo = Memo()
    overlay = cal.uncertainty_only() if cal else None
    scns = [build_scenario(RunSpec.model_validate(by_index[r["index"]].run), hardware=hw) for r in top_rows]
    _, names, cov, _ = uncertain_parameters(scns[0], overlay)
    cov_log = np.array(cov, dtype=float).reshape(len(names), len(names))
    if len(names) == 2:  # a pretraining sweep's compute and host: the host alone may move none of its plans
        names, cov_log = _moving(scns, overlay, names, cov_log, memo)
    rng = np.random.default_rng(seed)
    thetas = rng.multivariate_normal(np.zeros(len(names)), cov_log, size=PARAMETER_DRAWS) if names else \
        np.zeros((PARAMETER_DRAWS, 0))
    ratio = np.column_stack([_repriced_draws(s, overlay, thetas, cov_log, memo) for s in scns])
    shared = np.log(ratio)  # NaN where a draw breaks the plan's physics: rank_odds counts it lost
    values = np.array([float(r["objective_value"]) for r in top_rows])
    kind = "rl" if scns[0].run.rl else "pretrain"
    p_best, drawn = rank_odds(values, shared, PLAN_SIGMA_LOG[kind], seed=seed + 1)
    groups = tie_groups(len(top_rows), lambda i, j: beats(drawn, i, j))
    lost = np.sum(~np.isfinite(shared), axis=0)
    for row, p, g, n in zip(top_rows, p_best, groups, lost):
        row["p_best"], row["tie_group"], row["draws_lost"] = round(float(p), 4), g, int(n)
    spread = bool(np.any(np.diag(cov_log) > 0))
    info = {"plans": len(top_rows), "parameter_draws": PARAMETER_DRAWS, "own_draws": OWN_DRAWS,
            "parameters": list(names) if spread else [], "plan_sigma_log": round(PLAN_SIGMA_LOG[kind], 4),
            "tie_confidence": TIE_CONFIDENCE,
            "repricing": "exact at each draw" if len(names) != 1 or not spread else
                         f"exact at {GRID_POINTS} values of the one parameter (+-{GRID_SIGMAS:g} sigma), linear in ln "
                         "between; exact past a value that breaks a plan's physics (at most 0.7% from exact "
                         "re-pricing on the H100 Llama 3 and GPT-3 cases tried)",
            "basis": "shared parameters and each plan's own error" if spread else
                     "each plan's own error only: the calibration gives its parameters no uncertainty"}
    return Odds(info, values, np.repeat(shared, OWN_DRAWS, axis=0), drawn, PLAN_SIGMA_LOG[kind],
                tuple(names) if spread else (), np.repeat(thetas, OWN_DRAWS, axis=0) if spread else None)


def _moving(scns: list[Any], overlay: Any, names: list[str], cov_log: np.ndarray, memo: Memo
            ) -> tuple[list[str], np.ndarray]:
    """The parameters up to the last that moves some plan's step (each tried at +1 sigma on every plan), with their
    covariance: a parameter that moves none (a host no plan is bound by) cannot reorder them, and leaving it out
    lets one parameter's draws be read off its grid (`_repriced_draws`). Only trailing ones are left out:
    `calibration.repriced` reads a draw's columns in the parameters' order."""
    from perfmodel.calibration import repriced

    sd = np.sqrt(np.clip(np.diag(cov_log), 0.0, None))
    moved = np.zeros(len(names), dtype=bool)
    for scn in scns:
        ratio = repriced(scn, overlay, np.diag(sd), "step_time_s", memo)
        moved |= ~np.isfinite(ratio) | (np.abs(ratio - 1.0) > 1e-9)
    keep = 1 + max((i for i in range(len(names)) if moved[i] or sd[i] == 0), default=0)
    return names[:keep], cov_log[:keep, :keep]


def _repriced_draws(scn: Any, overlay: Any, thetas: np.ndarray, cov_log: np.ndarray, memo: Memo) -> np.ndarray:
    """The step's ratio to its undrawn value at each draw (`calibration.repriced`). One parameter with a spread: exact
    at the GRID_POINTS grid, linear in ln between (and past it, on the end segments' slopes); a draw beyond a grid
    value the model cannot price (NaN: the parameter breaks the plan's physics there) is re-priced exactly, as every
    draw is with several parameters."""
    from perfmodel.calibration import repriced

    if thetas.shape[1] != 1 or cov_log[0, 0] <= 0:
        return repriced(scn, overlay, thetas, "step_time_s", memo)
    sd = math.sqrt(float(cov_log[0, 0]))
    grid = np.linspace(-GRID_SIGMAS * sd, GRID_SIGMAS * sd, GRID_POINTS)
    at_grid = repriced(scn, overlay, grid[:, None], "step_time_s", memo)
    good = np.flatnonzero(np.isfinite(at_grid) & (at_grid > 0))
    if len(good) < 2 or good[-1] - good[0] + 1 != len(good):  # no finite run to read draws off
        return repriced(scn, overlay, thetas, "step_time_s", memo)
    g, y = grid[good], np.log(at_grid[good])
    x = thetas[:, 0]
    out = np.interp(x, g, y)
    out = np.where(x < g[0], y[0] + (x - g[0]) * (y[1] - y[0]) / (g[1] - g[0]), out)
    out = np.where(x > g[-1], y[-1] + (x - g[-1]) * (y[-1] - y[-2]) / (g[-1] - g[-2]), out)
    ratio = np.exp(out)
    # past a grid point that could not be priced, the line means nothing: those draws exactly
    beyond = ((x < g[0]) & (good[0] > 0)) | ((x > g[-1]) & (good[-1] < GRID_POINTS - 1))
    if beyond.any():
        ratio[beyond] = repriced(scn, overlay, thetas[beyond], "step_time_s", memo)
    return ratio
