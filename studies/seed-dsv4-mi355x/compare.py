"""The seed study with the `miles` stack calibrated: how the ranking moves against the uncalibrated model.

`python studies/seed-dsv4-mi355x/compare.py` (about 3 minutes on 2 cores):
1. `perfmodel calibrate` the `miles` stack's named multipliers on the published Miles DSV4 figures (GB300 and
   MI355X) -> `miles-calibration.yaml`;
2. `perfmodel sweep` of the seed job (the embedded default) without and with that overlay;
3. per node count, the top plans of each, with the calibrated P10-P90 band of the step time and each plan's rank in
   the other sweep -> `calibrated-ranking.md` and `calibrated-ranking.json`.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MILES_CASES = (ROOT / "studies" / "validation" / "cases" / "miles-gb300-dsv4flash-bf16train.yaml",
               ROOT / "studies" / "validation" / "miles-published" / "cases" /
               "miles-mi355x-dsv4flash-4node-colocated.yaml")
TOP = 5
MILES_PARAMS = ("train_compute_scale", "log_probs_compute_scale", "rollout_compute_scale", "weight_update_fixed_s")


def _perfmodel(*args: str) -> None:
    subprocess.run([sys.executable, "-c", "import sys; from perfmodel.cli import main; sys.exit(main())", *args],
                   check=True)


def _ranked(csv_path: Path) -> list[dict]:
    rows = [r for r in csv.DictReader(csv_path.open()) if r.get("status") == "ok" and r.get("step_time_s")]
    return sorted(rows, key=lambda r: float(r["step_time_s"]))


def _bands(rows: list[dict], cal_path: Path) -> dict[str, tuple[float, float]]:
    """Calibrated P10-P90 of the step time of these candidates (re-enumerated from the seed sweep)."""
    from perfmodel.calibration import load_calibration, prediction_band
    from perfmodel.inputs.hardware import load_hardware
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.scenario import build_scenario, resolve_model
    from perfmodel.memo import Memo
    from perfmodel.sweep.space import enumerate_candidates
    from perfmodel.sweep.spec import default_sweep_path, load_sweep_spec

    cal = load_calibration(cal_path)
    spec = load_sweep_spec(default_sweep_path())
    hw = cal.hardware_profile(load_hardware(spec.hardware))
    model = resolve_model(RunSpec.model_construct(model=spec.model), str(default_sweep_path()))
    moe = [layer.ffn for layer in model.layers if layer.ffn.kind == "moe"]
    wanted = {int(r["index"]) for r in rows}
    out = {}
    memo = Memo()
    for c in enumerate_candidates(spec, hw.gpus_per_node, moe[0].num_experts if moe else 0, model.num_layers):
        if c.index in wanted:
            scn = cal.apply(build_scenario(RunSpec.model_validate(c.run), hardware=hw))
            lo, _, hi = prediction_band(scn, cal.uncertainty_only(), memo)["step_time_s"]
            out[c.label()] = (lo, hi)
    return out


def main() -> int:
    cal_path = HERE / "miles-calibration.yaml"
    # the named multipliers the two runs' ten figures can inform: training, log-prob passes, the engines' forwards
    _perfmodel("calibrate", *map(str, MILES_CASES), "--stack", "miles", "--params", ",".join(MILES_PARAMS),
               "--out", str(cal_path))
    with tempfile.TemporaryDirectory(prefix="seed-") as tmp:
        base, calibrated = Path(tmp) / "base", Path(tmp) / "calibrated"
        _perfmodel("sweep", "--out", str(base), "--no-report", "--top", "1")
        _perfmodel("sweep", "--out", str(calibrated), "--no-report", "--top", "1", "--calibration", str(cal_path))
        before, after = _ranked(base / "candidates.csv"), _ranked(calibrated / "candidates.csv")
    rank_before = {r["label"]: i + 1 for i, r in enumerate(before)}
    rank_after = {r["label"]: i + 1 for i, r in enumerate(after)}
    step_before = {r["label"]: float(r["step_time_s"]) for r in before}
    nodes = sorted({int(r["nodes"]) for r in after})
    top_after = [r for n in nodes for r in [x for x in after if int(x["nodes"]) == n][:TOP]]
    top_before = [r for n in nodes for r in [x for x in before if int(x["nodes"]) == n][:TOP]]
    bands = _bands(top_after, cal_path)
    cal = json.loads(json.dumps(__import__("yaml").safe_load(cal_path.read_text())))
    lines = ["# Seed study with the `miles` stack calibrated", "",
             "`python studies/seed-dsv4-mi355x/compare.py`: the `miles` stack fitted on the published Miles DSV4 "
             "figures (GB300 BF16 training, MI355X 4-node colocated), then the seed sweep with and without it.", "",
             "| stack knob | fitted | one sigma |", "|---|---:|---:|"]
    for k, v in cal["stack_params"].items():
        s = cal["uncertainty"]["sigma_log"].get(f"stack.{k}", 0.0)
        lines.append(f"| {k} | {v:.4g} | x/{2.718281828 ** s:.2f} |")
    for k, why in cal["refused"].items():
        lines.append(f"| {k} | refused | {why} |")
    lines += ["", "Calibrated top plans per node count (step seconds; rank among all candidates):", "",
              "| nodes | plan | calibrated step | P10-P90 | rank calibrated | uncalibrated step | rank uncalibrated |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for r in top_after:
        lo, hi = bands.get(r["label"], (float("nan"), float("nan")))
        lines.append(f"| {r['nodes']} | {r['label']} | {float(r['step_time_s']):.1f} | {lo:.0f}-{hi:.0f} | "
                     f"{rank_after[r['label']]} | {step_before.get(r['label'], float('nan')):.1f} | "
                     f"{rank_before.get(r['label'], '-')} |")
    lines += ["", "Uncalibrated top plans per node count and where calibration puts them:", "",
              "| nodes | plan | uncalibrated step | rank uncalibrated | rank calibrated |", "|---|---|---:|---:|---:|"]
    for r in top_before:
        lines.append(f"| {r['nodes']} | {r['label']} | {float(r['step_time_s']):.1f} | {rank_before[r['label']]} | "
                     f"{rank_after.get(r['label'], '-')} |")
    (HERE / "calibrated-ranking.md").write_text("\n".join(lines) + "\n")
    (HERE / "calibrated-ranking.json").write_text(json.dumps({
        "calibration": cal, "top_calibrated": [{**r, "step_p10_p90": bands.get(r["label"])} for r in top_after],
        "top_uncalibrated": top_before, "rank_before": {r["label"]: rank_before[r["label"]] for r in top_after},
        "rank_after": {r["label"]: rank_after.get(r["label"]) for r in top_before}}, indent=1, default=str) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
