"""A run: hardware + model + job. The common part of a validation case, a plan file and a sweep candidate."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfmodel.errors import InputError
from perfmodel.inputs.hardware_file import HardwareOptions
from perfmodel.inputs.job import RLSpec, TrainSpec
from perfmodel.inputs.stack import StackOptions


class ModelRef(BaseModel):
    """Exactly one of: a catalogue id, or an inline Hugging Face config.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str | None = None
    hf_config: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelRef:
        if (self.id is None) == (self.hf_config is None):
            raise ValueError("give exactly one of model.id (a catalogue id) or model.hf_config (an inline config.json)")
        return self

    def label(self) -> str:
        if self.id:
            return self.id
        cfg = self.hf_config or {}
        archs = cfg.get("architectures")
        arch = archs[0] if isinstance(archs, list) and archs else "inline"
        return str(cfg.get("_name_or_path") or arch)


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    kind: Literal["pretrain", "rl"]
    hardware: str = Field(..., min_length=1, description="hardware profile id (hwprofiles/<id>.yaml) or path")
    hardware_options: HardwareOptions | None = Field(None, description="facts measured about the run's hardware")
    gpus: int = Field(..., ge=1, description="all GPUs of the run (rl: actor + rollout, counted once when colocated)")
    model: ModelRef
    train: TrainSpec
    rl: RLSpec | None = None
    stack: str | None = Field(None, description="software stack: framework[@release] (stacks/<framework>.yaml); "
                              "unknown names fall back with a note")
    stack_options: StackOptions | None = Field(None, description="facts the source states about the stack")

    @model_validator(mode="after")
    def _rl_matches_kind(self) -> RunSpec:
        if self.kind == "rl" and self.rl is None:
            raise ValueError("kind: rl needs an rl: section")
        if self.kind == "pretrain" and self.rl is not None:
            raise ValueError("an rl: section needs kind: rl")
        return self

    @classmethod
    def reference_problems(cls, data: Any) -> list[tuple[tuple[str, ...], str]]:
        """The ids in a run's raw mapping that name no hardware profile or catalogue model, checked even when the
        mapping has other errors (perfmodel.inputs.loading.first_error), so a mistyped id is never hidden behind
        a missing field."""
        from perfmodel.inputs.hardware import load_hardware
        from perfmodel.inputs.model import load_model

        if not isinstance(data, dict):
            return []
        out: list[tuple[tuple[str, ...], str]] = []
        model = data.get("model")
        for loc, ref, load in (
            (("hardware",), data.get("hardware"), load_hardware),
            (("model", "id"), model.get("id") if isinstance(model, dict) else None, load_model),
        ):
            if isinstance(ref, str) and ref and not ref.endswith((".yaml", ".yml", ".json")) and "/" not in ref:
                try:
                    load(ref)
                except InputError as err:
                    out.append((loc, err.message))
        return out

    @property
    def train_gpus(self) -> int:
        return self.rl.actor_gpus if self.rl is not None else self.gpus
