"""Adapter from per-step measurement dicts (the miles backend's) to the store's StepRecord rows, so local and
Miles runs share one SQLite schema (`executor runs`, `executor show`)."""

from __future__ import annotations

import time
from typing import Any

from executor.records import StepRecord
from executor.store import Store

MEASURED_PHASES = {"rollout": "rollout_time_s", "log_probs": "log_probs_time_s", "train": "train_time_s",
                   "weight_update": "weight_update_time_s", "step": "step_time_s"}


class MeasurementSink:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.steps = 0

    def add_step(self, *, run_id: str, plan_id: str, backend: str, measurement: dict[str, Any]) -> None:
        phases: dict[str, float | None] = {p: measurement.get(k) for p, k in MEASURED_PHASES.items()}
        phases |= {"offload": None, "onload": None}
        nan = float("nan")
        record = StepRecord(
            step=int(measurement.get("step", self.steps)),
            started_at=time.time(),
            phases_s=phases,
            tokens={},
            reward_mean=float(measurement.get("reward_mean", nan)),
            reward_std=nan,
            train_rollout_logprob_abs_diff=float(measurement.get("train_rollout_logprob_abs_diff", nan)),
            train_rollout_kl=float(measurement.get("train_rollout_kl", nan)),
            rollout_log_prob_mean=nan,
            train_stats={k: v for k, v in measurement.items() if isinstance(v, (int, float)) and k not in
                         MEASURED_PHASES.values() and k != "step"},
            weight_update={"perf": measurement.get("perf", {})},
            peak_rss_bytes={},
        )
        self.store.write_step(run_id, record)
        self.steps += 1
