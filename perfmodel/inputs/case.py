"""Validation cases: one measured run that `perfmodel validate` must predict (docs/validation-cases.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from perfmodel.errors import InputError
from perfmodel.inputs.loading import parse, read_mapping
from perfmodel.inputs.run import RunSpec


class Measured(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    step_time_s: float | None = Field(None, gt=0)
    tokens_per_s_per_gpu: float | None = Field(None, gt=0)
    tflops_per_gpu: float | None = Field(None, gt=0)
    mfu: float | None = Field(None, gt=0, le=1)
    rollout_time_s: float | None = Field(None, gt=0)
    log_probs_time_s: float | None = Field(None, gt=0)
    train_time_s: float | None = Field(None, gt=0)
    weight_update_time_s: float | None = Field(None, gt=0)
    rollout_tokens_per_gpu_s: float | None = Field(None, gt=0)
    train_tokens_per_s: float | None = Field(None, gt=0)

    def items(self) -> list[tuple[str, float]]:
        return [(k, v) for k, v in self.model_dump().items() if v is not None]


class ValidationCase(RunSpec):
    id: str = Field(..., pattern=r"^[a-z0-9][a-z0-9.\-]*$", description="unique, kebab-case")
    source: str = Field(..., min_length=1)
    measured: Measured
    notes: str = ""


def load_case(path: str | Path) -> ValidationCase:
    data = read_mapping(path)
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
