"""The `perfmodel` command line. Bad input prints one line (file: field: fix) and exits 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from perfmodel import __version__
from perfmodel.errors import InputError

EXIT_BAD_INPUT = 2


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _fmt_num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.4g}" if abs(x) < 1e6 else f"{x:.4e}"


def cmd_validate(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from perfmodel.validate import default_cases_dir, run_validation, validation_json

    paths = args.paths
    if not paths:
        d = default_cases_dir()
        if d is None:
            raise InputError("", "PATH", "give case files or folders (no bundled cases found)")
        paths = [str(d)]
    report = run_validation(paths, args.calibration)
    if args.json:
        print(json.dumps(validation_json(report), indent=2))
        return 0
    console = Console()
    table = Table(title="perfmodel validate", show_lines=False)
    for col in ("case", "metric", "measured", "predicted", "error"):
        table.add_column(col, justify="left" if col in ("case", "metric") else "right")
    for row in report["cases"]:
        table.add_row(row["id"], row["metric"], _fmt_num(row["measured"]), _fmt_num(row["predicted"]),
                      _fmt_pct(row["rel_error"]))
    console.print(table)
    for f in report["failed"]:
        console.print(f"[yellow]not predicted[/]: {f['id']}: {f['reason']}", soft_wrap=True)
    s = report["summary"]
    line = (f"{s['cases']} cases, {s['failed_cases']} not predicted; scored metrics n={s['n']}, "
            f"mean |error| {_fmt_pct(s['mean_abs_rel_error'])}, max |error| {_fmt_pct(s['max_abs_rel_error'])}")
    console.print(line.replace("+", ""), soft_wrap=True)
    for kind, ks in s["by_kind"].items():
        console.print(f"  {kind}: n={ks['n']}, mean |error| {_fmt_pct(ks['mean_abs_rel_error'])}, "
                      f"max |error| {_fmt_pct(ks['max_abs_rel_error'])}, not predicted {ks['failed_cases']}"
                      .replace("+", ""), soft_wrap=True)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from perfmodel.catalogue import catalogue_ids
    from perfmodel.inputs.model import load_model

    ids = [args.id] if args.id else catalogue_ids()
    for model_id in ids:
        m = load_model(model_id, field="id")
        print(m.describe())
        if len(ids) > 1:
            print()
    return 0


def cmd_hardware(args: argparse.Namespace) -> int:
    from perfmodel.inputs.hardware import known_hardware_ids, load_hardware

    ids = [args.id] if args.id else known_hardware_ids()
    for hw_id in ids:
        hw = load_hardware(hw_id, field="id")
        bf16 = hw.peak("bf16") / 1e12
        fp8 = hw.peak("fp8") / 1e12
        print(f"{hw.id:10s} {hw.name:28s} bf16 {bf16:7.0f} TF  fp8 {fp8:7.0f} TF  HBM {hw.hbm_bytes / 1e9:5.0f} GB "
              f"@ {hw.hbm_bandwidth_bytes_per_s / 1e12:4.2f} TB/s  {hw.gpus_per_node}/node "
              f"{hw.scale_up_topology} {hw.scale_up_gpu_bytes_per_s / 1e9:5.0f} GB/s  NIC {hw.nic_bytes_per_s / 1e9:4.0f} GB/s")
        if args.id:
            for key, src in sorted(hw.sources.items()):
                print(f"    {key}: {src}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from perfmodel.inputs.run_file import load_run_file
    from perfmodel.inputs.scenario import build_scenario

    run = load_run_file(args.path)
    s = build_scenario(run, source=args.path)
    lay = s.layout.model_copy(update={"dp": s.dp})
    print(f"{args.path}: {run.kind} {s.model.id or s.model.family} on {run.gpus} x {s.hardware.id}")
    print(f"  training layout   {lay.short()} (expert-DP {s.expert_dp}), schedule {s.schedule}")
    print(f"  pipeline split    {','.join(map(str, s.stage_layers))} ({s.split_note})")
    print(f"  micro-batches     {s.num_microbatches} per DP rank"
          + (" (upper bound: packed by max_tokens_per_gpu)" if s.train.max_tokens_per_gpu else ""))
    if run.rl is not None:
        ro = run.rl.rollout
        engines = run.rl.rollout_gpus // ro.engine_gpus
        print(f"  rollout           {engines} engines x {ro.engine_gpus} GPUs (TP{ro.tp}/EP{ro.ep}/DP{ro.dp}"
              f"{' dp-attention' if ro.dp_attention else ''}), {run.rl.placement}{' async' if run.rl.async_ else ''}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="perfmodel",
        description="Predict, rank and validate RL training layouts of large MoE models on GPU clusters.",
    )
    p.add_argument("--version", action="version", version=f"perfmodel {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    v = sub.add_parser("validate", help="score the model against measured runs (validation case YAML files)",
                       description="Predict every measured figure of each case and report the relative error. "
                       "Cases the model cannot predict are listed with the reason and counted as failed.")
    v.add_argument("paths", nargs="*", metavar="PATH",
                   help="case files or folders of *.yaml (default: the bundled public cases)")
    v.add_argument("--json", action="store_true", help="print {cases, failed, summary} as JSON")
    v.add_argument("--calibration", action="append", metavar="FILE",
                   help="calibration overlay (perfmodel calibrate) for the cases on its hardware; repeatable")
    v.set_defaults(func=cmd_validate)

    mo = sub.add_parser("models", help="list the model catalogue, or summarize one model",
                        description="Summarize catalogue models: layers, attention kinds, MoE shape, parameters.")
    mo.add_argument("id", nargs="?", help="a catalogue id or a path to a Hugging Face config.json")
    mo.set_defaults(func=cmd_models)

    hw = sub.add_parser("hardware", help="list hardware profiles, or show one with its sources",
                        description="Show hardware profiles (hwprofiles/*.yaml); with an id, every number's source.")
    hw.add_argument("id", nargs="?", help="a hardware id or a path to a profile YAML")
    hw.set_defaults(func=cmd_hardware)

    c = sub.add_parser("check", help="check a case or plan file and print the resolved layout",
                       description="Load a validation case or plan, check every layout rule against the model and "
                       "hardware, and print the derived dp, pipeline split and micro-batch count.")
    c.add_argument("path", metavar="FILE", help="a validation case or plan YAML")
    c.set_defaults(func=cmd_check)

    _register_later_commands(sub)
    for sp in sub.choices.values():  # `perfmodel validate --debug` works as well as `perfmodel --debug validate`
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks for errors")
    return p




def _register_later_commands(sub: argparse._SubParsersAction) -> None:
    from perfmodel.commands import register_all

    register_all(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except InputError as err:
        if args.debug:
            raise
        print(f"error: {err.one_line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
