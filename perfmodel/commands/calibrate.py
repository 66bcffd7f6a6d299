"""`perfmodel calibrate`: fit a stack's knobs (and optionally hardware efficiencies) to measured runs."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from typing import TYPE_CHECKING

from perfmodel.commands.kernels import add_rows_per_table, rows_per_table
from perfmodel.inputs.stack import TRAIN_FIT_KNOBS

if TYPE_CHECKING:
    from perfmodel.calibration import Calibration


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="fit a software stack's knobs (and hardware efficiencies) to measured runs",
        description="Fit the numeric knobs of one software stack (stacks/<id>.yaml), and optionally named hardware "
        "efficiencies, to measured runs given as validation-case YAML files or folders (executor export writes "
        "them), by bounded least squares on log(predicted / measured) with a prior toward the first-principles "
        "values. Prints each parameter with its uncertainty, refuses (keeps at its first-principles value) those "
        "the runs do not inform, and writes an overlay that simulate, sweep and validate take with --calibration.")
    p.add_argument("paths", nargs="*", metavar="PATH", help="measured runs (case files or folders)")
    p.add_argument("--kernels", action="append", metavar="TABLES",
                   help="fit the hardware's kernel parameters to measured kernel tables instead (executor "
                   "bench-kernels output or any table in docs/kernels.md's format; a file or folder, repeatable); "
                   "needs --hardware")
    add_rows_per_table(p, "with --kernels: ")
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
    from perfmodel.api import calibrate, calibrate_kernels
    from perfmodel.errors import InputError
    from perfmodel.files import writable_file

    command = "perfmodel calibrate " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    if args.out:
        writable_file(args.out, "--out")
    if args.kernels:
        if not args.hardware:
            raise InputError("perfmodel calibrate", "--hardware", "--kernels fits one hardware profile: add "
                             "--hardware <id>")
        if args.paths:
            raise InputError("perfmodel calibrate", "PATH", "give measured runs or --kernels tables, not both")
        cal = calibrate_kernels(args.kernels, hardware=args.hardware, hardware_params=_names(args.hardware_params),
                                out=args.out, command=command, rows_per_table=rows_per_table(args))
        _print_fit(cal, f"hardware {cal.hardware} to {cal.fit['n_figures']} kernel rows", args.out)
        return 0
    if not args.paths:
        raise InputError("perfmodel calibrate", "PATH", "no measured run given (or use --kernels TABLES)")

    cal = calibrate(args.paths, params=_names(args.params) or None, stack=args.stack, hardware=args.hardware,
                    hardware_params=_names(args.hardware_params), out=args.out, command=command)
    cases = cal.provenance["fitted_on"]
    what = (f"stack {cal.stack or '-'}{' on ' + cal.hardware if cal.hardware else ''} to {len(cases)} runs "
            f"({cal.fit['n_figures']} figures)")
    _print_fit(cal, what, args.out)
    return 0


def _print_fit(cal: Calibration, what: str, out: str) -> None:
    f = cal.fit
    print(f"fitted {what} in {f['seconds']:.1f} s: RMS log error {f['residual_rms_log_before']:.3f} -> "
          f"{f['residual_rms_log_after']:.3f}")
    sig = cal.sigma_log()
    for kind, params in (("stack", cal.stack_params), ("hardware", cal.hardware_params)):
        for n, v in params.items():
            s = sig.get(f"{kind}.{n}", 0.0)
            bound = " at its bound: the runs push it past what it may take" if f"{kind}.{n}" in f["at_bound"] else ""
            print(f"  {kind}.{n}: {v:.4g} (x/{math.exp(s):.3f}, one sigma){bound}")
    for k, why in cal.refused.items():
        print(f"  refused {k}: {why}")
    print(f"wrote {out}")
