"""The typed result of one simulated run (`RunResult`): a pretraining or RL step, its memory, its trace spans and
its JSON. The names its readers share (phases, breakdown parts) live in perfmodel/names.py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfmodel.cost.memory.training import MemoryBreakdown
    from perfmodel.inputs.scenario import Scenario
    from perfmodel.sim.rl_step import RLStepResult
    from perfmodel.sim.train import TrainStepResult
    from perfmodel.trace import Span


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
