"""The names every reader of a prediction shares, and the typed result of one simulated run.

Phases are what one RL step is made of (Miles' perf/* names); the RL breakdown splits a step into critical-path
parts that sum to it; `training_parts` is the one mapping from a training step's breakdown (forward, backward,
comm:ep_a2a, ...) onto those parts. `simulate`, `sweep`, the report, the plan writer and the executor's `show` read
these names from here: nobody re-maps strings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfmodel.cost.memory.training import MemoryBreakdown
    from perfmodel.inputs.scenario import Scenario
    from perfmodel.sim.rl_step import RLStepResult
    from perfmodel.sim.train import TrainStepResult
    from perfmodel.trace import Span

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


@dataclass(slots=True)
class RunResult:
    """One simulated run: a pretraining step (`train`) or an RL step (`rl`), and the training GPUs' memory."""

    scenario: Scenario
    train: TrainStepResult | None = None
    rl: RLStepResult | None = None
    memory: MemoryBreakdown | None = None

    @property
    def kind(self) -> str:
        return self.scenario.run.kind

    @property
    def step_time_s(self) -> float:
        return self.rl.step_time_s if self.rl is not None else self.train.step_time_s

    def metrics(self) -> dict[str, float]:
        scn = self.scenario
        if self.rl is not None:
            return self.rl.metrics()
        t = self.train
        out = {
            "step_time_s": t.step_time_s,
            "tokens_per_s_per_gpu": t.tokens_per_s_per_gpu,
            "mfu": t.mfu,
            # Model TFLOP/s as Megatron reports it: with full recompute the replayed forward is counted
            # (Narayanan et al. 2021, eq. 3: 96 B s l h^2 = 4 passes); otherwise model FLOPs only
            # (Megatron-Bridge performance summary).
            "tflops_per_gpu": t.hardware_tflops_per_gpu if scn.train.recompute == "full" else t.model_tflops_per_gpu,
        }
        return out

    def spans(self) -> list[Span]:
        from perfmodel.sim.pipeline import pipeline_spans

        if self.rl is not None:
            return self.rl.spans()
        return pipeline_spans(self.train.trace)

    def to_json(self) -> dict[str, Any]:
        scn = self.scenario
        out: dict[str, Any] = {
            "kind": self.kind,
            "hardware": scn.hardware.id,
            "model": scn.model.id or scn.model.family,
            "gpus": scn.run.gpus,
            "layout": scn.layout.model_copy(update={"dp": scn.dp}).short(),
            "schedule": scn.schedule,
            "stack": scn.stack.id,
            "stack_notes": list(scn.stack.notes),
            "pipeline_split": list(scn.stage_layers),
            "microbatches": scn.num_microbatches,
            "metrics": self.metrics(),
        }
        if self.train is not None:
            out["breakdown_s"] = self.train.breakdown_s
            out["bubble_s_per_stage"] = self.train.bubble_s_per_stage
            out["exposed_comm_s"] = self.train.exposed_comm_s
        if self.rl is not None:
            out |= self.rl.to_json()
        if self.memory is not None:
            out["memory"] = {k: v for k, v in dataclasses.asdict(self.memory).items()} | {
                "fits": self.memory.fits}
        return out
