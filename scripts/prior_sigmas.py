"""Measure the zero-shot spread of each component's multiplier (perfmodel/priors.py) on the shipped cases.

    python scripts/prior_sigmas.py        # prints the fit and writes studies/validation/prior-sigmas.json

Every figure of every case folder is predicted zero-shot; its ln error e = ln(predicted / measured) and its
ln-sensitivities g_c to each component's multiplier (calibration.sensitivities, finite differences) give the
likelihood e ~ N(0, RUN_SIGMA_LOG^2 + sum_c (g_c sigma_c)^2). The spreads sigma_c maximize it, each case weighing
one (its figures share it: a case's step time and throughput are one measurement). The figures' own scatter
beyond the components (RUN_SIGMA_LOG) is fixed, as the bands use it.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perfmodel.calibration import Z90, sensitivities  # noqa: E402
from perfmodel.errors import InputError  # noqa: E402
from perfmodel.inputs.case import case_paths, load_case  # noqa: E402
from perfmodel.inputs.overlay import RUN_SIGMA_LOG  # noqa: E402
from perfmodel.inputs.scenario import build_scenario  # noqa: E402
from perfmodel.invariants import PhysicsError  # noqa: E402
from perfmodel.memo import Memo  # noqa: E402
from perfmodel.priors import SIGMA_KEYS, SIGMAS_FILE, sigma_key  # noqa: E402
from perfmodel.validation import band_stats  # noqa: E402
from scripts.snapshot_predictions import case_folders  # noqa: E402

Figure = tuple[str, str, float, float, np.ndarray, str]


def figures() -> list[Figure]:
    """(case, metric, ln error, the case's weight, ln-sensitivities in SIGMA_KEYS order, kind) of every scored
    figure."""
    out = []
    memo = Memo()
    for path in case_paths([str(f) for f in case_folders()]):
        case = load_case(path)
        try:
            sens = sensitivities(build_scenario(case, source=str(path)), None, memo)
        except (InputError, PhysicsError, ArithmeticError, ValueError, KeyError, IndexError, TypeError) as err:
            # a case validate reports as failed (validation.score_case catches the same): not scored here either
            print(f"skipped {case.id}: {type(err).__name__}", file=sys.stderr)
            continue
        rows = [(m, v) for m, v in case.measured.items() if v and sens.base.get(m)]
        for metric, measured in rows:
            g = np.zeros(len(SIGMA_KEYS))
            for name, grad in zip(sens.names, sens.grads):  # a serving benchmark's engine spread is its own
                g[SIGMA_KEYS.index(sigma_key(name, case.kind))] = grad[metric]
            out.append((case.id, metric, math.log(sens.base[metric] / measured), 1.0 / len(rows), g, case.kind))
    return out


def fit(rows: list[Figure]) -> np.ndarray:
    """The spreads (ln) that maximize the weighted likelihood of the figures' errors."""
    e = np.array([r[2] for r in rows])
    w = np.array([r[3] for r in rows])
    g2 = np.array([r[4] for r in rows]) ** 2

    def nll(log_sigma: np.ndarray) -> float:
        v = RUN_SIGMA_LOG ** 2 + g2 @ np.exp(2 * log_sigma)
        return float(np.sum(w * (np.log(v) + e ** 2 / v)))

    return np.exp(minimize(nll, np.full(g2.shape[1], math.log(0.3)), method="Nelder-Mead",
                           options={"xatol": 1e-4, "fatol": 1e-6, "maxiter": 4000}).x)


def band_check(rows: list[Figure], sigmas_of: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Coverage of the P10-P90 bands and their median P90/P10 (calibration.band_stats, as validate --band reports
    them), per kind and overall, each figure banded with the spreads in `sigmas_of[case]`: measured 1, predicted
    e^err, the band e^(err -/+ Z90 sd)."""
    banded = []
    for case, _, err, _, g, kind in rows:
        sd = math.sqrt(RUN_SIGMA_LOG ** 2 + float(g ** 2 @ sigmas_of[case] ** 2))
        banded.append({"kind": kind, "measured": 1.0, "p10": math.exp(err - Z90 * sd), "p90": math.exp(err + Z90 * sd)})
    out = {}
    for kind in ("all", *sorted({b["kind"] for b in banded})):
        stats = band_stats([b for b in banded if kind in ("all", b["kind"])])
        out[kind] = {"figures": stats["banded"], "coverage": round(stats["coverage"], 3),
                     "median_width": round(stats["median_width"], 2)}
    return out


def main() -> None:
    rows = figures()
    sigmas = fit(rows)
    cases = sorted({r[0] for r in rows})
    # leave one case out: its bands from the spreads the other cases give (never its own errors)
    loo = {c: fit([r for r in rows if r[0] != c]) for c in cases}
    informed = {c: int(sum(1 for r in rows if abs(r[4][i]) > 0.2)) for i, c in enumerate(SIGMA_KEYS)}
    out = {"sigma_log": {c: round(float(s), 3) for c, s in zip(SIGMA_KEYS, sigmas)},
           "figures": len(rows), "cases": len({r[0] for r in rows}),
           "figures_with_sensitivity_over_0.2": informed, "run_sigma_log": RUN_SIGMA_LOG,
           "bands_in_sample": band_check(rows, dict.fromkeys(cases, sigmas)),
           "bands_leave_one_case_out": band_check(rows, loo),
           "method": "maximum likelihood, e ~ N(0, run^2 + sum_c (g_c sigma_c)^2), each case weighing one "
                     "(scripts/prior_sigmas.py)"}
    (REPO / SIGMAS_FILE).write_text(json.dumps(out, indent=1) + "\n")
    for c, s in zip(SIGMA_KEYS, sigmas):
        print(f"{c:36s} sigma {s:.3f} (x/{math.exp(s):.2f}) from {informed[c]} figures with |g| > 0.2")
    for name in ("bands_in_sample", "bands_leave_one_case_out"):
        stats = out[name].items()
        print(name + ": " + "; ".join(f"{k} {v['coverage']:.0%} / {v['median_width']:.2f}" for k, v in stats))
    print(f"{len(rows)} figures of {out['cases']} cases -> {SIGMAS_FILE}")


if __name__ == "__main__":
    main()
