"""The loop choosing, on published runs: several layouts of one job were measured; hide the measurements, rank the
layouts with the model, reveal only what the settling measurement names, recalibrate, rank again (issue 24 item 4;
`studies/active-measurement/`).

A job is the published runs of one model on one stack release and hardware, at one precision, sequence length and
global batch, of one kind (pretrain or rl), in different layouts, with one objective every run measured (tokens/s
or TFLOP/s per GPU where published: the cost of a token, fair between layouts on different GPU counts; else the
step, the weight update or the rollout time). Its measurements are hidden and the loop a user would follow is
played:

0. the model prices every layout zero-shot and the best priced is chosen;
1. the settling measurement (`sweep/settle.py`, as a sweep names it: the layout whose measurement most raises the
   chance of then choosing the best, the cheapest in GPU-seconds of those within tolerance) is revealed, and only
   the objective it measured; the stack multiplier that objective depends on (training, engine or weight update) is
   fitted on it as `perfmodel calibrate` fits it (`crossval.fit_scale`: least squares in ln with the prior toward
   first principles, over the grid surrogate `validate --cv` uses); the other layouts are re-priced with the fit,
   the measured one is at its measured value; the best is chosen again;
2. a second measurement chosen the same way, the draws now from the fit's uncertainty.

Regret: the chosen layout's measured objective over the best measured one (1.0: the best was chosen). The baselines,
exactly: a measurement chosen at random (the mean over every layout, every pair) and the best one in hindsight.

What this does not test, said in the study: one multiplier per job (the one its objective depends on most); the
measurement reveals the published figure, not a short launch of it (a short launch measures the same step with its
run-to-run scatter, which the choice already allows for).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from perfmodel.crossval import SCALE_GRID, CaseCurve, curves_for, fit_scale, restricted
from perfmodel.inputs.case import ValidationCase, run_key
from perfmodel.memo import Memo
from perfmodel.priors import PLAN_SIGMA_LOG, ZERO_SHOT_SIGMA_LOG, zero_shot_sigma_log
from perfmodel.sweep.odds import OWN_DRAWS, rank_odds
from perfmodel.sweep.settle import SETTLE_STEPS, p_best_after, settle_pick
from perfmodel.validation_pairs import model_key

# A job's objective: the first of these every layout measured (lower_is_better), and the multiplier it depends on.
OBJECTIVES = (("tokens_per_s_per_gpu", False, "train_compute_scale"), ("tflops_per_gpu", False, "train_compute_scale"),
              ("step_time_s", True, "train_compute_scale"),
              ("weight_update_time_s", True, "weight_update_time_scale"),
              ("rollout_time_s", True, "rollout_compute_scale"))
PARAMETER_DRAWS = 256  # draws of the multiplier per choice (each read off the grid curves: no simulation)
WITHIN = 1.05  # the target: the chosen layout within 5% of the best measured


@dataclass(slots=True)
class Job:
    """One job's layouts: each a grid curve of its objective alone, and what launching it would cost."""

    name: str
    kind: str
    metric: str
    lower_is_better: bool
    knob: str
    curves: list[CaseCurve]
    cost_gpu_s: np.ndarray  # GPUs x SETTLE_STEPS x the step priced zero-shot

    @property
    def ids(self) -> list[str]:
        return [c.id for c in self.curves]

    def objective(self, log_values: np.ndarray) -> np.ndarray:
        """Lower is better: the time, or minus the throughput."""
        return np.exp(log_values) if self.lower_is_better else -np.exp(log_values)

    @property
    def measured(self) -> np.ndarray:
        return self.objective(np.array([c.log_measured[0] for c in self.curves]))

    def log_at(self, thetas: np.ndarray) -> np.ndarray:
        """ln of each layout's priced objective at each ln-multiplier (draws x layouts): `CaseCurve.at`."""
        return np.column_stack([c.at(thetas)[0] for c in self.curves])

    def priced(self, measured: tuple[int, ...], theta: float) -> np.ndarray:
        """The objectives the chooser sees: the measured layouts at their measured values, the rest priced at
        theta."""
        values = self.objective(self.log_at(np.array([theta]))[0])
        values[list(measured)] = self.measured[list(measured)]
        return values

    def regret(self, values: np.ndarray) -> float:
        """The layout `values` put first, measured, over the best measured (>= 1)."""
        m = self.measured
        return float(m[int(np.argmin(values))] / m.min()) if self.lower_is_better else \
            float(m.min() / m[int(np.argmin(values))])


def job_cases(cases: list[tuple[ValidationCase, str]]) -> dict[str, tuple[str, list[tuple[ValidationCase, str]]]]:
    """Published runs grouped by job, each group's objective chosen (name -> (metric, members)); a run filed twice
    (the same case under two ids) counts once; groups of fewer than two layouts are dropped."""
    groups: dict[tuple, list[tuple[ValidationCase, str]]] = defaultdict(list)
    for case, path in cases:
        if case.kind not in ("pretrain", "rl") or case.train is None:
            continue
        t = case.train
        groups[(model_key(case.model), case.stack or "default", case.hardware, t.precision, t.seq_len,
                t.global_batch, case.kind)].append((case, path))
    out = {}
    for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        for metric, _, _ in OBJECTIVES:
            unique = {run_key(c): (c, p) for c, p in members if metric in dict(c.measured.items())}
            with_it = list(unique.values())
            if len(with_it) >= 2:
                model, stack, hw, precision, seq, batch, kind = key
                out[f"{model} {precision} seq {seq} batch {batch} on {hw}, {stack} ({kind})"] = (metric, with_it)
                break
    return out


def build_jobs(cases: list[tuple[ValidationCase, str]], memo: Memo | None = None) -> tuple[list[Job], list]:
    """Every job with at least two layouts the model can price; the rest as (id, reason)."""
    memo = memo if memo is not None else Memo()
    jobs, failed = [], []
    for name, (metric, members) in job_cases(cases).items():
        lower, knob = next((lo, k) for m, lo, k in OBJECTIVES if m == metric)
        curves, bad = curves_for(members, memo, knob)
        failed.extend(bad)
        curves = [restricted(c, [metric]) for c in curves if metric in c.metrics and c.step_time_s]
        if len(curves) < 2:
            continue
        gpus = {c.id: c.gpus for c, _ in members}
        cost = np.array([gpus[c.id] * SETTLE_STEPS * float(c.step_time_s) for c in curves])  # type: ignore[arg-type]
        jobs.append(Job(name, curves[0].kind, metric, lower, knob, curves, cost))
    return jobs, failed


def posterior(job: Job, measured: tuple[int, ...]) -> tuple[float, float]:
    """The multiplier's ln value and spread after the measurements: zero-shot (0, its prior) before any, else the
    calibration fit on what was measured."""
    if not measured:
        return 0.0, zero_shot_sigma_log(f"stack.{job.knob}", job.kind)
    fit = fit_scale([job.curves[k] for k in measured])
    return fit.theta, fit.sigma_theta


def next_measurement(job: Job, measured: tuple[int, ...], seed: int = 0) -> int | None:
    """The settling measurement among the layouts not measured yet (None when all are): the odds drawn from the
    multiplier's current spread and each layout's own error (none for a measured one), then `settle_pick`."""
    todo = [k for k in range(len(job.curves)) if k not in measured]
    if not todo:
        return None
    theta, sigma = posterior(job, measured)
    thetas = theta + sigma * np.random.default_rng(seed).standard_normal(PARAMETER_DRAWS)
    slow = job.log_at(thetas) - job.log_at(np.array([theta]))
    shared = slow if job.lower_is_better else -slow
    shared[:, list(measured)] = 0.0
    own = np.full(len(job.curves), PLAN_SIGMA_LOG[job.kind])
    own[list(measured)] = 0.0
    values = job.priced(measured, theta)
    _, drawn = rank_odds(values, shared, own, seed=seed + 1)
    repeated = np.repeat(shared, OWN_DRAWS, axis=0)
    after = [p_best_after(values, repeated, drawn, own, k, seed=seed + 2) for k in todo]
    return todo[settle_pick(after, list(job.cost_gpu_s[todo]))]


def regret_after(job: Job, measured: tuple[int, ...]) -> float:
    return job.regret(job.priced(measured, posterior(job, measured)[0]))


def play(job: Job, steps: int = 2) -> dict[str, Any]:
    """The loop with the settling measurement, and the same number of measurements chosen at random (the mean
    over every choice) and chosen in hindsight (the best choice: what any rule could reach)."""
    measured: tuple[int, ...] = ()
    settle = [regret_after(job, measured)]
    for _ in range(steps):
        k = next_measurement(job, measured)
        if k is not None:
            measured += (k,)
        settle.append(regret_after(job, measured))
    n = len(job.curves)
    at_random, hindsight, within_random = [settle[0]], [settle[0]], [float(settle[0] <= WITHIN)]
    for m in range(1, steps + 1):
        regrets = [regret_after(job, s) for s in combinations(range(n), min(m, n))]
        at_random.append(sum(regrets) / len(regrets))
        hindsight.append(min(regrets))
        within_random.append(sum(r <= WITHIN for r in regrets) / len(regrets))
    m = np.sort(job.measured)
    gap = float(m[1] / m[0]) if job.lower_is_better else float(m[0] / m[1])
    return {"job": job.name, "kind": job.kind, "metric": job.metric, "multiplier": job.knob, "layouts": n,
            "ids": job.ids, "measured_gap": gap, "measured_order": [job.ids[i] for i in np.argsort(job.measured)],
            "settle_picks": [job.ids[i] for i in measured], "regret_settle": settle, "regret_random": at_random,
            "regret_hindsight": hindsight, "within_random": within_random}


def summarize(rows: list[dict[str, Any]], steps: int = 2) -> dict[str, Any]:
    """Per rule (settle, random, hindsight) and number of measurements: the share of jobs whose chosen layout is
    within 5% of the best measured, and the mean regret; overall and on the decisive jobs (the best measured beats
    the second by more than 5%: where a wrong choice costs something)."""
    def one(sub: list[dict[str, Any]]) -> dict[str, Any]:
        if not sub:
            return {"jobs": 0}
        out: dict[str, Any] = {"jobs": len(sub)}
        for rule in ("settle", "random", "hindsight"):
            for m in range(steps + 1):
                r = [row[f"regret_{rule}"][m] for row in sub]
                out[f"{rule}_{m}_mean_regret"] = sum(r) / len(r)
                out[f"{rule}_{m}_within_5pct"] = (sum(row["within_random"][m] for row in sub) / len(sub)
                                                  if rule == "random" else sum(x <= WITHIN for x in r) / len(r))
        return out

    return {"all": one(rows), "decisive": one([r for r in rows if r["measured_gap"] > WITHIN]),
            "three or more layouts": one([r for r in rows if r["layouts"] >= 3])}


def study(cases: list[tuple[ValidationCase, str]], steps: int = 2) -> dict[str, Any]:
    jobs, failed = build_jobs(cases)
    rows = [play(j, steps) for j in jobs]
    return {"jobs": rows, "summary": summarize(rows, steps), "failed": failed,
            "rules": {"within": WITHIN, "parameter_draws": PARAMETER_DRAWS, "own_draws": OWN_DRAWS,
                      "plan_sigma_log": {k: round(v, 4) for k, v in PLAN_SIGMA_LOG.items()},
                      "zero_shot_sigma_log": ZERO_SHOT_SIGMA_LOG, "settle_steps": SETTLE_STEPS,
                      "measured_gap_decisive": WITHIN, "ln_grid": [round(math.log(s), 4) for s in SCALE_GRID]}}
