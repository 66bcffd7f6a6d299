"""`perfmodel validate`: score the model against measured runs (validation case YAML files)."""

from __future__ import annotations

import argparse
import json

from rich.markup import escape

from perfmodel.errors import InputError
from perfmodel.report.console import FORMATS, console, new_table, write_rows

CSV_COLUMNS = ["id", "metric", "measured", "predicted", "rel_error", "p10", "p90"]


def register(sub: argparse._SubParsersAction) -> None:
    v = sub.add_parser("validate", help="score the model against measured runs (validation case YAML files)",
                       description="Predict every measured figure of each case and report the relative error. "
                       "Cases the model cannot predict are listed with the reason and counted as failed.")
    v.add_argument("paths", nargs="*", metavar="PATH",
                   help="case files or folders of *.yaml (default: the bundled public cases)")
    v.add_argument("--format", choices=FORMATS, default="table",
                   help="table (default; piped: every name in full), csv (one row per case and metric) or json "
                   "({cases, failed, summary})")
    v.add_argument("--json", action="store_const", const="json", dest="format", help="the same as --format json")
    v.add_argument("--calibration", action="append", metavar="FILE",
                   help="calibration overlay (perfmodel calibrate) for the cases of its stack (and hardware, for "
                   "hardware parameters); repeatable")
    v.add_argument("--band", action="store_true",
                   help="a P10-P90 band on every prediction: from the overlay's parameter uncertainty and the spread "
                   "its runs left, or without one each component's measured zero-shot spread; prints the coverage")
    v.add_argument("--pairs", action="store_true",
                   help="how the predictions order measured runs: every two cases of one model and framework whose "
                   "measured values of a metric differ by more than 5%%; the share ordered right (overall, same "
                   "hardware, same hardware and stack release, per kind) and each wrong pair")
    v.add_argument("--cv", action="store_true",
                   help="cross-validate within (stack, hardware) groups: zero-shot vs calibrated (leave-one-out on "
                   "the stack's compute multiplier), P10-P90 bands and their coverage, and the learning curve")
    v.set_defaults(func=run)


def _fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _fmt_num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.4g}" if abs(x) < 1e6 else f"{x:.4e}"


def run(args: argparse.Namespace) -> int:
    from perfmodel.api import case_inputs, validate

    paths = case_inputs(args.paths or None)
    if args.cv:
        return _run_cv(paths, args.format)
    report = validate(paths, calibration=args.calibration or (), band=args.band)
    if args.format == "json":
        print(json.dumps(report.to_json(), indent=2))
        return 0
    if args.pairs:
        return _print_pairs(report.pairs, args.format)
    if args.format == "csv":
        write_rows(report.rows, "csv", CSV_COLUMNS)
        return 0
    out = console()
    cols = ["case", "metric", "measured", "predicted", "error"] + (["P10", "P90"] if args.band else [])
    table = new_table("perfmodel validate", cols, left=("case", "metric"))
    rows = report.rows
    for i, row in enumerate(rows):  # one section per case: its id once, then its metrics
        first = i == 0 or rows[i - 1]["id"] != row["id"]
        last = i == len(rows) - 1 or rows[i + 1]["id"] != row["id"]
        band = [_fmt_num(row.get("p10")), _fmt_num(row.get("p90"))] if args.band else []
        table.add_row(row["id"] if first else "", row["metric"], _fmt_num(row["measured"]),
                      _fmt_num(row["predicted"]), _fmt_pct(row["rel_error"]), *band, end_section=last)
    out.print(table)
    for f in report.failed:
        out.print(f"[yellow]not predicted[/]: {escape(str(f['id']))}: {escape(str(f['reason']))}", soft_wrap=True,
                  markup=True)
    by_note: dict[str, list[str]] = {}  # one line per note, naming the cases it concerns
    for cid, st in report.stacks.items():
        for note in st["notes"]:
            by_note.setdefault(note, []).append(cid)
    for note, cids in by_note.items():
        where = cids[0] if len(cids) == 1 else f"{len(cids)} cases ({', '.join(cids)})"
        out.print(f"note: {where}: {note}", soft_wrap=True)
    s = report.summary
    line = (f"{s['cases']} cases, {s['failed_cases']} not predicted; scored metrics n={s['n']}, "
            f"mean |error| {_fmt_pct(s['mean_abs_rel_error'])}, max |error| {_fmt_pct(s['max_abs_rel_error'])}")
    out.print(line.replace("+", ""), soft_wrap=True)
    if args.band and s.get("band", {}).get("banded"):
        out.print(f"P10-P90 bands: {_band_line(s['band'])}", soft_wrap=True)
    for kind, ks in s["by_kind"].items():
        band = f"; bands: {_band_line(ks['band'])}" if args.band and ks.get("band", {}).get("banded") else ""
        out.print(f"  {kind}: n={ks['n']}, mean |error| {_fmt_pct(ks['mean_abs_rel_error'])}, "
                  f"max |error| {_fmt_pct(ks['max_abs_rel_error'])}, not predicted {ks['failed_cases']}"
                  .replace("+", "") + band, soft_wrap=True)
    mem = s.get("memory", {})
    if mem.get("runs"):
        out.print(f"training memory: {mem['fit']} of {mem['runs']} measured runs fit their GPUs as priced (a run that "
                  "ran fits: the rest are the memory model's misses; --json lists them)", soft_wrap=True)
    return 0


def _band_line(b: dict) -> str:
    return (f"coverage {b['coverage']:.0%} of {b['banded']} measured figures (a true P10-P90 band: 80%), median "
            f"P90/P10 {b['median_width']:.2f}")


PAIR_COLUMNS = ["model", "framework", "metric", "higher_id", "higher_measured", "higher_predicted", "lower_id",
                "lower_measured", "lower_predicted", "same_hardware", "same_stack", "tie"]


def _pair_share(name: str, t: dict) -> str:
    share = "-" if t["share"] is None else f"{t['share']:.0%}"
    return f"{name}: {t['right']} of {t['n']} pairs ordered right ({share})"


def _print_pairs(pairs: dict, fmt: str) -> int:
    rows = [{"model": w["model"], "framework": w["framework"], "metric": w["metric"],
             **{f"{side}_{k}": w[side][k] for side in ("higher", "lower") for k in ("id", "measured", "predicted")},
             "same_hardware": w["same_hardware"], "same_stack": w["same_stack"], "tie": w["tie"]}
            for w in pairs["wrong"]]
    if fmt == "csv":
        write_rows(rows, "csv", PAIR_COLUMNS)
        return 0
    out = console()
    table = new_table("perfmodel validate --pairs: pairs in the wrong order (higher measured first)",
                      ["metric", "higher measured", "measured", "predicted", "lower measured", "measured",
                       "predicted", "same"], left=("metric", "higher measured", "lower measured", "same"))
    for r in rows:
        same = ("hw+stack" if r["same_stack"] else "hw") if r["same_hardware"] else "-"
        table.add_row(r["metric"], r["higher_id"], _fmt_num(r["higher_measured"]), _fmt_num(r["higher_predicted"]),
                      r["lower_id"], _fmt_num(r["lower_measured"]), _fmt_num(r["lower_predicted"]),
                      same + (" (tie)" if r["tie"] else ""))
    if rows:
        out.print(table)
    out.print(f"rule: {pairs['rule']}", soft_wrap=True)
    out.print(_pair_share("all", pairs), soft_wrap=True)
    out.print("  " + _pair_share("same hardware", pairs["same_hardware"]), soft_wrap=True)
    out.print("  " + _pair_share("same hardware and stack release", pairs["same_hardware_and_stack"]),
              soft_wrap=True)
    for kind, t in pairs["by_kind"].items():
        out.print("  " + _pair_share(kind, t), soft_wrap=True)
    return 0


def _run_cv(paths: list[str], fmt: str) -> int:
    from perfmodel.crossval import cross_validate, curves_for
    from perfmodel.inputs.case import case_paths, load_case

    files = case_paths(paths)
    if not files:
        raise InputError(", ".join(paths), "", "no *.yaml validation cases found")
    curves, failed = curves_for([(load_case(p), str(p)) for p in files])
    cv = cross_validate(curves)
    if fmt == "json":
        print(json.dumps(cv | {"failed": failed}, indent=2, default=str))
        return 0
    if fmt == "csv":
        write_rows([{"group": g} | s for g, s in cv["groups"].items() if s.get("n")], "csv",
                   ["group", "runs", "n", "zero_shot_mae", "calibrated_mae", "calibrated_beyond_25", "coverage",
                    "median_width"])
        return 0
    out = console()
    table = new_table("perfmodel validate --cv (leave-one-out within stack and hardware)",
                      ["group", "runs", "figures", "zero-shot |err|", "calibrated |err|", "calibrated > 25%",
                       "P10-P90 coverage", "median P90/P10"], left=("group",))
    for g, s in cv["groups"].items():
        if not s.get("n"):
            continue
        table.add_row(g, str(s["runs"]), str(s["n"]), f"{s['zero_shot_mae']:.1%}", f"{s['calibrated_mae']:.1%}",
                      f"{s['calibrated_beyond_25']:.0%}", f"{s['coverage']:.0%}", f"{s['median_width']:.2f}")
    out.print(table)
    curve = ", ".join(f"{k} runs {v[0]:.1%} (zero-shot {v[2]:.1%}, n={v[1]})"
                      for k, v in cv["learning_curve"].items() if v[0] is not None)
    out.print("learning curve (mean |error| after k calibration runs of the same group, beside the zero-shot "
              f"|error| of the same figures): {curve}", soft_wrap=True)
    for cid, why in failed:
        out.print(f"[yellow]not predicted[/]: {escape(str(cid))}: {escape(str(why))}", soft_wrap=True, markup=True)
    return 0
