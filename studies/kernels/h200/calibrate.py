"""The microbenchmark's loop on a real GPU, held out: calibrate the `h200` profile from some of the lent H200's
shapes, check the others (issue 22, item 6, as a user with their own cluster would run it).

    python studies/kernels/h200/calibrate.py [--out DIR]      (default DIR: perfmodel-h200-calibrate in the temp folder)

The H200's rows split by model shape, so the check is on shapes the fit never saw: the fit takes the GEMMs of the
8B model's projections (N x K of 4096 x 4096, 6144 x 4096, 28672 x 4096, 4096 x 14336), the 30B-A3B and
DeepSeek-V3 expert layers and the 32-head attention; the check takes the DeepSeek-sized GEMMs (7168 x 2048,
2048 x 7168), DeepSeek-V4-Flash's expert layer and the 64-head prefill. Writes DIR/fit/ and DIR/check/ (the two
halves as tables), DIR/calibration.yaml, and prints the held-out lanes zero-shot and calibrated.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def held_out(row: dict[str, str]) -> bool:
    """The rows the fit never sees (the DeepSeek-sized shapes and the 64-head prefill)."""
    shape = dict(part.split("=") for part in row["shape"].split())
    if row["op"] == "gemm":
        return (shape["n"], shape["k"]) in (("7168", "2048"), ("2048", "7168"))
    if row["op"] == "grouped_gemm":
        return shape["hidden"] == "4096"
    return shape["heads"] == "64"


def split(tables: Path, out: Path) -> tuple[Path, Path]:
    """Each table's rows into DIR/fit and DIR/check (comment lines kept in both)."""
    fit_dir, check_dir = out / "fit", out / "check"
    for d in (fit_dir, check_dir):
        d.mkdir(parents=True, exist_ok=True)
    for table in sorted(tables.glob("*.csv")):
        lines = table.read_text().splitlines()
        comments = [ln for ln in lines if ln.startswith("#")]
        header, *rows = [ln for ln in lines if not ln.startswith("#")]
        names = header.split(",")
        fit, check = [], []
        for ln in rows:
            (check if held_out(dict(zip(names, ln.split(",")))) else fit).append(ln)
        for d, part in ((fit_dir, fit), (check_dir, check)):
            (d / table.name).write_text("\n".join([*comments, header, *part]) + "\n")
    return fit_dir, check_dir


def perfmodel(*argv: str) -> str:
    print("$ perfmodel", " ".join(argv), flush=True)
    return subprocess.run([sys.executable, "-m", "perfmodel.cli", *argv], check=True, cwd=REPO,
                          capture_output=True, text=True).stdout


def lanes(check_dir: Path, calibration: Path | None) -> dict[tuple[str, str], dict[str, float]]:
    args = ["kernels", "check", str(check_dir), "--hardware", "h200", "--format", "json", "--worst", "0"]
    if calibration:
        args += ["--calibration", str(calibration)]
    report = json.loads(perfmodel(*args))
    return {(r["lane"], r["regime"]): r for r in report["stats"] if r["hardware"] == "all" and r["regime"] != "all"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # outside studies/kernels: `perfmodel kernels check` reads every table under it, and would count the halves twice
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "perfmodel-h200-calibrate")
    args = ap.parse_args(argv)
    fit_dir, check_dir = split(HERE / "tables", args.out)
    calibration = args.out / "calibration.yaml"
    print(perfmodel("calibrate", "--kernels", str(fit_dir), "--hardware", "h200", "--out", str(calibration)))
    before, after = lanes(check_dir, None), lanes(check_dir, calibration)
    print("held-out rows, predicted / measured: median (mean |ln|), zero-shot -> calibrated")
    print(f"{'lane':26} {'regime':7} {'rows':>4}  {'zero-shot':>14}  {'calibrated':>14}")
    for key in sorted(before):
        b, a = before[key], after[key]
        print(f"{key[0]:26} {key[1]:7} {b['n']:4d}  {b['median']:6.2f} ({b['mean_abs_log']:.2f})  "
              f"{a['median']:6.2f} ({a['mean_abs_log']:.2f})")
    n = sum(r["n"] for r in before.values())
    mean = {name: sum(r["n"] * r["mean_abs_log"] for r in lanes_.values()) / n
            for name, lanes_ in (("zero-shot", before), ("calibrated", after))}
    print(f"all {n} held-out prices: mean |ln| {mean['zero-shot']:.3f} zero-shot -> "
          f"{mean['calibrated']:.3f} calibrated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
