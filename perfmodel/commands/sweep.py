"""`perfmodel sweep`: rank every candidate layout for a model, an RL job and a GPU budget."""

from __future__ import annotations

import argparse
import shlex
import time
from collections import Counter
from pathlib import Path
from typing import Any

from perfmodel.errors import InputError
from perfmodel.inputs.bounds import MAX_TOP_PLANS

MAX_WORKERS = 256  # local processes: more than any host here has cores


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
                   "uncertainty; without one, the measured zero-shot spread of each component)")
    p.add_argument("--no-report", action="store_true", help="skip the HTML capacity report (OUT/report.html)")
    p.add_argument("--sample", type=int, metavar="N", help="evaluate N candidates drawn at random (seed 0) from the "
                   "space: for a space wider than one sweep takes (docs/reliability.md)")
    p.set_defaults(func=run)


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
    if args.target_step_time is not None:
        if not 0 < args.target_step_time < float("inf"):
            raise InputError("--target-step-time", "", f"{args.target_step_time}: give a step time in seconds > 0")
        updates["target_step_time_s"] = args.target_step_time
    if args.length_samples is not None:
        if not 2 <= args.length_samples <= 100:
            raise InputError("--length-samples", "", f"{args.length_samples}: give 2 to 100 draws")
        updates["length_samples"] = args.length_samples
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise InputError("--workers", "", f"{args.workers}: give 1 to {MAX_WORKERS} processes")
    if args.top is not None and not 1 <= args.top <= MAX_TOP_PLANS:
        raise InputError("--top", "", f"{args.top}: give 1 to {MAX_TOP_PLANS} plans")
    if updates:
        spec = spec.model_copy(update=updates)
        if spec.objective == "cost" and spec.target_step_time_s is None:
            raise InputError("--objective", "", "cost needs --target-step-time SECONDS")
    return spec_path, spec


def _plan_label(row: dict[str, Any]) -> str:
    if not row.get("equal_plans"):
        return row["label"]
    knobs = "; ".join(f"{k.replace('_', ' ')} {' or '.join(v)}" for k, v in row["equal_knobs"].items())
    return f"{row['label']} (x{row['equal_plans']}: {knobs})"


def _top_table(objective: str, top_rows: list[dict[str, Any]]) -> Any:
    from perfmodel.report.console import new_table

    banded = any(r.get("step_time_s_p10") is not None for r in top_rows)
    p90 = any(r.get("step_time_p90_s") not in (None, "") for r in top_rows)
    odds = any(r.get("p_best") is not None for r in top_rows)
    cols = ["rank", "plan", "step s"] + (["P90 step s"] if p90 else []) + (["P10-P90"] if banded else []) + (
        ["p best", "tie"] if odds else []) + ["rollout", "log-probs", "train", "w-update", "tok/s/GPU", "train mem GB"]
    table = new_table(f"top plans by {objective}", cols, left=("plan",))
    for r in top_rows:
        def f(k: str, fmt: str = "{:.1f}", r: dict[str, Any] = r) -> str:
            v = r.get(k)
            return "-" if v in (None, "") else fmt.format(float(v))
        band = [f"{f('step_time_s_p10')}-{f('step_time_s_p90')}"] if banded else []
        tail = [f("step_time_p90_s")] if p90 else []
        band += [f("p_best", "{:.2f}"), str(r.get("tie_group", "-"))] if odds else []
        table.add_row(str(r["rank"]), _plan_label(r), f("step_time_s"), *tail, *band, f("rollout_time_s"),
                      f("log_probs_time_s"), f("train_time_s"), f("weight_update_time_s"),
                      f("tokens_per_s_per_gpu", "{:.0f}"),
                      f("mem_train_bytes", "{:.0f}") if not r.get("mem_train_bytes") else
                      f"{float(r['mem_train_bytes']) / 1e9:.0f}")
    return table


def _odds_lines(ranking: Any) -> list[str]:
    """What the p best column rests on when it is less than a reader assumes (no parameter spread, lost draws),
    and the launch that would best settle the choice."""
    odds, st = ranking.odds, ranking.settle
    notes = [f"p best from {odds['basis']}"] if odds and not odds["parameters"] else []
    lost = [f"plan {r['rank']} in {r['draws_lost']}" for r in ranking.top if r.get("draws_lost")]
    if lost:
        notes.append(f"p best: some parameter draws break a plan's physics (out of memory, an impossible result): "
                     f"{', '.join(lost)} of {odds['parameter_draws']}, each counted as a draw it loses")
    if st and not ranking.outcome.interrupted:
        notes.append(f"to settle the choice: {st['measurement']} ({st['gpus']} GPUs, about {st['expected_s']:.0f} s "
                     f"of steps plus start-up): the leader's p best {st['p_best_now']:.2f} -> about "
                     f"{st['p_best_after']:.2f}\n  {st['command']}\n  then: {st['then']}")
        if st.get("cheaper"):
            c = st["cheaper"]
            notes.append(f"or, at {c['gpu_s_share']:.1%} of its GPU-seconds: {c['measurement']} ({c['gpus']} GPUs, "
                         f"about {c['expected_s']:.0f} s): p best -> about {c['p_best_after']:.2f}\n  {c['command']}\n"
                         f"  then: {c['then']}")
    return notes


def run(args: argparse.Namespace) -> int:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from perfmodel.api import sweep
    from perfmodel.report import console as output

    console = output.console()
    spec_path, spec = _sweep_spec(args)
    bar = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                   console=console, transient=False)
    task = None
    t0 = time.perf_counter()

    def on_start(candidates: int, out: Path) -> None:
        nonlocal task, t0
        console.print(f"sweep {spec.model.label()} on {spec.hardware}, nodes {list(spec.nodes)}: "
                      f"{candidates:,} candidates -> {out}", soft_wrap=True)
        bar.start()
        task = bar.add_task("simulating", total=candidates, rate="")
        t0 = time.perf_counter()

    def progress(done: int, total: int) -> None:
        dt = max(1e-9, time.perf_counter() - t0)
        bar.update(task, completed=done, rate=f"{done / dt:,.0f}/s")

    try:
        ranking = sweep(spec, spec_path=spec_path, out=args.out, top=args.top, workers=args.workers,
                        ray_address=args.ray, cache=not args.no_cache, calibration=args.calibration,
                        band=args.band, report=not args.no_report, sample=args.sample, progress=progress,
                        on_start=on_start)
    finally:
        bar.stop()
    outcome, top_rows, out = ranking.outcome, ranking.top, ranking.out
    console.print(_top_table(ranking.spec.objective, top_rows))
    equal = sorted({k for r in top_rows for k in r.get("equal_knobs", {})})
    if equal:
        console.print("plans in one row predict the same: the model does not price "
                      + ", ".join(k.replace("_", " ") for k in equal) + " there", soft_wrap=True)
    for line in _odds_lines(ranking):
        console.print(line, soft_wrap=True)
    fresh = ranking.candidates - outcome.cached - outcome.not_evaluated
    speed = (f" ({fresh / outcome.elapsed_s:,.0f}/s)" if fresh and outcome.elapsed_s > 0 else "")
    invalid = (f", {outcome.invalid:,} refused as impossible results (a model bug: see status 'invalid' in the "
               "CSV)" if outcome.invalid else "")
    cached = "all from cache" if fresh == 0 else f"{outcome.cached:,} from cache"
    console.print(f"{ranking.candidates:,} candidates: {outcome.evaluated:,} simulated, {outcome.pruned:,} pruned"
                  f"{invalid} ({cached}) in {outcome.elapsed_s:.1f} s{speed}", soft_wrap=True)
    if outcome.rejected_cache_rows:
        console.print(f"{outcome.rejected_cache_rows:,} cached results failed the checks a fresh one passes and were "
                      "recomputed", soft_wrap=True)
    if outcome.interrupted:
        console.print(f"interrupted: {outcome.not_evaluated:,} candidates not evaluated; what was evaluated is kept "
                      "(in the folder and the cache); the summary and `perfmodel report` say so", soft_wrap=True)
    console.print(f"wrote {out / 'candidates.csv'}, {out / 'summary.json'}, {len(top_rows)} plans in "
                  f"{out / 'plans'}", soft_wrap=True)
    if ranking.report:
        console.print(f"capacity report: {ranking.report}")
    if top_rows and not outcome.interrupted:
        best = top_rows[0]["plan_path"]
        report = [f"\n  {shlex.join(['open', str(ranking.report)])}  (where each plan's time goes)"] if ranking.report \
            else []
        console.print("next:" + "".join(report)
                      + f"\n  {shlex.join(['perfmodel', 'simulate', best, '--trace', 'best.json'])}  (the best plan's "
                      "timeline, for https://ui.perfetto.dev)"
                      + f"\n  {shlex.join(['executor', 'launch', '--plan', best, '--dry-run'])}  (what would run; "
                      "without --dry-run, it runs)", soft_wrap=True)
    if not top_rows and not outcome.interrupted:
        raise InputError(spec_path, "job", "no candidate plan is feasible: " + _prune_reasons(outcome.rows.reasons)
                         + f"; every candidate's reason is in {out / 'candidates.csv'}")
    return outcome.exit_code if outcome.interrupted else 0


def _prune_reasons(reasons: Counter[str]) -> str:
    """The commonest reasons candidates were not ranked, for the one line of an empty sweep."""
    common = reasons.most_common(2)
    if not common:  # every candidate simulated: the objective's limit excluded them
        return "every simulated plan misses the objective's limit (target_step_time_s)"
    return "; ".join(f"{n:,} x {why.strip()}" for why, n in common)
