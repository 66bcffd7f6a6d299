"""Memo keys derived from what a memoized cost reads, never listed field by field.

A memoized function declares its `Reads`: dotted paths into the run spec (each taken whole, as pydantic's JSON of
it, so a field added under one later is in the key without anyone listing it), fields it is known not to read
(`exclude`, the safe side: a new field is in), and the stack knobs it prices with (by part of the step, or by
name); the hardware profile and the model are always read, every number of both. The key is built once per
object (memo.by_identity): a sweep asks for thousands of keys. tests/inputs/test_keys.py changes every field of
the specs one at a time and checks a warm memo never returns the unchanged run's value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from perfmodel.memo import Memo

if TYPE_CHECKING:
    from perfmodel.inputs.hardware import HardwareProfile
    from perfmodel.inputs.model_spec import ModelSpec
    from perfmodel.inputs.scenario import Scenario


def freeze(value: Any) -> Hashable:
    """A hashable image of a plain value: dicts and sequences of numbers and strings, recursively (the hardware
    profile's fields, a run's scalar fields; a spec section is keyed by its JSON, `_section`)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


@dataclass(frozen=True, slots=True)
class Reads:
    """What of a scenario a memoized cost reads besides the hardware and the model. `exclude` narrows a section by
    a field the cost is known not to read, so plans that differ only there share it: a field added to a section
    later is in the key unless someone excludes it (the safe side)."""

    name: str  # the memo table of these keys
    run: tuple[str, ...]  # dotted attribute paths into the RunSpec ("train", "rl.log_probs", "train_gpus")
    stack_parts: tuple[str, ...] = ()  # Stack.knobs_for(part) for each
    stack_knobs: tuple[str, ...] = ()  # single knobs outside those parts
    exclude: tuple[str, ...] = ()  # dotted paths under `run` left out ("train.optimizer_offload_fraction")


def hardware_key(hw: HardwareProfile, memo: Memo) -> tuple:
    """Every number of the profile (calibration included), computed once per profile object."""
    return memo.by_identity("hw_key", hw, lambda: tuple(
        freeze(getattr(hw, f.name)) for f in dataclasses.fields(hw) if f.name != "sources"))


def model_key(m: ModelSpec, memo: Memo) -> tuple:
    """Every number of the model (an inline config's id is only its architecture's name), hashed once per spec."""
    return memo.by_identity("model_key", m, lambda: (m.id, m.num_layers, hash(m)))


def _path(obj: Any, path: str) -> Any:
    for name in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, name)
    return obj


def _section(run: Any, path: str, exclude: tuple[str, ...]) -> Hashable:
    """One section of the run, every field under it (pydantic's JSON of it: complete, and fast to make)."""
    value = _path(run, path)
    if not isinstance(value, BaseModel):
        return freeze(value)
    inner = {e.removeprefix(path + ".") for e in exclude if e.startswith(path + ".")}
    if any("." in e for e in inner):
        raise ValueError(f"exclude {sorted(inner)}: one level below {path!r} only")
    return value.model_dump_json(exclude=inner or None)


def scenario_key(scn: Scenario, reads: Reads, memo: Memo) -> int:
    """The key of a cost that reads `reads` of this scenario (plus the caller's own arguments, added by it): every
    value read, interned to an int once per scenario object (a chunk cost asks for it per micro-batch shape)."""

    def build() -> int:
        stack = scn.stack
        run = tuple(_section(scn.run, p, reads.exclude) for p in reads.run)
        knobs = (*(stack.knobs_for(p) for p in reads.stack_parts), *(getattr(stack, k) for k in reads.stack_knobs))
        return memo.intern((reads.name, hardware_key(scn.hardware, memo), model_key(scn.model, memo), run, knobs))

    return memo.by_identity(reads.name, scn, build)
