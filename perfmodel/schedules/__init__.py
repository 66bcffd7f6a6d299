"""Pipeline schedules, one class per module of this package (each registers itself by its `name`): adding a
schedule is one file here plus its tests. Everything else asks the class (`schedule_class(name)`): its op order,
placement, in-flight activations and its framework's rules; the input schemas and the CLI list `SCHEDULES`."""

from __future__ import annotations

import importlib
import pkgutil

from perfmodel.schedules.base import REGISTRY, ForwardOnly, Op, OpKind, Schedule, ScheduleError, default_schedule

for _mod in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_mod.name}")

SCHEDULES: dict[str, type[Schedule]] = REGISTRY

__all__ = ["SCHEDULES", "ForwardOnly", "Op", "OpKind", "Schedule", "ScheduleError", "default_schedule",
           "make_schedule", "runnable_microbatches", "schedule_class", "schedule_rule"]


def schedule_class(name: str) -> type[Schedule]:
    cls = SCHEDULES.get(name)
    if cls is None:
        raise ValueError(f"unknown schedule {name!r}; valid: {', '.join(SCHEDULES)}")
    return cls


def schedule_rule(name: str, pp: int, microbatches: int, group: int | None = None) -> str | None:
    """Why the framework that owns schedule `name` would refuse these micro-batches (None when it runs them)."""
    return schedule_class(name).rule(pp, microbatches, group)


def runnable_microbatches(name: str, pp: int, microbatches: int, group: int | None = None) -> int:
    """The micro-batch count a framework pads a packed batch to so its schedule runs it."""
    return schedule_class(name).runnable_microbatches(pp, microbatches, group)


def make_schedule(name: str, pp: int, microbatches: int, vpp: int = 1, group: int | None = None) -> Schedule:
    cls = schedule_class(name)
    why = cls.rule(pp, microbatches, group)
    if why:
        raise ScheduleError(why)
    return cls(pp, microbatches, vpp, group)
