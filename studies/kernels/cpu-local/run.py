"""The kernel loop on this machine: measure its kernels, calibrate the `cpu-local` profile from them, predict a
local run (issue 22, item 6).

    python studies/kernels/cpu-local/run.py [--case CASE.yaml] [--out DIR] [--quick]

1. `executor bench-kernels --hardware cpu-local` writes this host's GEMM, attention, grouped-GEMM and collective
   tables (torch on CPU, gloo);
2. `perfmodel calibrate --kernels` fits the profile's kernel parameters to them (an overlay);
3. a local GRPO run (`executor launch` of examples/local-grpo.yaml, exported as a case; or `--case`, a case this
   host measured) is predicted zero-shot and with the overlay, phase by phase.

Writes DIR/tables/, DIR/calibration.yaml, DIR/results.json and prints the table. The zero-shot prediction already
carries the run's own host probe (its matmul rate, `hardware_options`); the overlay adds what the probe does not
measure: per-kernel fixed costs, collective floors, the grouped GEMM, memory-bound rates.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
PHASES = ("rollout_time_s", "log_probs_time_s", "train_time_s", "weight_update_time_s", "step_time_s")


def _run(*argv: str) -> None:
    print("$", " ".join(argv), flush=True)
    module = "perfmodel.cli" if argv[0] == "perfmodel" else argv[0]
    subprocess.run([sys.executable, "-m", module, *argv[1:]], check=True, cwd=REPO)


def measure_case(out: Path, steps: int = 6) -> Path:
    """One local GRPO run of the shipped example, exported as a case (median of its steps after the first)."""
    store = out / "executor.sqlite"
    _run("executor", "launch", "--plan", str(REPO / "examples" / "local-grpo.yaml"), "--steps", str(steps),
         "--store", str(store), "--run-dir", str(out / "run"))
    from executor.store import Store

    (run,) = Store(store).runs()
    case = out / "case.yaml"
    _run("executor", "export", run["run_id"], "--store", str(store), "--out", str(case))
    return case


def predict(case: Path, calibration: Path | None) -> dict[str, float]:
    from perfmodel.api import validate

    report = validate([str(case)], calibration=[str(calibration)] if calibration else ())
    return {r["metric"]: r["predicted"] for r in report.rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", type=Path, help="a local run this host measured (default: measure one now)")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--quick", action="store_true", help="the microbenchmark's quick grid")
    args = ap.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    tables = out / "tables"
    if not tables.exists():
        _run("executor", "bench-kernels", "--hardware", "cpu-local", "--out", str(tables),
             *(["--quick"] if args.quick else []))
    cal = out / "calibration.yaml"
    _run("perfmodel", "calibrate", "--kernels", str(tables), "--hardware", "cpu-local", "--out", str(cal))
    case = args.case or measure_case(out)
    import yaml

    measured = yaml.safe_load(case.read_text())["measured"]
    zero, fitted = predict(case, None), predict(case, cal)
    rows = []
    for m in PHASES:
        if m in measured and m in zero:
            meas = float(measured[m]["value"] if isinstance(measured[m], dict) else measured[m])
            rows.append({"metric": m, "measured": meas, "zero_shot": zero[m], "kernel_calibrated": fitted[m],
                         "zero_shot_error": zero[m] / meas - 1, "kernel_calibrated_error": fitted[m] / meas - 1})
    (out / "results.json").write_text(json.dumps({"case": str(case), "rows": rows}, indent=2))
    print(f"{'metric':24s} {'measured':>9s} {'zero-shot':>10s} {'error':>7s} {'kernels':>9s} {'error':>7s}")
    for r in rows:
        print(f"{r['metric']:24s} {r['measured']:9.3f} {r['zero_shot']:10.3f} {r['zero_shot_error']:+7.1%} "
              f"{r['kernel_calibrated']:9.3f} {r['kernel_calibrated_error']:+7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
