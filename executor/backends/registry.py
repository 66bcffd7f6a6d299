"""The executor's backends by the name a plan gives in `executor.backend`."""

from __future__ import annotations

from executor.backends.base import Backend
from executor.backends.local.backend import LocalBackend
from executor.backends.miles.backend import MilesBackend
from perfmodel.errors import InputError
from perfmodel.inputs.plan import Plan

BACKENDS: dict[str, Backend] = {"local": LocalBackend(), "miles": MilesBackend()}


def backend_for(plan: Plan, plan_path: str) -> Backend:
    name = plan.executor.backend
    if name not in BACKENDS:  # the plan schema allows only registered names; this guards a schema/registry drift
        raise InputError(plan_path, "executor.backend", f"no executor backend {name!r}; known: {', '.join(BACKENDS)}")
    return BACKENDS[name]
