"""A sweep's folder: candidates.csv (every candidate), summary.json, plans/, best_trace.json and report.html, each
written atomically (perfmodel/files.py), the CSV and the summary last, so a folder with a summary is whole. An
interrupted sweep's folder says so (summary `interrupted`, unevaluated rows `not_evaluated`); the caller holds
signals while it is written (perfmodel/signals.py: HeldSignals)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from perfmodel.files import atomic_path, write_text_atomic
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.sweep.run import ROW_FIELDS, SweepOutcome
from perfmodel.sweep.space import Candidate
from perfmodel.sweep.spec import SweepSpec
from perfmodel.version import __version__


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    with atomic_path(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=ROW_FIELDS, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in ROW_FIELDS})


def write_summary(spec: SweepSpec, outcome: SweepOutcome, top: list[dict[str, Any]], path: Path,
                  extra: dict[str, Any]) -> None:
    data = {"spec": spec.model_dump(mode="json", by_alias=True), "objective": spec.objective,
            "evaluated": outcome.evaluated, "pruned": outcome.pruned, "invalid": outcome.invalid,
            "cached": outcome.cached, "not_evaluated": outcome.not_evaluated,
            "candidates": len(outcome.rows), "elapsed_s": outcome.elapsed_s, "interrupted": outcome.interrupted,
            "version": __version__, "top": top} | extra
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def write_sweep_folder(out_dir: Path, spec: SweepSpec, spec_path: str, candidates: list[Candidate],
                       outcome: SweepOutcome, hw: HardwareProfile, cal: Any, *, top: int, band: bool,
                       ) -> tuple[list[dict[str, Any]], list[Path]]:
    """Everything a sweep writes but its report; returns the top rows (with `plan_path`) and the files."""
    from perfmodel.inputs.run import RunSpec
    from perfmodel.sweep.ranking import add_bands, group_equal_plans, write_plans

    top_rows = group_equal_plans(outcome.top, max(1, top))
    by_index = {c.index: c for c in candidates}
    if band:
        add_bands(top_rows, by_index, hw, cal)
    top_summary = write_plans(top_rows, by_index, out_dir / "plans", cal, Path(spec_path).name)
    for row, entry in zip(top_rows, top_summary):
        row["plan_path"] = entry["plan_path"]
    extra: dict[str, Any] = {}
    files = [Path(e["plan_path"]) for e in top_summary]
    if top_rows:
        from perfmodel.predict import simulate_run
        from perfmodel.trace import write_trace

        best_run = RunSpec.model_validate(by_index[top_rows[0]["index"]].run)
        write_trace(simulate_run(best_run, hardware=hw, record_trace=True).spans(), out_dir / "best_trace.json")
        extra["best_trace"] = "best_trace.json"
        files.append(out_dir / "best_trace.json")
    write_csv(outcome.rows, out_dir / "candidates.csv")
    write_summary(spec, outcome, top_summary, out_dir / "summary.json", extra)
    return top_rows, files + [out_dir / "candidates.csv", out_dir / "summary.json"]
