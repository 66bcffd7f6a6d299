"""`perfmodel kernels`: check the model's kernel prices against measured kernel tables, or show one price term by
term. The tables check the model; they are never the model (docs/kernels.md)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from perfmodel.errors import InputError
from perfmodel.kernels.load import DEFAULT_ROWS_PER_TABLE
from perfmodel.kernels.table import OPS
from perfmodel.report.console import FORMATS, console, new_table, write_rows

if TYPE_CHECKING:
    from perfmodel.inputs.hardware import HardwareProfile
    from perfmodel.kernels.check import CheckResult

def add_rows_per_table(p: argparse.ArgumentParser, when: str = "") -> None:
    """`--rows-per-table`, as `kernels check` and `calibrate --kernels` both take it (`rows_per_table` reads it)."""
    p.add_argument("--rows-per-table", type=int, default=DEFAULT_ROWS_PER_TABLE, metavar="N",
                   help=f"{when}an evenly spaced sample of at most N rows of each aiconfigurator table (default "
                   f"{DEFAULT_ROWS_PER_TABLE}; 0: every row, about 4 M, about a minute)")


def rows_per_table(args: argparse.Namespace) -> int | None:
    """`--rows-per-table` checked: the sample size, None for every row."""
    if args.rows_per_table < 0:
        raise InputError("--rows-per-table", str(args.rows_per_table), "must be 0 (every row) or positive")
    return args.rows_per_table or None


def register(sub: argparse._SubParsersAction) -> None:
    k = sub.add_parser("kernels", help="check kernel prices against measured kernel tables, or show one price",
                       description="Measured single kernels (GEMM, attention, grouped GEMM, collectives, EP "
                       "dispatch) priced by the functions a step uses: `check` summarizes predicted/measured per "
                       "lane, GPU and regime; `show` prints one kernel's price term by term.")
    ks = k.add_subparsers(dest="kernels_command", metavar="ACTION", required=True)
    c = ks.add_parser("check", help="price every row of kernel tables and summarize the ratio predicted/measured")
    c.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                   help="table files (.csv, docs/kernels.md) or folders of them, or aiconfigurator-core's data "
                   "folder (default: the installed aiconfigurator-core's tables and studies/kernels/)")
    c.add_argument("--tables", action="append", type=Path, default=[], metavar="DIR", help="the same as a PATH")
    c.add_argument("--hardware", action="append", metavar="ID", help="only rows of this hardware id (repeatable)")
    c.add_argument("--lane", action="append", metavar="NAME", help="only this lane (repeatable; names: "
                   "`perfmodel kernels check --list-lanes`)")
    c.add_argument("--list-lanes", action="store_true", help="print the lanes and exit")
    c.add_argument("--calibration", action="append", metavar="FILE", default=[],
                   help="price with a calibration overlay's hardware parameters (perfmodel calibrate --kernels)")
    c.add_argument("--by-gpu", action="store_true", help="one row per lane, GPU and regime (default: pooled over "
                   "GPUs, with each GPU's median beside)")
    add_rows_per_table(c)
    c.add_argument("--worst", type=int, default=3, metavar="K", help="the K worst rows of each lane (default 3)")
    c.add_argument("--targets", action="store_true",
                   help="also list each lane, GPU and regime whose median is outside issue 22's target band (bulk "
                        "0.87-1.15, DeepEP 0.7-1.4; small 0.67-1.5)")
    c.add_argument("--format", choices=FORMATS, default="table", help="table (default), csv or json")
    c.set_defaults(func=run_check)
    s = ks.add_parser("show", help="one kernel's price on one hardware profile, term by term, in every lane")
    s.add_argument("op", help=", ".join(OPS))
    s.add_argument("shape", help="key=value pairs as in a table's shape column, e.g. 'm=128 n=7168 k=2048'")
    s.add_argument("--hardware", required=True, metavar="ID")
    s.add_argument("--dtype", default="bf16")
    s.add_argument("--world-size", type=int, default=1, help="GPUs taking part (collectives, EP)")
    s.add_argument("--variant", default="", help="'', engine, engine-kernel, graph or ll (docs/kernels.md)")
    s.set_defaults(func=run_show)


def _hardware_ids(ids: list[str] | None) -> set[str] | None:
    from perfmodel.inputs.hardware import known_hardware_ids

    if not ids:
        return None
    known = known_hardware_ids()
    for hw in ids:
        if hw not in known:
            raise InputError("--hardware", hw, f"no such hardware profile (one of {', '.join(known)})")
    return set(ids)


def run_check(args: argparse.Namespace) -> int:
    from perfmodel.kernels.check import check_rows
    from perfmodel.kernels.load import default_table_paths, load_tables
    from perfmodel.kernels.price import LANE_NAMES

    if args.list_lanes:
        print("\n".join(LANE_NAMES))
        return 0
    lanes = set(args.lane or ())
    if unknown := sorted(lanes - set(LANE_NAMES)):
        raise InputError("--lane", unknown[0], f"no such lane (one of {', '.join(LANE_NAMES)})")
    sample = rows_per_table(args)
    hardware = _hardware_ids(args.hardware)
    paths = [*args.paths, *args.tables] or default_table_paths()
    if not paths:
        raise InputError("perfmodel kernels check", "PATH", "no tables given and none installed: pass a table "
                         "or folder, or `pip install 'perfmodel[kernels]'` for aiconfigurator-core's")
    t0 = time.perf_counter()
    rows, problems = load_tables(paths, hardware, sample)
    result = check_rows(rows, lanes or None, _calibrated_profiles(args.calibration))
    result.problems[:0] = problems
    elapsed_s = time.perf_counter() - t0
    if args.format == "json":
        print(json.dumps(result.to_json(args.worst), indent=2))
    elif args.format == "csv":
        write_rows([s.to_row() for s in result.stats()], "csv")
    else:
        _print_check(result, args.by_gpu, args.worst, len(rows), elapsed_s)
        if args.targets:
            _print_targets(result)
    return 0 if result.priced else 1


def _print_targets(result: CheckResult) -> None:
    """The lane cells (pooled and per GPU, bulk and small) outside issue 22's target bands."""
    from perfmodel.kernels.check import target_band, target_misses

    out = console()
    stats = [s for s in result.stats() if target_band(s.lane, s.regime) is not None]
    misses = target_misses(stats)
    for s in misses:
        lo, hi = target_band(s.lane, s.regime)
        out.print(f"outside its target: {s.lane} {s.regime} {s.hardware}: median {s.median:.2f} of {s.n:,} rows "
                  f"(target {lo}-{hi})", markup=False, highlight=False, soft_wrap=True)
    out.print(f"{len(stats) - len(misses)} of {len(stats)} lane cells (pooled and per GPU, bulk and small) within "
              "their target bands", markup=False, highlight=False, soft_wrap=True)


def _calibrated_profiles(paths: list[str]) -> dict[str, HardwareProfile]:
    """hardware id -> the profile with each overlay's hardware parameters."""
    from perfmodel.calibration import load_calibration
    from perfmodel.inputs.hardware import load_hardware

    out: dict[str, HardwareProfile] = {}
    for path in paths:
        cal = load_calibration(path)
        if not cal.hardware:
            raise InputError(path, "hardware", "this overlay fits no hardware parameters: nothing to price with")
        out[cal.hardware] = cal.hardware_profile(out.get(cal.hardware) or load_hardware(cal.hardware))
    return out


def _print_check(result: CheckResult, by_gpu: bool, worst: int, n_rows: int, elapsed_s: float) -> None:
    from perfmodel.kernels.check import ALL, REGIMES
    from perfmodel.kernels.table import format_shape

    out = console()
    for line in result.problems:
        out.print(f"[yellow]skipped:[/yellow] {escape(line)}", markup=True, highlight=False, soft_wrap=True)
    for why, count in sorted(result.skipped.items()):
        out.print(f"skipped {count:,} row(s): {why}", markup=False, highlight=False)
    stats = result.stats()
    gpus = sorted({s.hardware for s in stats if s.hardware != ALL})
    cols = ["lane", "regime", "GPU", "n", "median", "mean |ln|", "P10", "P90"] if by_gpu else \
        ["lane", "regime", "n", "median", "mean |ln|", "P10", "P90", *gpus]
    table = new_table("predicted / measured (below 1: the model is too fast)", cols, left=("lane", "regime", "GPU"))
    median = {(s.lane, s.hardware, s.regime): s for s in stats}
    for s in stats:
        if by_gpu and s.hardware == ALL:
            continue
        if not by_gpu and (s.hardware != ALL or s.regime not in REGIMES):
            continue
        row = [s.lane, s.regime] + ([s.hardware] if by_gpu else [])
        row += [f"{s.n:,}", f"{s.median:.2f}", f"{s.mean_abs_log:.2f}", f"{s.p10:.2f}", f"{s.p90:.2f}"]
        if not by_gpu:
            row += [f"{g.median:.2f}" if (g := median.get((s.lane, gpu, s.regime))) else "-" for gpu in gpus]
        table.add_row(*row)
    out.print(table)
    if worst:
        for lane in sorted({p.lane for p in result.priced}):
            for p in result.worst(lane, worst):
                out.print(f"worst {lane}: {p.row.hardware} {p.row.op} {p.row.dtype} {format_shape(p.row.shape)}: "
                          f"measured {p.row.latency_s * 1e6:,.1f} us, predicted {p.predicted_s * 1e6:,.1f} us "
                          f"(x{p.ratio:.2f}) {p.row.where or p.row.source}", markup=False, highlight=False,
                          soft_wrap=True)
    out.print(f"{len(result.priced):,} prices of {n_rows:,} rows in {elapsed_s:.1f} s", markup=False,
              highlight=False)


def run_show(args: argparse.Namespace) -> int:
    from perfmodel.inputs.hardware import load_hardware
    from perfmodel.kernels.price import explain, lanes_for
    from perfmodel.kernels.table import DTYPES, OPS, VARIANTS, KernelRow, parse_shape

    if args.op not in OPS:
        raise InputError("perfmodel kernels show", "op", f"unknown op {args.op!r} (one of {', '.join(OPS)})")
    if args.dtype not in DTYPES:
        raise InputError("perfmodel kernels show", "--dtype", f"unknown dtype {args.dtype!r} (one of "
                         f"{', '.join(DTYPES)})")
    if args.variant not in VARIANTS:
        raise InputError("perfmodel kernels show", "--variant", f"unknown variant {args.variant!r}")
    try:
        shape = parse_shape(args.shape, args.op)
    except ValueError as err:
        raise InputError("perfmodel kernels show", "shape", str(err)) from None
    hw = load_hardware(args.hardware, field="--hardware")
    row = KernelRow(args.op, shape, args.dtype, "-", max(1, args.world_size), 1.0, hw.id, "-", variant=args.variant)
    lanes = lanes_for(row)
    if not lanes:
        raise InputError("perfmodel kernels show", "op", f"no lane prices {args.op} {args.dtype} "
                         f"{args.variant or '(plain)'}")
    for lane in lanes:
        print(f"{lane.name} on {hw.id}: {args.op} {args.shape} {args.dtype}")
        for term, value, unit in explain(lane, row, hw):
            print(f"  {term:38s} {value:14.6g} {unit}")
    return 0
