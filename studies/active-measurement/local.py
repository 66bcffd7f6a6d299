"""The loop on this machine, for real: sweep the local job, launch what the settling measurement names, calibrate on
it, sweep again, and check the choice against launching every plan (issue 24 item 4).

`python studies/active-measurement/local.py [--steps N] [--work DIR]`: `perfmodel sweep local-sweep.yaml`, with this
host's probed matmul rates as its `hardware_options` (zero-shot: the `local-cpu` stack as shipped, no overlay), ranks
the local job's layouts and names the settling measurement; every
ranked plan is launched with `executor launch` and exported (`studies/calibration-loop/measure.py`, one at a time: the
cores are the GPUs), so the settling launch is one of them and the others are the truth it is checked against; then,
for each plan as the one measured, `perfmodel calibrate` on its record alone and `perfmodel sweep --calibration`:
the plan chosen is the best of the re-priced plans, the measured one at its measured step. When the sweep offers a
cheaper settling launch (a plan at fewer data-parallel replicas), it is run too and followed the same way. Writes
`local.json` and `local.md` next to this file. About 4 minutes here (4 launches of 6 steps, 5 sweeps).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
SPEC = HERE / "local-sweep.yaml"


def _measure_fn():
    """studies/calibration-loop/measure.py's `measure` (launch + export one plan): one way to measure a local plan."""
    spec = importlib.util.spec_from_file_location("loop_measure", HERE.parent / "calibration-loop" / "measure.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.measure


def perfmodel(*args: str) -> None:
    """A perfmodel command as a user types it (its console output kept out of the study's)."""
    from perfmodel.cli import main as perfmodel_main

    with contextlib.redirect_stdout(io.StringIO()):
        rc = perfmodel_main(list(args))
    if rc != 0:
        raise SystemExit(f"perfmodel {' '.join(args)}: exit {rc}")


def probed_spec(work: Path) -> Path:
    """local-sweep.yaml with this host's measured facts (the executor's host probe, as every local run records
    them): the plans priced on the machine that runs them, as the measured runs are calibrated on it."""
    from executor.backends.local.host_probe import case_facts, probe_host

    hardware, stack = case_facts(probe_host(), "the active-measurement study")
    spec = yaml.safe_load(SPEC.read_text())
    spec["hardware_options"] = hardware
    spec["stack_options"] = {**(spec.get("stack_options") or {}), **stack}
    out = work / "local-sweep-probed.yaml"
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


def run_sweep(spec: Path, out: Path, calibration: Path | None = None) -> dict:
    perfmodel("sweep", str(spec), "--out", str(out), "--no-report", "--no-cache", "--workers", "1",
              *(["--calibration", str(calibration)] if calibration is not None else []))
    return json.loads((out / "summary.json").read_text())


def measured_step_s(case: Path) -> float:
    return float(yaml.safe_load(case.read_text())["measured"]["step_time_s"])


def choose(summary: dict, measured_label: str, measured_s: float) -> str:
    """After measuring one plan: the best of the re-priced plans, the measured one at its measured step."""
    values = {r["label"]: float(r["step_time_s"]) for r in summary["top"]}
    values[measured_label] = measured_s
    return min(values, key=values.__getitem__)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps per launch (the first is left out)")
    ap.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=HERE, help="where local.json and local.md go")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="active-local-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = loop(work, args.steps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "local.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (args.out / "local.md").write_text("\n".join(table(result)) + "\n", encoding="utf-8")
    print("\n".join(table(result)))
    return 0


def loop(work: Path, steps: int) -> dict:
    measure = _measure_fn()
    spec = probed_spec(work)
    zero = run_sweep(spec, work / "sweep-zero-shot")
    top = zero["top"]
    settle_plan = next(r["label"] for r in top if r["plan_path"] in zero["settle"]["command"])
    plans = []
    for r in top:
        case = work / "measured" / f"rank{r['rank']}.yaml"
        case.parent.mkdir(exist_ok=True)
        measure(Path(r["plan_path"]), case, steps, work)
        plans.append({"rank": r["rank"], "label": r["label"], "zero_shot_step_s": r["step_time_s"],
                      "p_best": r.get("p_best"), "measured_step_s": measured_step_s(case), "case": case})
    best_s = min(p["measured_step_s"] for p in plans)
    by_label = {p["label"]: p for p in plans}
    for p in plans:  # each plan as the one measurement
        cal = work / f"cal-rank{p['rank']}.yaml"
        perfmodel("calibrate", str(p["case"]), "--out", str(cal))
        again = run_sweep(spec, work / f"sweep-after-rank{p['rank']}", cal)
        p["calibrated_steps_s"] = {r["label"]: r["step_time_s"] for r in again["top"]}
        p["then_chosen"] = choose(again, p["label"], p["measured_step_s"])
        p["regret_if_measured"] = by_label[p["then_chosen"]]["measured_step_s"] / best_s
        p["case"] = str(p["case"].name)
    settle = by_label[settle_plan]
    smaller = _smaller_launch(zero, spec, work, steps, measure, by_label, best_s)
    return {"steps_per_launch": steps, "plans": plans, "best_measured": min(plans, key=lambda p: p["measured_step_s"])
            ["label"], "zero_shot_choice": top[0]["label"],
            "regret_zero_shot": by_label[top[0]["label"]]["measured_step_s"] / best_s,
            "settle": {"plan": settle_plan, "p_best_now": zero["settle"]["p_best_now"],
                       "p_best_after": zero["settle"]["p_best_after"], "then_chosen": settle["then_chosen"],
                       "regret": settle["regret_if_measured"]},
            "regret_random": sum(p["regret_if_measured"] for p in plans) / len(plans), "cheaper": smaller}


def _smaller_launch(zero: dict, spec: Path, work: Path, steps: int, measure, by_label: dict,
                    best_s: float) -> dict | None:
    """The plans' smaller version (fewest data-parallel replicas) that the sweep priced as a settling candidate, run
    for real whether or not the sweep offered it (`settle.cheaper`: when it costs fewer GPU-seconds and its p best
    after beats the leader's now by more than 0.01, which 32 parameter draws decide only to about +-0.03), and
    followed as its `then` says: calibrate on its record alone, sweep again, choose the best re-priced plan."""
    from types import SimpleNamespace

    from perfmodel.inputs.hardware import load_hardware
    from perfmodel.inputs.plan import load_plan
    from perfmodel.sweep.small_scale import smallest_version

    priced = next((c for c in zero["settle"]["candidates"] if "replicas" in c.get("small_scale", "")), None)
    if priced is None:
        return None
    rows = zero["top"]
    plans = {r["index"]: load_plan(r["plan_path"]) for r in rows}
    by_index = {i: SimpleNamespace(run=p.model_dump(mode="json", by_alias=True, exclude_none=True, include={
        "kind", "hardware", "hardware_options", "stack", "stack_options", "gpus", "model", "train", "rl"}))
        for i, p in plans.items()}
    hw = load_hardware(plans[rows[0]["index"]].hardware)  # each run applies its own hardware_options
    version = smallest_version(rows, by_index, hw, work, None, spec.name, {"backend": "local"})
    case = work / "measured" / "settle-smaller.yaml"
    measure(Path(version["plan_path"]), case, steps, work)
    cal = work / "cal-smaller.yaml"
    perfmodel("calibrate", str(case), "--out", str(cal))
    again = run_sweep(spec, work / "sweep-after-smaller", cal)
    chosen = min(again["top"], key=lambda r: float(r["step_time_s"]))["label"]
    offered = zero["settle"].get("cheaper") or {}
    return {"plan": f"{version['label']} at {version['replicas']} of its {version['of']} replicas",
            "gpus": version["gpus"], "gpu_s": priced["gpu_s"], "p_best_after": priced["p_best_after"],
            "offered": offered.get("plan", "").endswith(Path(version["plan_path"]).name),
            "measured_step_s": measured_step_s(case), "then_chosen": chosen,
            "regret": by_label[chosen]["measured_step_s"] / best_s}


def table(res: dict) -> list[str]:
    lines = ["# The settling measurement on this machine (generated by local.py)", "",
             f"Each plan launched for {res['steps_per_launch']} steps (median after one warm-up).", "",
             "| rank (zero-shot) | plan | p best | priced zero-shot s | measured s | if it is the one measured: "
             "chosen then | regret |", "|---:|---|---:|---:|---:|---|---:|"]
    for p in res["plans"]:
        lines.append(f"| {p['rank']} | {p['label']} | {p['p_best']} | {p['zero_shot_step_s']:.2f} | "
                     f"{p['measured_step_s']:.3f} | {p['then_chosen']} | {p['regret_if_measured']:.3f} |")
    s = res["settle"]
    lines += ["", f"- best measured: {res['best_measured']}",
              f"- zero-shot choice: {res['zero_shot_choice']} (regret {res['regret_zero_shot']:.3f})",
              f"- the settling measurement: {s['plan']} (p best {s['p_best_now']} -> about {s['p_best_after']}); "
              f"then chosen: {s['then_chosen']} (regret {s['regret']:.3f})",
              f"- a measurement at random (mean over the plans): regret {res['regret_random']:.3f}"]
    c = res.get("cheaper")
    if c:
        lines.append(f"- the plans' smaller version, run too: {c['plan']} ({c['gpus']} GPU(s), "
                     f"{'offered as the cheaper launch' if c['offered'] else 'priced, not offered'}; p best after "
                     f"about {c['p_best_after']}; measured {c['measured_step_s']:.3f} s a step); then chosen: "
                     f"{c['then_chosen']} (regret {c['regret']:.3f})")
    return lines


if __name__ == "__main__":
    sys.exit(main())
