"""Run every plan of the loop with the local executor and export each run as a measured case.

`python studies/calibration-loop/measure.py [--rerun] [--steps N]`: for each `plans/<id>.yaml` without a
`measured/<id>.yaml` (or all with --rerun), `executor launch` it into a scratch store and `executor export` the run
(median of the steps after one warm-up) to `measured/<id>.yaml`. Runs one plan at a time: the machine's cores are
the "GPUs", so anything else running perturbs the timings.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(plan: Path, out: Path, steps: int, work: Path) -> None:
    store = work / "executor.sqlite"
    run_dir = work / plan.stem
    subprocess.run([sys.executable, "-m", "executor", "launch", "--plan", str(plan), "--steps", str(steps),
                    "--store", str(store), "--run-dir", str(run_dir)], check=True)
    runs = subprocess.run([sys.executable, "-m", "executor", "runs", "--store", str(store)], check=True,
                          capture_output=True, text=True).stdout
    run_id = next(line.split()[0] for line in reversed(runs.splitlines()) if plan.stem in line)
    subprocess.run([sys.executable, "-m", "executor", "export", run_id, "--store", str(store), "--out", str(out)],
                   check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rerun", action="store_true", help="measure plans that already have a measured case")
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps per run (the first is left out)")
    ap.add_argument("--plans", type=Path, default=HERE / "plans")
    ap.add_argument("--out", type=Path, default=HERE / "measured")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="loop-") as tmp:
        for plan in sorted(args.plans.glob("*.yaml")):
            out = args.out / f"{plan.stem}.yaml"
            if out.exists() and not args.rerun:
                print(f"{plan.stem}: measured already ({out})")
                continue
            measure(plan, out, args.steps, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
