"""The names every reader of a prediction shares, at the bottom of the layers.

Phases are what one RL step is made of (Miles' perf/* names); the RL breakdown splits a step into critical-path
parts that sum to it; `training_parts` is the one mapping from a training step's breakdown (forward, backward,
comm:ep_a2a, ...) onto those parts. `simulate`, `sweep`, the report, the plan writer and the executor's `show` read
these names from here: nobody re-maps strings.
"""

from __future__ import annotations

from collections.abc import Mapping

# RL phases in the order they run, and the metric each is predicted and measured as.
PHASES = ("rollout", "log_probs", "ref_log_probs", "train", "weight_update")
PHASE_METRICS = {"rollout": "rollout_time_s", "log_probs": "log_probs_time_s", "train": "train_time_s",
                 "weight_update": "weight_update_time_s", "step": "step_time_s"}

# Communication kinds inside a training chunk; the EP all-to-all is the one the report shows on its own.
EP_COMM = "ep_a2a"

# Critical-path parts of a step (sum to the step): the report's stacked bars, the sweep's bd_* columns.
BREAKDOWN = ("rollout", "log_probs", "train_compute", "bubble", "exposed_a2a", "other_comm", "weight_sync",
             "offload", "other")


def breakdown_column(part: str) -> str:
    """The sweep CSV column of a breakdown part."""
    return f"bd_{part}_s"


BREAKDOWN_COLUMNS = tuple(breakdown_column(p) for p in BREAKDOWN)


def training_parts(train_breakdown: Mapping[str, float]) -> dict[str, float]:
    """A training step's breakdown (forward, backward, recompute, optimizer, bubble, comm:<kind>) as the step
    parts it adds to: train_compute, bubble, exposed_a2a, other_comm."""
    out = {"train_compute": 0.0, "bubble": 0.0, "exposed_a2a": 0.0, "other_comm": 0.0}
    for k, v in train_breakdown.items():
        if k == "bubble":
            out["bubble"] += v
        elif k == f"comm:{EP_COMM}":
            out["exposed_a2a"] += v
        elif k.startswith("comm:"):
            out["other_comm"] += v
        else:
            out["train_compute"] += v
    return out
