"""A sweep's folder: candidates.csv (every candidate), summary.json, plans/, best_trace.json and report.html, each
written atomically (perfmodel/files.py), the CSV and the summary last, so a folder with a summary is whole. An
interrupted sweep's folder says so (summary `interrupted`, unevaluated rows `not_evaluated`); the caller holds
signals while it is written (perfmodel/signals.py: HeldSignals)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfmodel.files import write_text_atomic
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.sweep.run import SweepOutcome
from perfmodel.sweep.spec import SweepSpec
from perfmodel.version import __version__


def write_summary(spec: SweepSpec, outcome: SweepOutcome, top: list[dict[str, Any]], path: Path,
                  extra: dict[str, Any]) -> None:
    data = {"spec": spec.model_dump(mode="json", by_alias=True), "objective": spec.objective,
            "evaluated": outcome.evaluated, "pruned": outcome.pruned, "invalid": outcome.invalid,
            "cached": outcome.cached, "not_evaluated": outcome.not_evaluated,
            "candidates": outcome.candidates, "elapsed_s": outcome.elapsed_s, "interrupted": outcome.interrupted,
            "version": __version__, "top": top} | extra
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def write_sweep_folder(out_dir: Path, spec: SweepSpec, spec_path: str, outcome: SweepOutcome, hw: HardwareProfile,
                       cal: Any, *, top: int, band: bool
                       ) -> tuple[list[dict[str, Any]], list[Path], dict[str, Any]]:
    """Everything a sweep writes but its report; returns the top rows (with `plan_path`), the files and what
    summary.json says of the ranking's odds (`odds`: how they were drawn; `settle`: the settling measurement)."""
    from perfmodel.inputs.run import RunSpec
    from perfmodel.sweep.odds import add_odds
    from perfmodel.sweep.ranking import add_bands, group_equal_plans, write_plans

    top_rows = group_equal_plans(outcome.top, max(1, top))
    for row in top_rows:  # the group's members counted over every ranked row, not only those kept whole
        members = outcome.rows.count_equal(row)
        if members > 1:
            row["equal_plans"] = members
    by_index = outcome.rows.candidates
    if band:
        add_bands(top_rows, by_index, hw, cal)
    odds = add_odds(top_rows, by_index, hw, cal)
    top_summary = write_plans(top_rows, by_index, out_dir / "plans", cal, Path(spec_path).name,
                              spec.executor.model_dump() if spec.executor else None)
    for row, entry in zip(top_rows, top_summary):
        row["plan_path"] = entry["plan_path"]
    said: dict[str, Any] = {"odds": None, "settle": None}
    settle_files: list[Path] = []
    if odds is not None:
        from perfmodel.sweep.settle import settling_measurement
        from perfmodel.sweep.small_scale import one_engine_version, smallest_version, weight_update_version

        compared = top_rows[:len(odds.values)]
        writes = (by_index, hw, out_dir / "plans", cal, Path(spec_path).name,
                  spec.executor.model_dump() if spec.executor else None)
        small, engine = smallest_version(compared, *writes), one_engine_version(compared, *writes)
        update = weight_update_version(compared, *writes)
        settle = settling_measurement(compared, odds.values, odds.shared, odds.drawn, odds.plan_sigma_log, small,
                                      engine, odds.thetas, odds.names, update)
        named = [x["plan"] for x in (settle, (settle or {}).get("cheaper")) if x]
        for version in (small, engine, update):  # written for the command; kept only when named
            if version is not None and version["plan_path"] not in named:
                Path(version["plan_path"]).unlink()
            elif version is not None:
                settle_files.append(Path(version["plan_path"]))
        said = {"odds": odds.info, "settle": settle}
    extra: dict[str, Any] = dict(said) if odds is not None else {}
    files = [Path(e["plan_path"]) for e in top_summary] + settle_files
    if top_rows:
        from perfmodel.predict import simulate_run
        from perfmodel.trace import write_trace

        best_run = RunSpec.model_validate(by_index[top_rows[0]["index"]].run)
        write_trace(simulate_run(best_run, hardware=hw, record_trace=True).spans(), out_dir / "best_trace.json")
        extra["best_trace"] = "best_trace.json"
        files.append(out_dir / "best_trace.json")
    outcome.rows.write_csv(out_dir / "candidates.csv")
    write_summary(spec, outcome, top_summary, out_dir / "summary.json", extra)
    return top_rows, files + [out_dir / "candidates.csv", out_dir / "summary.json"], said
