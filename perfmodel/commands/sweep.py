"""`perfmodel sweep`: rank every candidate layout for a model, an RL job and a GPU budget."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from perfmodel.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help="rank every candidate layout (TP/PP/EP/CP/VPP, rollout engines, placement) for a job",
        description="Enumerate candidate plans for the sweep file's hardware, model and job over node counts, "
        "prune by layout rules and memory, simulate one RL step of each, and rank them. Writes OUT/candidates.csv "
        "(every candidate, with why pruned ones were pruned), OUT/summary.json, the top plans as plan files "
        "(OUT/plans/), the best plan's trace and the capacity report (OUT/report.html). "
        "Without SPEC, the embedded default (DeepSeek-V4-Flash GRPO on "
        "MI355X, the seed article's job) is used.")
    p.add_argument("spec", nargs="?", metavar="SPEC", help="sweep YAML (default: the embedded seed sweep)")
    p.add_argument("--nodes", help="node counts: '4-64' (powers of two), '4,8,16' or '8'")
    p.add_argument("--objective", choices=["step_time", "p90_step_time", "tokens_per_gpu", "cost"],
                   help="p90_step_time: rank RL plans by the 90th percentile of their step over --length-samples "
                   "draws of the response lengths (the long tail), not by one draw")
    p.add_argument("--length-samples", type=int, help="for --objective p90_step_time: draws per plan (default 10)")
    p.add_argument("--target-step-time", type=float, help="for --objective cost: the step time to stay under (s)")
    p.add_argument("--out", help="output folder (default: sweeps/<time stamp>)")
    p.add_argument("--top", type=int, default=5, help="plans to write and rows to print (default 5)")
    p.add_argument("--workers", type=int, help="local worker processes (default: the CPU count)")
    p.add_argument("--ray", metavar="ADDRESS", help="run the candidates on a Ray cluster at ADDRESS")
    p.add_argument("--no-cache", action="store_true", help="ignore and do not fill the result cache")
    p.add_argument("--calibration", help="calibration overlay YAML (perfmodel calibrate): its stack parameters apply "
                   "when the sweep runs on that stack, its hardware parameters on that hardware")
    p.add_argument("--band", action="store_true", help="P10-P90 bands on the top plans' figures (the overlay's "
                   "uncertainty; without one, the prior on the stack's multipliers)")
    p.add_argument("--no-report", action="store_true", help="skip the HTML capacity report (OUT/report.html)")
    p.set_defaults(func=run)


def _plan_for(row: dict[str, Any], run: dict[str, Any], calibration: Any, spec_label: str) -> Any:
    from perfmodel.inputs.plan import Plan
    from perfmodel.inputs.stack import KNOBS, StackOptions, resolve_stack

    stack = resolve_stack(run.get("stack"), StackOptions(**run["stack_options"]) if run.get("stack_options") else None)

    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", row["label"]).strip("-").lower()
    predicted = {k: row[k] for k in ("step_time_s", "rollout_time_s", "log_probs_time_s", "train_time_s",
                                     "weight_update_time_s", "tokens_per_s_per_gpu") if row.get(k) not in (None, "")}
    if row.get("mem_train_bytes"):
        predicted["peak_memory_train_bytes"] = row["mem_train_bytes"]
    if row.get("mem_rollout_bytes"):
        predicted["peak_memory_rollout_bytes"] = row["mem_rollout_bytes"]
    return Plan.model_validate(run | {
        "id": f"rank{row['rank']:02d}-{slug}", "created_by": f"perfmodel sweep ({spec_label})",
        "predicted": predicted,
        "calibration": {"name": calibration.path if calibration else "none",
                        "params": {**({f"stack.{k}": v for k, v in calibration.stack_params.items()}
                                      if calibration else {}),
                                   **({f"hardware.{k}": v for k, v in calibration.hardware_params.items()}
                                      if calibration else {})}},
        "band": {k: [row[f"{k}_p10"], row[f"{k}_p90"]] for k in predicted if row.get(f"{k}_p10") is not None},
        "priced_with": {"hardware": run["hardware"], "stack": stack.id, "notes": list(stack.notes),
                        "stack_knobs": {k: getattr(stack, k) for k in KNOBS}},
        "executor": {"backend": "miles"},
    })


def _sweep_spec(args: argparse.Namespace) -> tuple[str, Any]:
    """The sweep file (or the embedded default) with the command line's overrides."""
    from perfmodel.sweep.spec import default_sweep_path, load_sweep_spec, parse_nodes

    spec_path = args.spec or str(default_sweep_path())
    spec = load_sweep_spec(spec_path)
    updates: dict[str, Any] = {}
    if args.nodes:
        updates["nodes"] = parse_nodes(args.nodes)
    if args.objective:
        updates["objective"] = args.objective
    if args.target_step_time:
        updates["target_step_time_s"] = args.target_step_time
    if args.length_samples is not None:
        if not 2 <= args.length_samples <= 100:
            raise InputError("--length-samples", "", f"{args.length_samples}: give 2 to 100 draws")
        updates["length_samples"] = args.length_samples
    if updates:
        spec = spec.model_copy(update=updates)
        if spec.objective == "cost" and spec.target_step_time_s is None:
            raise InputError("--objective", "", "cost needs --target-step-time SECONDS")
    return spec_path, spec


def _write_plans(top_rows: list[dict[str, Any]], by_index: dict[int, Any], plans_dir: Path, calibration: Any,
                 spec_name: str) -> list[dict[str, Any]]:
    """A plan file per top row; returns the rows' summary entries with their plan paths."""
    from perfmodel.inputs.plan import dump_plan

    plans_dir.mkdir(exist_ok=True)
    top_summary = []
    for row in top_rows:
        plan = _plan_for(row, by_index[row["index"]].run, calibration, spec_name)
        path = plans_dir / f"{plan.id}.yaml"
        dump_plan(plan, path)
        top_summary.append({k: row.get(k) for k in ("rank", "index", "label", "step_time_s", "rollout_time_s",
                                                    "log_probs_time_s", "train_time_s", "weight_update_time_s",
                                                    "tokens_per_s_per_gpu", "gpu_hours_per_step",
                                                    "mem_train_bytes", "step_time_s_p10", "step_time_s_p90")}
                           | {"plan_path": str(path)})
    return top_summary


# What a plan's prediction is: plans equal on all of it differ only in knobs the model does not price
_PREDICTED = ("step_time_s", "step_time_p90_s", "rollout_time_s", "log_probs_time_s", "train_time_s",
              "weight_update_time_s", "mem_train_bytes", "mem_rollout_bytes")


def _signature(row: dict[str, Any]) -> tuple:
    return tuple(None if row.get(k) in (None, "") else float(f"{float(row[k]):.9g}") for k in _PREDICTED)


def group_equal_plans(ranked: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first `n` groups of ranked rows whose predictions are identical: one row each (the best ranked), with
    `equal_plans` (how many) and `equal_knobs` ({knob: values}) when the group has more than one plan."""
    from perfmodel.sweep.run import PLAN_FIELDS

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in ranked:
        sig = _signature(row)
        if sig in groups:
            groups[sig].append(row)
        elif len(groups) < n:
            groups[sig] = [row]
    out = []
    for members in groups.values():
        head = members[0]
        if len(members) > 1:
            head["equal_plans"] = len(members)
            values = {k: sorted({str(m.get(k)) for m in members}) for k in PLAN_FIELDS}
            head["equal_knobs"] = {k: v for k, v in values.items() if len(v) > 1}
        out.append(head)
    return out


def _plan_label(row: dict[str, Any]) -> str:
    if not row.get("equal_plans"):
        return row["label"]
    knobs = "; ".join(f"{k.replace('_', ' ')} {' or '.join(v)}" for k, v in row["equal_knobs"].items())
    return f"{row['label']} (x{row['equal_plans']}: {knobs})"


def _top_table(objective: str, top_rows: list[dict[str, Any]]) -> Any:
    from perfmodel.commands.output import new_table

    banded = any(r.get("step_time_s_p10") is not None for r in top_rows)
    p90 = any(r.get("step_time_p90_s") not in (None, "") for r in top_rows)
    cols = ["rank", "plan", "step s"] + (["P90 step s"] if p90 else []) + (["P10-P90"] if banded else []) + [
        "rollout", "log-probs", "train", "w-update", "tok/s/GPU", "train mem GB"]
    table = new_table(f"top plans by {objective}", cols, left=("plan",))
    for r in top_rows:
        def f(k: str, fmt: str = "{:.1f}", r: dict[str, Any] = r) -> str:
            v = r.get(k)
            return "-" if v in (None, "") else fmt.format(float(v))
        band = [f"{f('step_time_s_p10')}-{f('step_time_s_p90')}"] if banded else []
        tail = [f("step_time_p90_s")] if p90 else []
        table.add_row(str(r["rank"]), _plan_label(r), f("step_time_s"), *tail, *band, f("rollout_time_s"),
                      f("log_probs_time_s"), f("train_time_s"), f("weight_update_time_s"),
                      f("tokens_per_s_per_gpu", "{:.0f}"),
                      f("mem_train_bytes", "{:.0f}") if not r.get("mem_train_bytes") else
                      f"{float(r['mem_train_bytes']) / 1e9:.0f}")
    return table


def _add_bands(top_rows: list[dict[str, Any]], by_index: dict[int, Any], hw: Any, cal: Any) -> None:
    """P10 / P90 of each top plan's figures, as `<metric>_p10` / `<metric>_p90` in its row."""
    from perfmodel.calibration import prediction_band
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.memo import Memo

    memo = Memo()
    for row in top_rows:
        scn = build_scenario(RunSpec.model_validate(by_index[row["index"]].run), hardware=hw)
        for metric, (lo, _, hi) in prediction_band(scn, cal.uncertainty_only() if cal else None, memo).items():
            row[f"{metric}_p10"], row[f"{metric}_p90"] = lo, hi


def run(args: argparse.Namespace) -> int:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from perfmodel.calibration import load_calibration
    from perfmodel.commands import output
    from perfmodel.inputs.hardware import load_hardware
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.scenario import resolve_model
    from perfmodel.inputs.stack import StackOptions, resolve_stack
    from perfmodel.sweep.cache import ResultCache, default_cache_path
    from perfmodel.sweep.run import evaluate_candidates, write_csv, write_summary
    from perfmodel.sweep.space import enumerate_candidates

    console = output.console()
    spec_path, spec = _sweep_spec(args)
    hw = load_hardware(spec.hardware, source=spec_path)
    cal = load_calibration(args.calibration) if args.calibration else None
    if cal is not None:  # hardware parameters into the profile, stack parameters into every candidate's stack
        hw = cal.hardware_profile(hw)
        stack = resolve_stack(spec.stack, StackOptions(**spec.stack_options) if spec.stack_options else None)
        options = cal.as_stack_options(stack.id, spec.stack_options, spec_path)
        if options:
            spec = spec.model_copy(update={"stack_options": options})
    probe = RunSpec.model_construct(model=spec.model)
    model = resolve_model(probe, spec_path)
    moe = [layer.ffn for layer in model.layers if layer.ffn.kind == "moe"]
    candidates = list(enumerate_candidates(spec, hw.gpus_per_node, moe[0].num_experts if moe else 0,
                                           model.num_layers))
    if not candidates:
        raise InputError(spec_path, "space", "no candidate plans: widen the space or the node counts")
    out = Path(args.out or Path("sweeps") / time.strftime("%Y%m%d-%H%M%S"))
    if (out / "candidates.csv").exists():  # never overwrite an earlier sweep's results
        raise InputError(str(out), "--out", "holds an earlier sweep's results; choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    cache = None if args.no_cache else ResultCache(default_cache_path())
    model_key = json.dumps(spec.model.model_dump(), sort_keys=True)
    console.print(f"sweep {spec.model.label()} on {spec.hardware}, nodes {list(spec.nodes)}: "
                  f"{len(candidates):,} candidates -> {out}", soft_wrap=True)
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                  console=console, transient=False) as bar:
        task = bar.add_task("simulating", total=len(candidates), rate="")
        t0 = time.perf_counter()

        def progress(done: int, total: int) -> None:
            dt = max(1e-9, time.perf_counter() - t0)
            bar.update(task, completed=done, rate=f"{done / dt:,.0f}/s")

        outcome = evaluate_candidates(spec, candidates, hw, model, model_key, workers=args.workers,
                                      ray_address=args.ray, cache=cache, progress=progress)
    if cache:
        cache.close()
    plans_dir = out / "plans"
    top_rows = group_equal_plans(outcome.top, max(1, args.top))
    by_index = {c.index: c for c in candidates}
    if args.band:
        _add_bands(top_rows, by_index, hw, cal)
    top_summary = _write_plans(top_rows, by_index, plans_dir, cal, Path(spec_path).name)
    extra: dict[str, Any] = {}
    if top_rows:
        from perfmodel.predict import simulate_run
        from perfmodel.trace import write_trace

        best_run = RunSpec.model_validate(by_index[top_rows[0]["index"]].run)
        write_trace(simulate_run(best_run, hardware=hw, record_trace=True).spans(), out / "best_trace.json")
        extra["best_trace"] = "best_trace.json"
    write_csv(outcome.rows, out / "candidates.csv")
    write_summary(spec, outcome, top_summary, out / "summary.json", extra)

    console.print(_top_table(spec.objective, top_rows))
    equal = sorted({k for r in top_rows for k in r.get("equal_knobs", {})})
    if equal:
        console.print("plans in one row predict the same: the model does not price "
                      + ", ".join(k.replace("_", " ") for k in equal) + " there", soft_wrap=True)
    fresh = len(candidates) - outcome.cached
    speed = (f" ({fresh / outcome.elapsed_s:,.0f}/s)" if fresh and outcome.elapsed_s > 0 else "")
    invalid = (f", {outcome.invalid:,} refused as impossible results (a model bug: see status 'invalid' in the "
               "CSV)" if outcome.invalid else "")
    cached = "all from cache" if fresh == 0 else f"{outcome.cached:,} from cache"
    console.print(f"{len(candidates):,} candidates: {outcome.evaluated:,} simulated, {outcome.pruned:,} pruned"
                  f"{invalid} ({cached}) in {outcome.elapsed_s:.1f} s{speed}"
                  + (" [interrupted: partial results kept]" if outcome.interrupted else ""), soft_wrap=True)
    console.print(f"wrote {out / 'candidates.csv'}, {out / 'summary.json'}, {len(top_rows)} plans in {plans_dir}",
                  soft_wrap=True)
    html = None
    if not args.no_report and top_rows:
        from perfmodel.report.capacity import build_report

        html = build_report(out, out_html=out / "report.html")
        console.print(f"capacity report: {html}")
    if top_summary:
        best = top_summary[0]["plan_path"]
        console.print("next:" + (f"\n  open {html}  (where each plan's time goes)" if html else "")
                      + f"\n  perfmodel simulate {best} --trace best.json  (the best plan's timeline, for "
                      "https://ui.perfetto.dev)"
                      + f"\n  executor launch --plan {best} --dry-run  (what would run; without --dry-run, it runs)",
                      soft_wrap=True)
    return 130 if outcome.interrupted else 0
