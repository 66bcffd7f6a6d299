"""The public GB300 DeepSeek-V4-Flash RL case as a mutable dict, and a scenario from such a dict (shared by the
rollout and weight-sync tests)."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.scenario import Scenario, build_scenario

CASES = Path(__file__).resolve().parents[2] / "studies" / "validation" / "cases"
GB300 = CASES / "miles-gb300-dsv4flash-bf16train.yaml"
_DOC = yaml.safe_load(GB300.read_text())


def gb300_case() -> dict:
    return copy.deepcopy(_DOC)


def scenario_of(d: dict) -> Scenario:
    return build_scenario(ValidationCase.model_validate(d))
