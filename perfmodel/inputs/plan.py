"""The plan file: the hand-off contract from `perfmodel sweep` to `executor launch --plan`.

A plan is a run (hardware, model, job with its layout) plus what the model predicted for it, the calibration
it used, and the executor backend with its options. The executor reads exactly this file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from perfmodel.files import write_text_atomic
from perfmodel.inputs.loading import parse, read_mapping
from perfmodel.inputs.measured import Measured
from perfmodel.inputs.run import RunSpec

PLAN_VERSION = 1


class Predicted(Measured):
    """What the model predicted, in the same names as measurements, plus memory per GPU."""

    peak_memory_train_bytes: float | None = Field(None, ge=0)
    peak_memory_rollout_bytes: float | None = Field(None, ge=0)


class CalibrationRef(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "none"
    params: dict[str, float] = Field(default_factory=dict)


class PricedWith(BaseModel):
    """What the plan's `predicted` numbers came from, so a measurement is compared with like."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    hardware: str
    stack: str  # the stack profile actually used (framework[@release], or default after a fallback)
    stack_knobs: dict[str, Any] = Field(default_factory=dict)
    notes: tuple[str, ...] = ()


class ExecutorSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    backend: Literal["local", "miles"] = "miles"
    options: dict[str, Any] = Field(default_factory=dict, description="validated by the backend")


class Plan(RunSpec):
    plan_version: Literal[1] = PLAN_VERSION
    id: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
    created_by: str = ""
    predicted: Predicted = Predicted()
    calibration: CalibrationRef = CalibrationRef()
    band: dict[str, list[float]] = Field(default_factory=dict, description="P10, P90 of predicted figures")
    priced_with: PricedWith | None = None
    executor: ExecutorSection = ExecutorSection()
    notes: str = ""


# the figures a plan predicts (the names measurements use), besides peak memory
PREDICTED_METRICS = ("step_time_s", "rollout_time_s", "log_probs_time_s", "train_time_s", "weight_update_time_s",
                     "tokens_per_s_per_gpu")


def prediction_blocks(figures: dict[str, Any], train_memory_bytes: float | None, rollout_memory_bytes: float | None,
                      run: dict[str, Any], calibration: Any) -> dict[str, Any]:
    """A plan's `predicted`, `calibration` and `priced_with` sections: what the model predicted, with which overlay
    (its path and parameters, or none) and which hardware and stack knobs, so a measurement is compared with like."""
    from perfmodel.inputs.stack import KNOBS, StackOptions, resolve_stack

    options = run.get("stack_options")
    stack = resolve_stack(run.get("stack"), StackOptions(**options) if options else None)
    predicted = {k: figures[k] for k in PREDICTED_METRICS if figures.get(k) not in (None, "")}
    if train_memory_bytes:
        predicted["peak_memory_train_bytes"] = train_memory_bytes
    if rollout_memory_bytes:
        predicted["peak_memory_rollout_bytes"] = rollout_memory_bytes
    params = {}
    if calibration is not None:
        params = {**{f"stack.{k}": v for k, v in calibration.stack_params.items()},
                  **{f"hardware.{k}": v for k, v in calibration.hardware_params.items()}}
    return {"predicted": predicted,
            "calibration": {"name": calibration.path if calibration is not None else "none", "params": params},
            "priced_with": {"hardware": run["hardware"], "stack": stack.id, "notes": list(stack.notes),
                            "stack_knobs": {k: getattr(stack, k) for k in KNOBS}}}


def write_prediction(plan_path: str | Path, out: str | Path, blocks: dict[str, Any], header: str) -> None:
    """The plan file's text with its prediction sections replaced by `blocks` (appended at the end under a `header`
    comment): the user's other lines and comments are kept as they wrote them."""
    lines = Path(plan_path).read_text(encoding="utf-8").splitlines()
    kept: list[str] = []
    skipping = False
    for line in lines:
        top = line[:1] not in ("", " ", "\t", "#", "-")
        if top:
            skipping = line.split(":", 1)[0].strip() in (*blocks, "band")
        elif line.startswith("# written by perfmodel simulate --write-plan"):
            continue
        if not skipping:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    text = "\n".join(kept) + "\n" + f"# {header}\n" + yaml.safe_dump(blocks, sort_keys=False)
    parse(Plan, yaml.safe_load(text), str(out))  # what is written loads as a plan
    write_text_atomic(out, text)


def load_plan(path: str | Path) -> Plan:
    return parse(Plan, read_mapping(path), str(path))


def dump_plan(plan: Plan, path: str | Path) -> None:
    data = plan.model_dump(mode="json", by_alias=True, exclude_none=True)
    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False))
