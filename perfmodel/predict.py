"""From a run to its simulated result (`perfmodel.results.RunResult`, whose `metrics()` gives the figures a
validation case or a plan names); `simulate`, `validate`, `sweep` and plans all go through it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import Scenario, build_scenario
from perfmodel.memo import Memo
from perfmodel.results import RunResult

if TYPE_CHECKING:
    from perfmodel.cost.memory.training import MemoryBreakdown


def simulate_scenario(scn: Scenario, record_trace: bool = False, memory: MemoryBreakdown | None = None,
                      memo: Memo | None = None) -> RunResult:
    """`memo`: the caller's reuse of results across scenarios (a sweep worker's, a validate run's); a fresh one
    when None."""
    from perfmodel.cost.memory.training import memoized_training_memory, training_memory

    if scn.run.kind == "serve":  # a serving benchmark: the engine alone (its result has the same metrics())
        from perfmodel.sim.serving import simulate_serving

        return simulate_serving(scn)  # type: ignore[return-value]
    if memory is None:  # through the caller's memo when there is one (validate reads it again for its fit count)
        memory = memoized_training_memory(scn, memo) if memo is not None else training_memory(scn)
    if scn.run.kind == "rl":
        from perfmodel.sim.rl_step import simulate_rl_step

        return RunResult(scn, rl=simulate_rl_step(scn, record_trace=record_trace, memo=memo), memory=memory)
    from perfmodel.sim.train import simulate_train_step

    return RunResult(scn, train=simulate_train_step(scn, record_trace=record_trace, memo=memo), memory=memory)


def simulate_run(run: RunSpec, source: str = "", hardware: HardwareProfile | None = None,
                 record_trace: bool = False, memo: Memo | None = None) -> RunResult:
    return simulate_scenario(build_scenario(run, source=source, hardware=hardware), record_trace=record_trace,
                             memo=memo)


def predict_metrics(scenario: Scenario, memo: Memo | None = None) -> dict[str, float]:
    return simulate_scenario(scenario, memo=memo).metrics()
