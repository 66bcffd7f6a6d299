"""From a run to its simulated result and to the figures a validation case or a plan names.

The one place that maps simulator results onto metric names (step_time_s, tokens_per_s_per_gpu, ...);
`simulate`, `validate`, `sweep` and plans all go through it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import Scenario, build_scenario


@dataclass(slots=True)
class RunResult:
    scenario: Scenario
    train: Any = None  # TrainStepResult (pretrain step)
    rl: Any = None  # RLStepResult
    memory: Any = None  # MemoryBreakdown of the training GPUs

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

    def spans(self) -> list:
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


def simulate_scenario(scn: Scenario, record_trace: bool = False, memory: Any = None) -> RunResult:
    from perfmodel.cost.memory.training import training_memory

    memory = memory if memory is not None else training_memory(scn)
    if scn.run.kind == "rl":
        from perfmodel.sim.rl_step import simulate_rl_step

        return RunResult(scn, rl=simulate_rl_step(scn, record_trace=record_trace), memory=memory)
    from perfmodel.sim.train import simulate_train_step

    return RunResult(scn, train=simulate_train_step(scn, record_trace=record_trace), memory=memory)


def simulate_run(run: RunSpec, source: str = "", hardware: HardwareProfile | None = None,
                 record_trace: bool = False) -> RunResult:
    return simulate_scenario(build_scenario(run, source=source, hardware=hardware), record_trace=record_trace)


def predict_metrics(scenario: Scenario) -> dict[str, float]:
    return simulate_scenario(scenario).metrics()
