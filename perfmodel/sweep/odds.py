"""How sure a sweep's ranking is: the top plans re-priced under joint draws of what the model is unsure of.

Most of the model's error is shared by the plans of one sweep (one stack, one hardware, one engine): a factor that
slows every plan alike cannot change their order. So each draw moves every plan by the same draw of the uncertain
parameters (common random numbers), each plan by its own sensitivity to them (`calibration.sensitivities`: d ln step
/ d ln parameter by finite differences, first order: not an exact re-pricing), plus a part that is each plan's own,
independent between plans (PLAN_SIGMA_LOG, measured on published pairs). Then, per top plan: `p_best`, the share of
draws in which it is the best of the top plans, and `tie_group`: plans the draws cannot tell apart share a group
(the rule: `tie_groups`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from perfmodel.memo import Memo

# The part of a prediction's error that is a plan's own, in ln units, by the job's kind: the scatter of predicted
# ln(ratio) about measured ln(ratio) over pairs of published runs of one model on the same hardware and stack release
# (the choice a sweep makes), divided by sqrt(2) (a pair carries two plans' errors; what they share cancels in the
# ratio). Source: `perfmodel validate --json` over studies/validation/cases and studies/validation/*/cases,
# pairs.same_hardware_and_stack.ratio_error_sigma_log_by_kind: pretrain 0.132 (38 pairs), rl 0.326 (8 pairs: the
# weight update, the engine); tests/test_validation_pairs.py checks these against the cases.
PLAN_SIGMA_LOG = {"pretrain": 0.132 / math.sqrt(2), "rl": 0.326 / math.sqrt(2)}
DRAWS = 2000  # joint draws: p_best to about +-0.01 (binomial standard error at 0.5: 0.011)
TIE_CONFIDENCE = 0.9  # a plan is told apart from its group's head when the head beats it in 90% of the draws
ODDS_PLANS = 50  # top plans compared (each costs about 0.1 s of re-pricing here: three simulations)


def rank_odds(values: np.ndarray, grads: np.ndarray, cov: np.ndarray, plan_sigma_log: float, draws: int = DRAWS,
              seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """For plans with objective `values` (lower is better; a negative one, such as -tokens/s, improves as the plan
    speeds up) and ln-sensitivities `grads` (plans x parameters) to parameters of ln-covariance `cov`: each plan's
    share of draws in which it is best, and the objective drawn (draws x plans)."""
    n, k = grads.shape
    rng = np.random.default_rng(seed)
    theta = rng.multivariate_normal(np.zeros(k), cov, size=draws) if k else np.zeros((draws, 0))
    own = rng.normal(0.0, plan_sigma_log, size=(draws, n)) if plan_sigma_log > 0 else np.zeros((draws, n))
    slow = theta @ grads.T + own  # ln of each plan's step time factor, per draw
    drawn = values[None, :] * np.exp(np.where(values[None, :] >= 0, slow, -slow))
    return np.bincount(np.argmin(drawn, axis=1), minlength=n) / draws, drawn


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


def add_odds(top_rows: list[dict[str, Any]], by_index: dict[int, Any], hw: Any, cal: Any,
             draws: int = DRAWS) -> None:
    """`p_best` and `tie_group` in each of the first ODDS_PLANS top rows (ranked, best first): p_best is the share of
    draws in which the plan is the best of those."""
    from perfmodel.calibration import sensitivities
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.scenario import build_scenario

    top_rows = top_rows[:ODDS_PLANS]
    if not top_rows:
        return
    memo = Memo()
    sens = [sensitivities(build_scenario(RunSpec.model_validate(by_index[r["index"]].run), hardware=hw),
                          cal.uncertainty_only() if cal else None, memo) for r in top_rows]
    names = sens[0].names
    if any(s.names != names for s in sens):
        raise ValueError("plans of one sweep are uncertain in different parameters")
    grads = np.array([[g.get("step_time_s", 0.0) for g in s.grads] for s in sens]).reshape(len(sens), len(names))
    values = np.array([float(r["objective_value"]) for r in top_rows])
    kind = "rl" if by_index[top_rows[0]["index"]].run.get("rl") else "pretrain"
    p_best, drawn = rank_odds(values, grads, np.array(sens[0].cov).reshape(len(names), len(names)),
                              PLAN_SIGMA_LOG[kind], draws)
    groups = tie_groups(len(top_rows), lambda i, j: beats(drawn, i, j))
    for row, p, g in zip(top_rows, p_best, groups):
        row["p_best"], row["tie_group"] = round(float(p), 4), g
