"""How long one `perfmodel calibrate` takes: 7 published Megatron-Bridge 26.02 runs on GB300 (issue 12 target: within
10 s on the 2-core development machine).

`python benchmarks/bench_calibrate.py` prints the seconds, evaluations and residuals of three fits on the same 7
runs: the stack's two training knobs; the same plus two hardware efficiencies fitted jointly; and a cold repeat of
the first (what a user's second call costs: nothing is cached between processes, so it should match).
"""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = sorted((ROOT / "studies" / "validation" / "mbridge-archive" / "cases").glob("mb26.02-gb300-*.yaml"))[:7]


def main() -> int:
    from perfmodel.calibration import fit_calibration
    from perfmodel.inputs.case import load_case
    from perfmodel.inputs.hardware import load_hardware

    cases = [load_case(p) for p in CASES]
    print(f"{len(cases)} runs: {', '.join(c.id for c in cases)}")
    hw = load_hardware("gb300")
    fits = (("stack: train_compute_scale, host_op_time_scale", ["train_compute_scale", "host_op_time_scale"], []),
            ("stack + hardware: + gemm_max_efficiency_bf16, hbm_efficiency",
             ["train_compute_scale", "host_op_time_scale"], ["gemm_max_efficiency_bf16", "hbm_efficiency"]),
            ("stack again", ["train_compute_scale", "host_op_time_scale"], []))
    for label, stack_names, hw_names in fits:
        t0 = time.perf_counter()
        cal = fit_calibration(cases, stack_names, hw_names, hardware=hw if hw_names else None)
        dt = time.perf_counter() - t0
        f = cal.fit
        fitted = ", ".join(f"{k}={v:.3g}" for k, v in {**cal.stack_params, **cal.hardware_params}.items())
        print(f"{label}: {dt:.1f} s, {f['evaluations']} evaluations, RMS log error "
              f"{f['residual_rms_log_before']:.3f} -> {f['residual_rms_log_after']:.3f}; {fitted}; "
              f"refused {sorted(cal.refused) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
