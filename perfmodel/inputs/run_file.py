"""Load any file that describes a run: a plan (has `plan_version`), a validation case (has `measured`), a serving
benchmark (`kind: serve`, a serve case when it has `measured`) or a bare run."""

from __future__ import annotations

from pathlib import Path

from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.loading import parse, read_mapping
from perfmodel.inputs.plan import Plan
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.serve import ServeCase, ServeRun


def load_run_file(path: str | Path) -> RunSpec | ServeRun:
    data = read_mapping(path)
    if data.get("kind") == "serve":  # a serving benchmark: with `measured` a serve case, else the run alone
        return parse(ServeCase if "measured" in data else ServeRun, data, str(path))
    if "plan_version" in data:
        return parse(Plan, data, str(path))
    if "measured" in data:
        return parse(ValidationCase, data, str(path))
    return parse(RunSpec, data, str(path))
