"""The one write path into the measurement store, for every backend.

Backends never call `Store`'s writers themselves: they open a run, add steps and close the run here, so local and
Miles runs land in one SQLite schema (`executor runs`, `executor show`, `executor export`). Two ways in for a step:

- `write_step(run_id, StepRecord)`: a backend that measures everything itself (the local worker);
- `add_step(run_id=..., plan_id=..., backend=..., measurement=dict)`: a backend that reads per-step timings back from
  a log (Miles' `perf/*` lines); the dict is mapped onto a `StepRecord` (what it does not measure stays NaN/None).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Protocol

from executor.records import RunRecord, StepRecord
from executor.store import Store
from perfmodel.errors import InputError
from perfmodel.names import PHASE_METRICS


class StepSink(Protocol):
    """What a log-reading backend needs: one call per completed step (tests pass a list-backed stand-in)."""

    def add_step(self, *, run_id: str, plan_id: str, backend: str, measurement: dict[str, Any]) -> None: ...


class MeasurementSink:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.steps = 0  # steps added through this sink: the step number when a measurement carries none

    @classmethod
    def open(cls, path: str | Path) -> MeasurementSink:
        return cls(Store(path))

    def close(self) -> None:
        self.store.close()

    # -------------------------------------------------------------- runs

    def start_run(self, run: RunRecord) -> None:
        self.store.create_run(run)

    def reopen_run(self, run_id: str, after_step: int, attempt: int) -> int:
        """A resumed run: its steps after `after_step` kept as superseded (Store.reopen_run), status running."""
        return self.store.reopen_run(run_id, after_step, attempt)

    def update_run_info(self, run_id: str, **info: Any) -> None:
        self.store.update_run_info(run_id, **info)

    def finish_run(self, run_id: str, status: str) -> None:
        self.store.finish_run(run_id, status)

    def step_count(self, run_id: str) -> int:
        """Steps committed for the run (by any process writing to this store)."""
        return self.store.step_count(run_id)

    # -------------------------------------------------------------- steps

    def write_step(self, run_id: str, record: StepRecord) -> None:
        self.store.write_step(run_id, record)
        self.steps += 1

    def add_step(self, *, run_id: str, plan_id: str, backend: str, measurement: dict[str, Any]) -> None:
        self.write_step(run_id, step_record(measurement, default_step=self.steps))


def _check_measurement(measurement: dict[str, Any]) -> None:
    """A measurement is numbers: phase times finite and >= 0, a step number a small non-negative integer, every
    other figure finite. Anything else is refused before it reaches the store."""
    if not isinstance(measurement, dict):
        raise InputError("measurement", "", f"expected a mapping of figures, got {type(measurement).__name__}")
    for key, value in measurement.items():
        if key == "perf":
            if not isinstance(value, dict):
                raise InputError("measurement", "perf", "expected a mapping of the log's perf figures")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError("measurement", str(key), f"expected a finite number, got {value!r:.40}")
        if (key in PHASE_METRICS.values() or key == "step") and value < 0:
            raise InputError("measurement", str(key), f"a time or step number cannot be negative ({value})")
    step = measurement.get("step", 0)
    if step != int(step) or step > 10**9:
        raise InputError("measurement", "step", f"expected a step number, got {step!r}")


def step_record(measurement: dict[str, Any], default_step: int) -> StepRecord:
    """A per-step measurement dict (`executor.backends.miles.logs.StepRecord.measurement`) as a store row."""
    _check_measurement(measurement)
    phases: dict[str, float | None] = {p: measurement.get(k) for p, k in PHASE_METRICS.items()}
    phases |= {"offload": None, "onload": None}
    nan = float("nan")
    return StepRecord(
        step=int(measurement.get("step", default_step)),
        started_at=time.time(),
        phases_s=phases,
        tokens={},
        reward_mean=float(measurement.get("reward_mean", nan)),
        reward_std=nan,
        train_rollout_logprob_abs_diff=float(measurement.get("train_rollout_logprob_abs_diff", nan)),
        train_rollout_kl=float(measurement.get("train_rollout_kl", nan)),
        rollout_log_prob_mean=nan,
        train_stats={k: v for k, v in measurement.items() if isinstance(v, (int, float)) and k not in
                     PHASE_METRICS.values() and k != "step"},
        weight_update={"perf": measurement.get("perf", {})},
        peak_rss_bytes={},
    )
