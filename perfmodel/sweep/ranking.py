"""A sweep's ranked rows as a user reads them: plans that predict the same grouped into one row, P10-P90 bands,
and each top plan written as a plan file `executor launch --plan` takes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from perfmodel.sweep.collect import prediction_signature


def plan_for(row: dict[str, Any], run: dict[str, Any], calibration: Any, spec_label: str,
             executor: dict[str, Any] | None = None) -> Any:
    from perfmodel.inputs.plan import Plan, prediction_blocks

    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", row["label"]).strip("-").lower()
    blocks = prediction_blocks(row, row.get("mem_train_bytes") or None, row.get("mem_rollout_bytes") or None, run,
                               calibration)
    return Plan.model_validate(run | blocks | {
        "id": f"rank{row['rank']:02d}-{slug}", "created_by": f"perfmodel sweep ({spec_label})",
        "band": {k: [row[f"{k}_p10"], row[f"{k}_p90"]] for k in blocks["predicted"]
                 if row.get(f"{k}_p10") is not None},
        "executor": executor or {"backend": "miles"},
    })


def write_plans(top_rows: list[dict[str, Any]], by_index: dict[int, Any], plans_dir: Path, calibration: Any,
                spec_name: str, executor: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A plan file per top row, launched as `executor` says (the sweep file's; default Miles); returns the rows'
    summary entries with their plan paths."""
    from perfmodel.inputs.plan import dump_plan

    plans_dir.mkdir(exist_ok=True)
    top_summary = []
    for row in top_rows:
        plan = plan_for(row, by_index[row["index"]].run, calibration, spec_name, executor)
        path = plans_dir / f"{plan.id}.yaml"
        dump_plan(plan, path)
        top_summary.append({k: row.get(k) for k in ("rank", "index", "label", "step_time_s", "rollout_time_s",
                                                    "log_probs_time_s", "train_time_s", "weight_update_time_s",
                                                    "tokens_per_s_per_gpu", "gpu_hours_per_step",
                                                    "mem_train_bytes", "step_time_s_p10", "step_time_s_p90",
                                                    "p_best", "tie_group", "draws_lost")}
                           | {"plan_path": str(path)})
    return top_summary


def group_equal_plans(ranked: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first `n` groups of ranked rows whose predictions are identical: one row each (the best ranked), with
    `equal_plans` (how many) and `equal_knobs` ({knob: values}) when the group has more than one plan."""
    from perfmodel.sweep.run import PLAN_FIELDS

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in ranked:
        sig = prediction_signature(row)
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


def add_bands(top_rows: list[dict[str, Any]], by_index: dict[int, Any], hw: Any, cal: Any) -> None:
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
