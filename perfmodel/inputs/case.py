"""Validation cases: one measured run that `perfmodel validate` must predict (docs/validation-cases.md)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

from perfmodel.errors import InputError
from perfmodel.inputs.loading import parse, read_mapping
from perfmodel.inputs.measured import Measured
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.serve import ServeCase


class ValidationCase(RunSpec):
    id: str = Field(..., pattern=r"^[a-z0-9][a-z0-9.\-]*$", description="unique, kebab-case")
    source: str = Field(..., min_length=1)
    measured: Measured
    notes: str = ""


def run_key(case: ValidationCase | ServeCase) -> str:
    """The run itself, so one run filed under two ids (the development set repeats archive rows, sometimes with other
    notes, options or flags, or another release listing the same figures) counts once wherever a case must not meet
    its own measurement (leave-one-out fits, the active-measurement study): the hardware, GPUs, model, what was run
    (for training: precision, sequence, batches and the layout, its data-parallel size written out or derived) and
    every measured value."""
    run = case.model_dump(mode="json", include={"kind", "hardware", "gpus", "model", "serve", "rl", "measured"})
    if isinstance(case, ValidationCase):
        t = case.train
        run["train"] = [t.precision, t.seq_len, t.global_batch, t.micro_batch,
                        t.layout.model_dump(mode="json", exclude={"dp"})]
    return json.dumps(run, sort_keys=True)


def load_case(path: str | Path) -> ValidationCase | ServeCase:
    data = read_mapping(path)
    if isinstance(data, dict) and data.get("kind") == "serve":
        case = parse(ServeCase, data, str(path))
    else:
        case = parse(ValidationCase, data, str(path))
    if not case.measured.items():
        raise InputError(
            str(path), "measured", "needs at least one measured metric: " + ", ".join(Measured.model_fields))
    return case


def case_paths(paths: list[str]) -> list[Path]:
    """Expand files and folders (their *.yaml / *.yml, sorted) into case files."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(sorted([*p.glob("*.yaml"), *p.glob("*.yml")]))
        elif p.exists():
            out.append(p)
        else:
            raise InputError(str(p), "", "no such file or folder")
    return out
