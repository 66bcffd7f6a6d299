"""What every executor backend offers `executor launch`: one call, `launch(plan, options) -> RunOutcome`.

A backend validates what it cannot run (InputError, before anything starts), records the run and its steps through
`executor.measurement_sink.MeasurementSink`, prints its own progress, and reports how the run ended. The CLI picks the
backend by `plan.executor.backend` (executor.backends.registry) and knows nothing else about it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from perfmodel.inputs.plan import Plan


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """The `executor launch` flags; a backend refuses (InputError) the ones that make no sense for it."""

    plan_path: str  # the plan file as given: backends re-read it, hash it and name it in errors
    store_path: Path
    steps: int | None = None  # None: the backend's default
    run_dir: Path | None = None  # None: runs/<run id>/
    dry_run: bool = False
    ray_address: str | None = None
    timeout_s: float | None = None
    profile_step: int | None = None  # a step to run under torch.profiler (0: the first after the warm-up); None: none


@dataclass(frozen=True, slots=True)
class RunOutcome:
    run_id: str
    status: str  # the store's run status (finished, failed, timeout, ...), or dry_run when nothing ran
    steps_recorded: int
    exit_code: int  # what `executor launch` exits with


class Backend(Protocol):
    name: str

    def launch(self, plan: Plan, options: LaunchOptions) -> RunOutcome: ...

    def resume(self, run: dict[str, Any], options: LaunchOptions) -> RunOutcome:
        """Continue the stored `run` (a `Store.run` row) from its newest checkpoint; InputError if it cannot."""
        ...
