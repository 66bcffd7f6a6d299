"""`perfmodel calibrate`: fit named efficiency parameters of one hardware profile to measured runs."""

from __future__ import annotations

import argparse

from perfmodel.errors import InputError

DEFAULT_PARAMS = ("gemm_max_efficiency_bf16", "gemm_max_efficiency_fp8", "hbm_efficiency",
                  "all_to_all_efficiency_scale_up", "all_to_all_efficiency_scale_out")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="fit a hardware profile's efficiency parameters to measured runs",
        description="Fit named parameters of one hardware profile (HardwareProfile.calibration_params) to the "
        "measured runs given as validation-case YAML files or folders, by least squares on log(predicted / "
        "measured), and write a calibration overlay that simulate, sweep and validate take with --calibration. "
        "Only cases on that hardware are used; parameters the cases cannot inform stay where they start.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="measured runs (case files or folders)")
    p.add_argument("--hardware", required=True, help="hardware id whose parameters to fit")
    p.add_argument("--params", help="comma-separated parameter names (default: GEMM max efficiencies of the "
                   "precisions used, HBM and all-to-all efficiencies)")
    p.add_argument("--out", required=True, help="calibration overlay YAML to write")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfmodel.calibration import fit_calibration, write_calibration
    from perfmodel.inputs.case import case_paths, load_case
    from perfmodel.inputs.hardware import load_hardware

    hw = load_hardware(args.hardware, field="--hardware")
    cases = [load_case(p) for p in case_paths(args.paths)]
    cases = [c for c in cases if c.hardware == hw.id]
    if not cases:
        raise InputError(", ".join(args.paths), "hardware", f"no measured run on {hw.id} among the given cases")
    if args.params:
        names = [n.strip() for n in args.params.split(",") if n.strip()]
    else:
        used = {c.train.precision for c in cases} | {c.rl.rollout.precision for c in cases if c.rl}
        names = [n for n in DEFAULT_PARAMS if not n.startswith("gemm_") or n.rsplit("_", 1)[1] in used]
    params, report = fit_calibration(cases, hw, names)
    write_calibration(args.out, hw.id, params, [c.id for c in cases], report)
    print(f"fitted {len(names)} parameters of {hw.id} on {len(cases)} runs ({report['n_residuals']} metrics): "
          f"RMS log error {report['residual_rms_before']:.3f} -> {report['residual_rms_after']:.3f}")
    for n, v in params.items():
        print(f"  {n}: {hw.calibration_params()[n]:.4g} -> {v:.4g}")
    print(f"wrote {args.out}")
    return 0
