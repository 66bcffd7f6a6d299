"""`perfmodel report`: write the capacity report (HTML, optional PNGs) of a sweep output folder."""

from __future__ import annotations

import argparse
from pathlib import Path

# capacity.py imports only the standard library at load time (plotly only when a report is built), so importing
# it here keeps `perfmodel --help` fast and its defaults in one place.
from perfmodel.report.capacity import DEFAULT_TOP, REPORT_NAME, build_report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="write the capacity report (HTML, optional PNGs) of a sweep output folder",
        description="Read a `perfmodel sweep` output folder (candidates.csv, summary.json, best_trace.json, "
        "optional measured.json) and write one self-contained HTML page that works offline: ranked layouts, "
        "step-time breakdown, capacity curve, memory against capacity, the best plan's simulated timeline, and "
        "predicted vs measured when measurements exist.")
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", help="output folder of perfmodel sweep")
    p.add_argument("--out", metavar="FILE.html", help=f"HTML file to write (default: SWEEP_DIR/{REPORT_NAME})")
    p.add_argument("--png", metavar="DIR", help="also write each figure as a PNG into DIR (needs kaleido >= 1.0 "
                   "and Chrome/Chromium; set BROWSER_PATH if it is not on PATH)")
    p.add_argument("--top", type=int, default=DEFAULT_TOP, metavar="N",
                   help=f"layouts in the table, breakdown and memory charts (default {DEFAULT_TOP})")
    p.add_argument("--measured", metavar="FILE.json", help="measurements: a JSON list of {phase, predicted, "
                   "measured, run, step} (default: SWEEP_DIR/measured.json when present)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfmodel.report.sweep_data import read_summary

    path = build_report(args.sweep_dir, out_html=args.out, png_dir=args.png, measurements=args.measured,
                        top=args.top)
    print(f"report written to {path}")
    summary = Path(args.sweep_dir) / "summary.json"
    if summary.is_file() and read_summary(summary).get("interrupted"):
        print("note: the sweep was interrupted; the report covers the candidates it evaluated")
    if args.png:
        print(f"figures written to {args.png}")
    return 0
