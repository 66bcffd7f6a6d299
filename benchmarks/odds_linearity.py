"""How far the sweep's first-order draws (perfmodel/sweep/odds.py, through `calibration.sensitivities`) are from
re-pricing each draw exactly: the default sweep's top plans at `--nodes`, N joint draws of the zero-shot prior's
parameters, each plan's step re-simulated with the drawn multipliers, against exp(g . theta) x step. Prints the
ln-error of the step and p_best both ways (the plans' own error left out: it is the same in both). Asserts nothing.

    python benchmarks/odds_linearity.py [--nodes 4] [--top 5] [--draws 40]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfmodel.api import sweep
from perfmodel.calibration import repriced, sensitivities
from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.plan import load_plan
from perfmodel.inputs.scenario import build_scenario
from perfmodel.memo import Memo
from perfmodel.sweep.spec import default_sweep_path, load_sweep_spec, parse_nodes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="4")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--draws", type=int, default=40)
    args = ap.parse_args()
    spec = load_sweep_spec(default_sweep_path()).model_copy(update={"nodes": parse_nodes(args.nodes)})
    hw = load_hardware(spec.hardware)
    with tempfile.TemporaryDirectory() as d:
        ranking = sweep(spec, out=Path(d) / "s", top=args.top, report=False)
        scns = [build_scenario(load_plan(p["plan_path"]), hardware=hw) for p in ranking.top]
    memo = Memo()
    sens = [sensitivities(s, None, memo) for s in scns]
    names, cov = sens[0].names, np.array(sens[0].cov)
    theta = np.random.default_rng(0).multivariate_normal(np.zeros(len(names)), cov, size=args.draws)
    # each plan's step over its base step: through its first-order sensitivities, and re-priced exactly
    linear = np.exp(theta @ np.array([[gr["step_time_s"] for gr in s.grads] for s in sens]).T)
    exact = np.column_stack([repriced(scn, None, theta, "step_time_s", memo) for scn in scns])
    err = np.abs(np.log(linear / exact))
    print(f"{len(scns)} top plans of the default sweep at nodes {list(spec.nodes)}, {args.draws} draws of "
          f"{', '.join(names)} (prior sigma ln 2 each)")
    print(f"step ln-error of the first-order draw: median {np.median(err):.4f}, P90 {np.percentile(err, 90):.4f}, "
          f"max {err.max():.4f}")
    steps = np.array([s.base["step_time_s"] for s in sens])
    for name, drawn in (("first order", linear * steps), ("exact", exact * steps)):
        p = np.bincount(np.argmin(drawn, axis=1), minlength=len(scns)) / args.draws
        print(f"p_best ({name}, shared parameters only): {' '.join(f'{x:.2f}' for x in p)}")


if __name__ == "__main__":
    main()
