"""`perfmodel validate`: score the model against published measured runs (docs/validation-cases.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.calibration import Calibration, load_calibration, prediction_band
from perfmodel.cost.memory.training import memoized_training_memory
from perfmodel.errors import InputError
from perfmodel.inputs.case import ValidationCase, case_paths, load_case
from perfmodel.inputs.scenario import build_scenario
from perfmodel.memo import Memo
from perfmodel.predict import predict_metrics
from perfmodel.validation_pairs import PairMember, model_key, ordered_pairs


@dataclass(slots=True)
class CaseResult:
    id: str
    kind: str
    path: str
    rows: list[dict] = field(default_factory=list)  # {id, metric, measured, predicted, rel_error}
    failed_reason: str | None = None
    split_note: str = ""
    stack: str = ""
    stack_notes: tuple[str, ...] = ()
    model: str = ""  # what decides a case's pairs (validation_pairs.py)
    stack_named: str = ""  # as the case names it (framework@release)
    hardware: str = ""
    fits: bool | None = None  # a training run's memory as priced fits its GPUs (a run that ran must); None: serve,
    # or a case that measured no figure of its trainer (its training section a placeholder)


def score_case(case: ValidationCase, path: str, calibrations: list[Calibration] | None = None,
               memo: Memo | None = None, band: bool = False) -> CaseResult:
    """Predict and score one case; each overlay applies when it was fitted for the case's stack / hardware.
    `band`: P10-P90 of every prediction (the overlay's uncertainty, else the prior's) in the rows."""
    res = CaseResult(case.id, case.kind, path, model=model_key(case.model), stack_named=case.stack or "default",
                     hardware=case.hardware)
    bands: dict[str, tuple[float, float, float]] = {}
    memo = memo if memo is not None else Memo()  # the prediction and the fit count share its training memory
    try:
        scenario = build_scenario(case, source=path)
        overlay = None
        for cal in calibrations or []:
            if cal.applies_to(scenario):
                scenario, overlay = cal.apply(scenario), cal
        res.split_note = scenario.split_note
        res.stack, res.stack_notes = scenario.stack.id, scenario.stack.notes
        predicted = predict_metrics(scenario, memo)
        if case.kind != "serve" and case.measured.measures_the_trainer():  # a placeholder trainer never ran
            res.fits = memoized_training_memory(scenario, memo).fits
        if band:  # the overlay is already in the scenario: the band only needs its covariance
            bands = prediction_band(scenario, overlay.uncertainty_only() if overlay else None, memo)
    except InputError as err:
        res.failed_reason = str(err)
    except (ArithmeticError, ValueError, KeyError, IndexError, TypeError) as err:
        # A case the simulator cannot handle is a failed case with the reason shown, never a crash of the
        # whole validation (unseen cases exercise paths the public ones do not).
        res.failed_reason = f"simulator error ({type(err).__name__}): {' '.join(str(err).split())[:200]}"
    if res.failed_reason is not None:
        for metric, measured in case.measured.items():
            res.rows.append({"id": case.id, "metric": metric, "measured": measured, "predicted": None,
                             "rel_error": None})
        return res
    missing = []
    for metric, measured in case.measured.items():
        pred = predicted.get(metric)
        rel = None if pred is None else (pred - measured) / measured
        row = {"id": case.id, "metric": metric, "measured": measured, "predicted": pred, "rel_error": rel}
        if metric in bands:
            row["p10"], row["p90"] = bands[metric][0], bands[metric][2]
        res.rows.append(row)
        if pred is None:
            missing.append(metric)
    if missing:  # listed, never skipped silently
        res.failed_reason = f"not predicted for {case.kind} runs: {', '.join(missing)}"
    return res


def _stats(rows: list[dict]) -> dict:
    errs = [abs(r["rel_error"]) for r in rows if r["rel_error"] is not None]
    return {
        "n": len(errs),
        "mean_abs_rel_error": (sum(errs) / len(errs)) if errs else None,
        "max_abs_rel_error": max(errs) if errs else None,
    } | ({"band": band_stats(rows)} if any(r.get("p10") is not None for r in rows) else {})


def run_validation(paths: list[str], calibrations: list[str] | None = None, band: bool = False) -> dict:
    """Load every case (a malformed one raises InputError: nothing half-scored), predict and score. Each
    calibration overlay applies to the cases of its stack (and hardware, for hardware parameters)."""
    files = case_paths(paths)
    if not files:
        raise InputError(", ".join(paths), "", "no *.yaml validation cases found")
    cases = [(load_case(p), str(p)) for p in files]
    seen: dict[str, str] = {}
    for case, p in cases:
        if case.id in seen:
            raise InputError(p, "id", f"duplicate case id {case.id!r} (also in {seen[case.id]})")
        seen[case.id] = p
    overlays = [load_calibration(cal) for cal in calibrations or []]
    memo = Memo()  # cases share what they price alike (hash-routing tables, layer costs of one hardware)
    results = [score_case(c, p, overlays, memo, band) for c, p in cases]
    rows = [r for res in results for r in res.rows]
    summary = _stats(rows)
    summary["cases"] = len(results)
    summary["failed_cases"] = sum(1 for r in results if r.failed_reason)
    by_kind = {}
    for kind in sorted({r.kind for r in results}):
        kind_rows = [row for res in results if res.kind == kind for row in res.rows]
        by_kind[kind] = _stats(kind_rows) | {
            "failed_cases": sum(1 for r in results if r.kind == kind and r.failed_reason)}
    summary["by_kind"] = by_kind
    priced = [r for r in results if r.fits is not None]
    summary["memory"] = {"runs": len(priced), "fit": sum(1 for r in priced if r.fits),
                         "over": sorted(r.id for r in priced if not r.fits)}
    return {
        "cases": rows,
        "pairs": ordered_pairs(pair_members(results)),
        "failed": [{"id": r.id, "path": r.path, "reason": r.failed_reason} for r in results if r.failed_reason],
        "stacks": {r.id: {"stack": r.stack, "notes": list(r.stack_notes)} for r in results if r.stack},
        "summary": summary,
        "_results": results,
    }


def pair_members(results: list[CaseResult]) -> list[PairMember]:
    """Every predicted figure of the scored cases, as what `validate --pairs` pairs (validation_pairs.py)."""
    return [PairMember(res.id, res.kind, res.model, res.stack_named, res.hardware, row["metric"], row["measured"],
                       row["predicted"])
            for res in results for row in res.rows if row["predicted"] is not None]


def validation_json(report: dict) -> dict:
    return {k: v for k, v in report.items() if not k.startswith("_")}


def default_cases_dir() -> Path | None:
    """The public cases shipped with the repo (studies/validation), if present."""
    p = Path(__file__).resolve().parent.parent / "studies" / "validation" / "cases"
    return p if p.is_dir() else None


def band_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How P10-P90 bands did on measured figures (rows with `measured`, `p10`, `p90`): `coverage`, the share inside
    (a true 80% band covers 80%), and `median_width`, the median P90/P10 (how useful a band that covers is)."""
    banded = [r for r in rows if r.get("p10") is not None and r.get("p90") is not None and r["p10"] > 0]
    if not banded:
        return {"banded": 0, "coverage": None, "median_width": None}
    inside = sum(r["p10"] <= r["measured"] <= r["p90"] for r in banded)
    return {"banded": len(banded), "coverage": inside / len(banded),
            "median_width": float(np.median([r["p90"] / r["p10"] for r in banded]))}
