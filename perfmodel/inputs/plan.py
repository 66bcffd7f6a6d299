"""The plan file: the hand-off contract from `perfmodel sweep` to `executor launch --plan`.

A plan is a run (hardware, model, job with its layout) plus what the model predicted for it, the calibration
it used, and the executor backend with its options. The executor reads exactly this file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from perfmodel.inputs.case import Measured
from perfmodel.inputs.loading import parse, read_mapping
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


def load_plan(path: str | Path) -> Plan:
    return parse(Plan, read_mapping(path), str(path))


def dump_plan(plan: Plan, path: str | Path) -> None:
    data = plan.model_dump(mode="json", by_alias=True, exclude_none=True)
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
