"""Load any file that describes a run: a plan (has `plan_version`) or a validation case (has `measured`)."""

from __future__ import annotations

from pathlib import Path

from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.loading import parse, read_mapping
from perfmodel.inputs.plan import Plan
from perfmodel.inputs.run import RunSpec


def load_run_file(path: str | Path) -> RunSpec:
    data = read_mapping(path)
    if "plan_version" in data:
        return parse(Plan, data, str(path))
    if "measured" in data:
        return parse(ValidationCase, data, str(path))
    return parse(RunSpec, data, str(path))
