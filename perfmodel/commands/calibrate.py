"""`perfmodel calibrate`: fit a stack's knobs (and optionally hardware efficiencies) to measured runs."""

from __future__ import annotations

import argparse
import math
import shlex
import sys

from perfmodel.inputs.stack import TRAIN_FIT_KNOBS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="fit a software stack's knobs (and hardware efficiencies) to measured runs",
        description="Fit the numeric knobs of one software stack (stacks/<id>.yaml), and optionally named hardware "
        "efficiencies, to measured runs given as validation-case YAML files or folders (executor export writes "
        "them), by bounded least squares on log(predicted / measured) with a prior toward the first-principles "
        "values. Prints each parameter with its uncertainty, refuses (keeps at its first-principles value) those "
        "the runs do not inform, and writes an overlay that simulate, sweep and validate take with --calibration.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="measured runs (case files or folders)")
    p.add_argument("--stack", help="stack id to fit (framework[@release] as resolved; default: the runs' one stack)")
    p.add_argument("--hardware", help="only the runs on this hardware (required with --hardware-params)")
    p.add_argument("--params", help="comma-separated stack knobs (default: those the runs' figures depend on: "
                   f"{', '.join(TRAIN_FIT_KNOBS)}, and for RL runs every numeric knob)")
    p.add_argument("--hardware-params", help="comma-separated hardware parameters fitted jointly (e.g. "
                   "hbm_efficiency,gemm_max_efficiency_bf16); none by default: the hardware stays first principles")
    p.add_argument("--out", required=True, help="calibration overlay YAML to write")
    p.set_defaults(func=run)


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def run(args: argparse.Namespace) -> int:
    from perfmodel.api import calibrate

    cal = calibrate(args.paths, params=_names(args.params) or None, stack=args.stack, hardware=args.hardware,
                    hardware_params=_names(args.hardware_params), out=args.out,
                    command="perfmodel calibrate " + " ".join(shlex.quote(a) for a in sys.argv[2:]))
    cases = cal.provenance["fitted_on"]
    f = cal.fit
    print(f"fitted stack {cal.stack or '-'}{' on ' + cal.hardware if cal.hardware else ''} to {len(cases)} runs "
          f"({f['n_figures']} figures) in {f['seconds']:.1f} s: RMS log error {f['residual_rms_log_before']:.3f} -> "
          f"{f['residual_rms_log_after']:.3f}")
    sig = cal.sigma_log()
    for kind, params in (("stack", cal.stack_params), ("hardware", cal.hardware_params)):
        for n, v in params.items():
            s = sig.get(f"{kind}.{n}", 0.0)
            bound = " at its bound: the runs push it past what it may take" if f"{kind}.{n}" in f["at_bound"] else ""
            print(f"  {kind}.{n}: {v:.4g} (x/{math.exp(s):.3f}, one sigma){bound}")
    for k, why in cal.refused.items():
        print(f"  refused {k}: {why}")
    print(f"wrote {args.out}")
    return 0
