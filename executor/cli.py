"""`executor`: launch a plan for real and read back what was measured.

  executor launch --plan PLAN [--steps N] [--store PATH] [--run-dir DIR] [--dry-run] [--debug]
  executor launch --resume RUN [--steps N] [--store PATH]
  (the store: $EXECUTOR_STORE, or $XDG_DATA_HOME/perfmodel/executor.sqlite: executor.store_path)
  executor runs [--store PATH]
  executor show RUN [--store PATH]
  executor export RUN --out CASE [--skip-steps N] [--store PATH]
  executor align --plan PLAN [--precision fp8|bf16] [--tokens FILE] [--rollout-set K=V] [--trainer-set K=V]
  executor bench-kernels --hardware ID --out DIR [--quick] [--ops gemm,attention,...] [--device cpu|cuda]
                         [--world-size N]

`launch` hands the plan to the backend its `executor.backend` names (executor.backends.registry); the backend
records the run through executor.measurement_sink, which every command here reads back from the store.
`bench-kernels` measures this machine's kernels into kernel tables (docs/kernels.md); it needs torch, which the
other commands never import.

Bad input fails before anything starts: one line `error: <file>: <field>: <message>`, exit 2
(a traceback only with --debug).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from executor.records import launched_plan
from executor.store import find_run
from perfmodel.errors import InputError, inert
from perfmodel.signals import exit_code, handle_sigterm

STORE_HELP = "SQLite store (default: $EXECUTOR_STORE, or $XDG_DATA_HOME/perfmodel/executor.sqlite)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="executor", description="Run a perfmodel plan for real and record its timings.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)
    launch = sub.add_parser("launch", help="run a plan: backend local (SGLang + megatron-core GRPO on this machine) "
                            "or miles (Ray job on a cluster; --dry-run prints it)")
    what = launch.add_mutually_exclusive_group(required=True)
    what.add_argument("--plan", help="plan file (YAML/JSON) as written by perfmodel sweep")
    what.add_argument("--resume", metavar="RUN", help="continue a stopped run (id or unique prefix) from its newest "
                      "complete checkpoint, in the same run folder and store row (backend local)")
    launch.add_argument("--steps", type=int, help="GRPO steps in all (default: executor.options.steps; with --resume, "
                        "the steps the run asked for)")
    launch.add_argument("--store", type=Path, help=STORE_HELP)
    launch.add_argument("--run-dir", type=Path, help="run folder (default: runs/<run-id>/ next to the store)")
    launch.add_argument("--dry-run", action="store_true",
                        help="backend miles: print the Ray commands, the job submission and its runtime env only")
    launch.add_argument("--ray-address", help="backend miles: Ray dashboard address (default: plan options, "
                        "$RAY_ADDRESS, http://127.0.0.1:8265)")
    launch.add_argument("--timeout", type=float, help="backend miles: stop the job after this many seconds")
    launch.add_argument("--profile", nargs="?", type=int, const=0, metavar="STEP",
                        help="backend local: run STEP (default: the first after the warm-up) under torch.profiler and "
                        "write its GEMM and attention kernels as kernel tables in RUN_DIR/kernels/ (docs/kernels.md)")
    launch.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    align = sub.add_parser("align", help="where rollout and training disagree: the same sequences through the SGLang "
                           "engine and the megatron-core trainer, layer by layer, each against an FP32 reference")
    align.add_argument("--plan", required=True, help="a local plan (its model, task, rollout precision and seed)")
    align.add_argument("--precision", choices=("fp8", "bf16"), help="rollout precision (default: the plan's)")
    align.add_argument("--tokens", type=Path, help="a JSON list of token-id lists (default: --samples sequences of "
                       "the plan's task, responses sampled by the engine)")
    align.add_argument("--samples", type=int, default=8, help="sequences to sample when --tokens is not given")
    align.add_argument("--out", type=Path, help="folder for align.json / align.html (default: "
                       "$XDG_DATA_HOME/perfmodel/align/<plan>-<time>)")
    align.add_argument("--rollout-set", action="append", metavar="KEY=VALUE", default=[],
                       help="configure the engine's model otherwise (sliding_window, hash_seed, hc_sinkhorn_iters)")
    align.add_argument("--trainer-set", action="append", metavar="KEY=VALUE", default=[],
                       help="configure the trainer's model otherwise")
    align.add_argument("--fp8-block", type=int, default=128, help="FP8 scale block of the engine's weights")
    align.add_argument("--format", choices=("table", "json"), default="table")
    align.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    runs = sub.add_parser("runs", help="list the runs in the store")
    runs.add_argument("--store", type=Path, help=STORE_HELP)
    show = sub.add_parser("show", help="a run: measured per phase next to the plan's prediction")
    show.add_argument("run", help="run id (a unique prefix is enough)")
    show.add_argument("--store", type=Path, help=STORE_HELP)
    show.add_argument("--figure", type=Path, help="write the per-step log-prob gap, next to the same model's runs "
                      "with the other rollout precision, as a plotly HTML figure")
    export = sub.add_parser("export", help="a run as a validation case (for perfmodel validate / calibrate)")
    export.add_argument("run", help="run id (a unique prefix is enough)")
    export.add_argument("--out", required=True, type=Path, help="case YAML to write")
    export.add_argument("--skip-steps", type=int, default=1, help="warm-up steps left out (default 1)")
    export.add_argument("--store", type=Path, help=STORE_HELP)
    _bench_parser(sub)
    return p


def _bench_parser(sub: Any) -> None:
    from executor.bench_kernels.config import FAMILIES, MEASURED

    bench = sub.add_parser("bench-kernels", help="microbenchmark this machine's GEMMs, attention, MoE expert GEMMs "
                           "and collectives into kernel tables (docs/kernels.md)")
    bench.add_argument("--hardware", required=True, help="the hardware profile id the rows are for (hwprofiles/)")
    bench.add_argument("--out", required=True, type=Path, help="folder for gemm.csv, attention.csv, grouped_gemm.csv "
                       "and collectives.csv (rows are appended as they are measured)")
    bench.add_argument("--quick", action="store_true", help="a smaller grid (under a minute on a CPU)")
    bench.add_argument("--ops", help=f"comma-separated ops or families (default: all): {', '.join(MEASURED)}, "
                       f"{', '.join(FAMILIES)}")
    bench.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when torch sees a GPU, else cpu")
    bench.add_argument("--world-size", type=int, default=2, help="processes for the collectives, one GPU or CPU "
                       "core each (default 2)")
    bench.add_argument("--grid", choices=("full", "quick", "tiny"), help=argparse.SUPPRESS)  # tiny: the tests'
    bench.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")


def _launch(args: argparse.Namespace) -> int:
    from executor.api import launch, resume

    if args.resume:
        if args.dry_run or args.run_dir or args.ray_address or args.timeout or args.profile is not None:
            raise InputError("--resume", "", "takes only --steps and --store (the run keeps its folder and plan)")
        return resume(args.resume, steps=args.steps, store=args.store).exit_code
    return launch(args.plan, steps=args.steps, store=args.store, run_dir=args.run_dir, dry_run=args.dry_run,
                  ray_address=args.ray_address, timeout_s=args.timeout, profile_step=args.profile).exit_code


def _align(args: argparse.Namespace) -> int:
    from executor.align.report import print_report, write_outputs
    from executor.align.run import AlignSession, parse_overrides
    from executor.store_path import data_dir

    rollout, trainer = parse_overrides(args.rollout_set, "--rollout-set"), parse_overrides(args.trainer_set,
                                                                                          "--trainer-set")
    if args.fp8_block < 1 or args.samples < 1:
        raise InputError("--fp8-block" if args.fp8_block < 1 else "--samples", "", "needs a positive number")
    out = args.out or data_dir() / "align" / f"{Path(args.plan).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    t0 = time.perf_counter()
    session = AlignSession.start(args.plan, precision=args.precision, tokens_file=args.tokens, samples=args.samples,
                                 fp8_block=args.fp8_block, rollout_overrides=rollout, work_dir=out / "work")
    try:
        result = session.compare(trainer)
    finally:
        session.close()
    meta = {"plan": str(args.plan), "plan_id": session.plan.id, "precision": session.precision,
            "fp8_block": args.fp8_block, "rollout_set": rollout, "trainer_set": trainer,
            "sequences": len(session.sequences), "tokens": sum(len(s) for s in session.sequences),
            "seconds": {**{k: round(v, 2) for k, v in session.timings_s.items()},
                        "total": round(time.perf_counter() - t0, 2)}}
    js, html = write_outputs(result, meta, out)
    if args.format == "json":
        print(js.read_text(encoding="utf-8"))
    else:
        print_report(result, meta)
        print(f"wrote {js} and {html} in {meta['seconds']['total']:.0f} s (engine start "
              f"{meta['seconds']['engine_start']:.0f} s)")
    return 0


def _open_store(path: Path) -> Any:
    from executor.store import Store

    if not path.exists():
        raise InputError(str(path), "--store", "no such store; run `executor launch` first or pass --store")
    return Store(path)


def _runs(args: argparse.Namespace) -> int:
    store = _open_store(args.store)
    rows = store.runs()
    if not rows:
        _say("no runs")
        return 0
    _say(f"{'run':44} {'status':9} {'steps':>5} {'hardware':10} {'layout':22} started")
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started_at"]))
        _say(f"{r['run_id']:44} {r['status']:9} {r['steps']:>5} {r['hardware']:10} {r['layout']:22} {started}")
    return 0


def _say(*parts: object, **kwargs: Any) -> None:
    """print for what the store holds (ids, hardware, paths, versions): control characters shown escaped, so a
    store written by anything else cannot drive the terminal."""
    print(*(inert(str(p)) for p in parts), **kwargs)


def _say_damaged(store: Any, run: dict[str, Any]) -> None:
    """One line for what the store holds damaged (set aside while reading: the rest is shown)."""
    if run.get("damaged"):
        _say(f"warning: {store.path}: run {run['run_id']}: {', '.join(run['damaged'])} damaged, read as empty",
              file=sys.stderr)
    if store.damaged:
        _say(f"warning: {store.path}: {len(store.damaged)} damaged step record(s) skipped ({store.damaged[0]}"
              + (", ..." if len(store.damaged) > 1 else "") + ")", file=sys.stderr)


def _fmt(x: float | None, unit: str = "s") -> str:
    if x is None:
        return "-"
    return f"{x:.3f} {unit}" if unit else f"{x:.4f}"


def _export(args: argparse.Namespace) -> int:
    from executor.export import run_as_case, write_case
    from perfmodel.files import writable_file

    writable_file(args.out, "--out")
    store = _open_store(args.store)
    run = find_run(store, args.run)
    steps = store.steps(run["run_id"])
    _say_damaged(store, run)
    data = run_as_case(run, steps, str(args.store), args.skip_steps)
    write_case(data, args.out)
    print(f"wrote {args.out}: case {data['id']} with {', '.join(data['measured'])}")
    return 0


def _host_prediction(run: dict, plan: Any, steps: list[dict], store_path: Path) -> dict[str, float]:
    """The plan re-priced for the host that ran it (its probe: a cpu-local host differs from the profile's by up to
    30x) and the workload it measured, as `executor export` would write the case; {} without a probe or without
    the plan as launched (`plan` None)."""
    from executor.export import run_as_case
    from perfmodel.inputs.case import ValidationCase
    from perfmodel.inputs.loading import parse
    from perfmodel.predict import simulate_run

    if not run["environment"].get("host_probe") or plan is None:
        return {}
    case = parse(ValidationCase, run_as_case(run, steps, str(store_path)), f"run {run['run_id']}")
    return simulate_run(case, source=case.id).metrics()


def _show(args: argparse.Namespace) -> int:
    from executor.records import PHASES
    from perfmodel.files import writable_file
    from perfmodel.names import PHASE_METRICS

    if args.figure:
        writable_file(args.figure, "--figure")
    store = _open_store(args.store)
    run = find_run(store, args.run)
    steps = store.steps(run["run_id"])
    _say_damaged(store, run)
    info = run["info"]
    _say(f"run {run['run_id']}  plan {run['plan_id']} (sha256 {run['plan_hash']})  status {run['status']}")
    _say(f"hardware {run['hardware']}  layout {run['layout']}  host {run['environment'].get('host')}  "
          f"run dir {run['run_dir']}")
    pk = run["environment"].get("packages", {})
    _say("versions " + ", ".join(f"{k} {v}" for k, v in pk.items() if v))
    if "engine_start_s" in info:
        how = f" ({info['engine_start_method']})" if "engine_start_method" in info else ""
        _say(f"engine start {info['engine_start_s']:.1f} s{how}; rollout weights: {info.get('engine_weight_format')}; "
              f"weight update mode {info.get('weight_update_mode')}")
    if not steps:
        _say("no steps recorded")
        return 0
    plan = launched_plan(run)
    if plan is not None and plan.priced_with is not None:  # what the prediction assumed: compare like with like
        pw = plan.priced_with
        cal = plan.calibration
        _say(f"predicted with stack {pw.stack} on {pw.hardware}, calibration {cal.name}"
              + (" (" + ", ".join(f"{k}={v:.4g}" for k, v in cal.params.items()) + ")" if cal.params else ""))
    band = plan.band if plan is not None else {}
    host = _host_prediction(run, plan, steps, args.store)
    _say(f"\n{len(steps)} steps; per phase: measured median, mean, max vs the plan's prediction"
          " (- : not predicted, or not applicable on this machine)"
          + ("; 'this host': the plan re-priced with the host's measured matmul rate and the run's workload"
             if host else ""))
    _say(f"{'phase':15} {'median':>10} {'mean':>10} {'max':>10} {'predicted':>12}"
          + (f" {'P10-P90':>19}" if band else "") + (f" {'this host':>10}" if host else ""))
    for phase in PHASES:
        vals = [v for v in (s["phases_s"].get(phase) for s in steps) if v is not None]
        metric = PHASE_METRICS.get(phase, "")
        pred = run["predicted"].get(metric, None)
        med, mean, top = ((statistics.median(vals), statistics.fmean(vals), max(vals)) if vals else (None, None, None))
        lohi = band.get(metric)
        _say(f"{phase:15} {_fmt(med):>10} {_fmt(mean):>10} {_fmt(top):>10} {_fmt(pred):>12}"
              + ((f" {_fmt(lohi[0]):>9}-{_fmt(lohi[1]):<9}" if lohi else f" {'-':>19}") if band else "")
              + (f" {_fmt(host.get(metric)):>10}" if host else ""))
    engine_rss = max((s["peak_rss_bytes"].get("engine", 0) for s in steps), default=0)
    trainer_rss = max((v for s in steps for k, v in s["peak_rss_bytes"].items() if k.startswith("rank")), default=0)
    if trainer_rss or engine_rss:
        _say(f"peak RSS: trainer rank max {trainer_rss / 2**30:.2f} GiB, SGLang engine processes "
              f"{engine_rss / 2**30:.2f} GiB")
    _say(f"\n{'step':>4} {'step_s':>7} {'reward':>7} {'abs_diff':>9} {'kl':>9} {'lp_mean':>8} "
          f"{'grad_norm':>9} {'rss_max':>9}")
    for s in steps:
        rss = max(s["peak_rss_bytes"].values(), default=0) / 2**30
        step_s = s["phases_s"].get("step")
        _say(f"{s['step']:>4} {float('nan') if step_s is None else step_s:7.2f} {s['reward_mean']:7.3f} "
              f"{s['train_rollout_logprob_abs_diff']:9.4f} {s['train_rollout_kl']:9.5f} "
              f"{s.get('rollout_log_prob_mean', float('nan')):8.3f} "
              f"{s['train_stats'].get('grad_norm', float('nan')):9.3f} {rss:8.2f}G")
    from executor.gap_report import comparison, summary_line, write_figure

    rows = comparison(store, run, steps, plan)
    if rows:
        _say("\n" + summary_line(rows))
    if args.figure:
        write_figure(rows, args.figure)
        _say(f"wrote {args.figure}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from executor.store_path import default_store_path

    args = _parser().parse_args(argv)
    handle_sigterm()  # SIGTERM takes Ctrl-C's path: the run's processes stopped, the run marked, exit 143
    if args.command not in ("launch", "align", "bench-kernels"):
        args.store = args.store or default_store_path()
    try:
        if args.command == "launch":
            return _launch(args)
        if args.command == "align":
            return _align(args)
        if args.command == "runs":
            return _runs(args)
        if args.command == "export":
            return _export(args)
        if args.command == "bench-kernels":
            from executor.bench_kernels import bench_kernels_command

            return bench_kernels_command(args)
        return _show(args)
    except InputError as err:
        if args.debug:
            traceback.print_exc()
        print(f"error: {err.one_line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: the store keeps every step committed before it
        print("interrupted", file=sys.stderr)
        return exit_code(err)


if __name__ == "__main__":
    sys.exit(main())
