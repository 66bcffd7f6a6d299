"""Write (or check) the prediction snapshot: every figure of every shipped validation case and the top plans of
a fixed sweep, as the model predicts them now. A refactor that must not change predictions is checked against
it by tests/test_prediction_snapshot.py; a deliberate model change rewrites it (and says so in its commit).

    python scripts/snapshot_predictions.py            # rewrite tests/data/prediction-snapshot.json
                                                      # and the example plans' predictions (tests/test_examples.py)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SNAPSHOT = REPO / "tests" / "data" / "prediction-snapshot.json"
SWEEP_NODES = (4,)
SWEEP_TOP = 10


def case_folders() -> list[Path]:
    root = REPO / "studies" / "validation"
    return [root / "cases"] + sorted(p for p in root.glob("*/cases") if p.parent != root)


def validation_predictions(validate: Callable[[Path], dict] | None = None) -> dict[str, float | None]:
    """Every figure of every case folder; `validate(folder)` gives a folder's report (the tests pass one that
    shares it with the other tests reading the same folder)."""
    from perfmodel.validation import run_validation

    validate = validate or (lambda folder: run_validation([str(folder)]))
    out: dict[str, float | None] = {}
    for folder in case_folders():
        report = validate(folder)
        for row in report["cases"]:
            out[f"{folder.parent.name}/{row['id']}/{row['metric']}"] = row["predicted"]
        for row in report["failed"]:
            out[f"{folder.parent.name}/{row['id']}/failed"] = None
    return out


def sweep_top() -> list[dict[str, Any]]:
    from perfmodel.inputs.hardware import load_hardware
    from perfmodel.inputs.model import load_model
    from perfmodel.sweep.run import evaluate_candidates
    from perfmodel.sweep.space import enumerate_candidates
    from perfmodel.sweep.spec import default_sweep_path, load_sweep_spec

    spec = load_sweep_spec(default_sweep_path()).model_copy(update={"nodes": SWEEP_NODES})
    hw, model = load_hardware(spec.hardware), load_model(spec.model.id)
    cands = list(enumerate_candidates(spec, hw.gpus_per_node, 256, model.num_layers))
    outcome = evaluate_candidates(spec, cands, hw, model, "snapshot", workers=1, cache=None)
    return [{"label": r["label"], "step_time_s": r["step_time_s"], "rollout_time_s": r.get("rollout_time_s"),
             "train_time_s": r.get("train_time_s"), "weight_update_time_s": r.get("weight_update_time_s")}
            for r in outcome.top[:SWEEP_TOP]]


def snapshot(validate: Callable[[Path], dict] | None = None) -> dict[str, Any]:
    return {"validation": validation_predictions(validate), "sweep_top": sweep_top()}


if __name__ == "__main__":
    from perfmodel.cli import main

    SNAPSHOT.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
    for plan in sorted((REPO / "examples").glob("*.yaml")):  # what `executor show` compares a run against
        if main(["simulate", str(plan), "--write-plan", "--json"]) != 0:
            sys.exit(f"could not write the prediction of {plan}")
