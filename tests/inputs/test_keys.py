"""Memo keys are derived from what a cost reads, and this is checked the only way that cannot miss a field: every
field of the specs (the run, its stack knobs, the hardware profile) is changed one at a time, and the step
simulated through a memo warmed on the unchanged run must equal the step simulated afresh. A field that changes a
cost but is missing from a key would return the warm memo's stale value here. The sweep's result cache is held to
the same: a changed field of a candidate never finds the unchanged candidate's row."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from typing import Any, get_args

import pytest

from perfmodel.errors import InputError
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import Scenario, build_scenario
from perfmodel.inputs.stack import KNOBS, Stack
from perfmodel.memo import Memo
from perfmodel.predict import simulate_scenario
from perfmodel.schedules import ScheduleError
from perfmodel.sweep.cache import result_key

RL_RUN = {  # small but every part present: MoE with EP, two pipeline stages, disaggregated engines with EP
    "kind": "rl", "hardware": "h100-sxm", "gpus": 16, "model": {"id": "qwen3-30b-a3b"}, "stack": "miles",
    "train": {"precision": "bf16", "seq_len": 2048, "global_batch": 32, "micro_batch": 1,
              "layout": {"tp": 1, "pp": 2, "ep": 4}, "recompute": "full", "max_tokens_per_gpu": 4096},
    "rl": {"algorithm": "grpo", "placement": "disaggregated", "actor_gpus": 8, "rollout_gpus": 8,
           "prompts_per_step": 8, "samples_per_prompt": 4, "prompt_tokens_mean": 128.0,
           "response_tokens": {"max": 512, "mean": 300.0},
           "rollout": {"precision": "fp8", "engine_gpus": 4, "tp": 4, "ep": 4},
           "log_probs": {"ref_model": True}, "checkpoint_every": 10},
}
PPO_RUN = {**RL_RUN, "gpus": 8, "rl": {**RL_RUN["rl"], "algorithm": "ppo", "placement": "colocated", "actor_gpus": 8,
                                      "rollout_gpus": 8, "async": False}}
PRETRAIN_RUN = {
    "kind": "pretrain", "hardware": "h100-sxm", "gpus": 16, "model": {"id": "qwen3-30b-a3b"},
    "train": {"precision": "fp8", "seq_len": 4096, "global_batch": 64, "micro_batch": 1,
              "layout": {"tp": 2, "pp": 2, "ep": 4}, "recompute": "selective", "sequence_parallel": True},
}
# Fields that name another input (a lookup, not a number a cost reads) or that the scenario does not price.
NOT_PERTURBED = {("hardware",), ("model", "id"), ("stack",), ("kind",)}


def _bump(value: Any) -> Iterator[Any]:
    """Other values a field may take."""
    if isinstance(value, bool):
        yield not value
    elif isinstance(value, int):
        yield from (value * 2, max(1, value // 2), value + 1)
    elif isinstance(value, float):
        yield from (value * 1.37, value * 0.61)
    elif isinstance(value, str):
        yield from ("none", "full", "selective", "fp8", "bf16", "ppo", "grpo", "colocated", "deepep", "zb-h1",
                    "1f1b", "dualpipev", "nccl", "ipc", "fp8_e4m3")


def _leaves(data: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, (*path, k))
    elif data is not None and not isinstance(data, list):
        yield path, data


def _set(data: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(data)
    d = out
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    return out


def _scenario(data: dict) -> Scenario | None:
    try:
        return build_scenario(RunSpec.model_validate(data))
    except (InputError, ValueError, ScheduleError):
        return None


def run_variants(base: dict) -> Iterator[tuple[str, Scenario]]:
    """The run with one field changed, for every field and every value it may take that still builds."""
    full = RunSpec.model_validate(base).model_dump(by_alias=True, exclude_none=False)
    for path, value in _leaves(full):
        if path in NOT_PERTURBED:
            continue
        for new in _bump(value):
            if new == value:
                continue
            scn = _scenario(_set(full, path, new))
            if scn is not None:
                yield ".".join(map(str, path)) + f"={new!r}", scn


def stack_variants(scn: Scenario) -> Iterator[tuple[str, Scenario]]:
    for name in KNOBS:
        value = getattr(scn.stack, name)
        field = Stack.model_fields[name]
        choices = [c for c in get_args(field.annotation) if isinstance(c, str)] if isinstance(value, str) else []
        for new in choices or list(_bump(value)) or [True]:
            if new == value:
                continue
            try:
                stack = scn.stack.with_knobs({name: new}, "test")
            except InputError:
                continue
            yield f"stack.{name}={new!r}", dataclasses.replace(scn, stack=stack)


def hardware_variants(scn: Scenario) -> Iterator[tuple[str, Scenario]]:
    hw = scn.hardware
    for f in dataclasses.fields(hw):
        value = getattr(hw, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        new = value * 1.5 if isinstance(value, float) else value + 1
        yield f"hardware.{f.name}={new!r}", dataclasses.replace(scn, hardware=dataclasses.replace(hw, **{f.name: new}))


def _figures(scn: Scenario, memo: Memo) -> dict[str, float]:
    result = simulate_scenario(scn, memo=memo)
    out = dict(result.metrics())
    if result.rl is not None:
        out |= {f"phase:{k}": v for k, v in result.rl.phases_s.items()}
    return out


def _stale(base: Scenario, variants: Iterator[tuple[str, Scenario]]) -> tuple[list[str], int, int]:
    warm = Memo()
    _figures(base, warm)
    stale, tried, moved = [], 0, 0
    before = _figures(base, Memo())
    for label, scn in variants:
        try:
            fresh = _figures(scn, Memo())
        except (InputError, ValueError, ScheduleError):
            continue
        tried += 1
        moved += fresh != before
        cached = _figures(scn, warm)
        if cached != pytest.approx(fresh, rel=1e-12):
            stale.append(label)
    return stale, tried, moved


@pytest.mark.parametrize("base", [RL_RUN, PPO_RUN, PRETRAIN_RUN], ids=["rl", "ppo-colocated", "pretrain"])
def test_no_field_change_reuses_a_stale_result(base: dict) -> None:
    scn = build_scenario(RunSpec.model_validate(base))
    for variants in (run_variants(base), stack_variants(scn), hardware_variants(scn)):
        stale, tried, moved = _stale(scn, variants)
        assert tried > 10 and moved > 5  # the perturbations reach the costs
        assert not stale, f"a warm memo returned the unchanged run's result for: {stale}"


def test_a_changed_candidate_never_finds_the_unchanged_ones_cached_row() -> None:
    full = RunSpec.model_validate(RL_RUN).model_dump(by_alias=True, exclude_none=True)
    base = result_key({}, "h100-sxm", "m", full)
    keys = {result_key({}, "h100-sxm", "m", _set(full, path, new))
            for path, value in _leaves(full) for new in _bump(value) if new != value}
    assert base not in keys and len(keys) > 50
    assert result_key({"hbm_efficiency": 0.8}, "h100-sxm", "m", full) != base
