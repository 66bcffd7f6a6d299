"""What a rank fixes before its first step: the plan, the process group, its share of the Megatron model (and a
resumed checkpoint's state); on rank 0 also the driver: the measurement sink, the trace and the SGLang engine."""

from __future__ import annotations

import contextlib
import datetime
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor.backends.local.checkpoint import restore
from executor.backends.local.cpu_shims import needs_cpu_shims

if TYPE_CHECKING:
    from executor.backends.local.options import LocalOptions
    from executor.backends.local.rollout import RolloutEngine
    from executor.backends.local.tiny_model import TinyArch
    from executor.backends.local.trainer import Trainer
    from executor.measurement_sink import MeasurementSink
    from executor.trace import TraceWriter
    from perfmodel.inputs.job import RLSpec
    from perfmodel.inputs.plan import Plan


@dataclass(frozen=True)
class RankSetup:
    """What every rank fixes before the first step."""

    job: dict[str, Any]
    plan: Plan
    options: LocalOptions
    arch: TinyArch
    rl: RLSpec
    steps: int
    run_dir: Path
    rank: int
    world: int
    trainer: Trainer
    critic: Trainer | None  # PPO
    dp: int
    dp_rank: int
    samples_per_step: int
    optimizer_steps: int
    first_step: int = 1  # > 1 when resumed from the checkpoint of step first_step - 1
    resumed_sampler_state: Any = None  # rank 0's prompt sampler (random.Random) state at that checkpoint


@dataclass
class Driver:
    """Rank 0's resources; the engine is stored as soon as it starts, so the worker's cleanup shuts it down even
    when the first weight update fails."""

    sink: MeasurementSink
    trace: TraceWriter
    engine: RolloutEngine | None = None  # started by start_engine, before the first step


def setup_rank(job: dict[str, Any]) -> RankSetup:
    """Load the plan, join the process group and build this rank's share of the Megatron model."""
    import torch
    import torch.distributed as dist

    from executor.backends.local.options import LocalOptions
    from executor.backends.local.tiny_model import TinyArch
    from executor.backends.local.trainer import Trainer
    from perfmodel.inputs.plan import load_plan

    plan = load_plan(job["plan_path"])
    options = LocalOptions.model_validate(plan.executor.options)
    arch = TinyArch.from_hf_config(plan.model.hf_config or {})
    rl = plan.rl
    assert rl is not None
    layout = plan.train.layout
    steps = int(job["steps"])
    run_dir = Path(job["run_dir"])

    if not needs_cpu_shims():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = datetime.timedelta(seconds=float(job.get("collective_timeout_s", 1800)))  # the watchdog's
    dist.init_process_group("gloo" if needs_cpu_shims() else "nccl", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(options.torch_threads or max(1, (os.cpu_count() or 1) // world))
    trainer = Trainer(arch, layout.pp, layout.ep, plan.train.micro_batch, plan.train.global_batch, options)
    critic = (Trainer(arch, layout.pp, layout.ep, plan.train.micro_batch, plan.train.global_batch, options,
                      value_head=True) if rl.algorithm == "ppo" else None)
    samples_per_step = rl.prompts_per_step * rl.samples_per_prompt
    first_step, sampler_state = restore(job.get("resume"), rank, world, trainer, critic)
    return RankSetup(job=job, plan=plan, options=options, arch=arch, rl=rl, steps=steps, run_dir=run_dir, rank=rank,
                     world=world, trainer=trainer, critic=critic, dp=trainer.dp_size, dp_rank=trainer.dp_rank,
                     samples_per_step=samples_per_step, optimizer_steps=samples_per_step // plan.train.global_batch,
                     first_step=first_step, resumed_sampler_state=sampler_state)


def open_driver(setup: RankSetup) -> Driver | None:
    """Rank 0: the measurement sink and the trace (its time origin is now); None on the other ranks."""
    origin = time.time()
    if setup.rank != 0:
        return None
    from executor.measurement_sink import MeasurementSink
    from executor.trace import TraceWriter

    sink = MeasurementSink.open(setup.job["store_path"])
    return Driver(sink=sink, trace=TraceWriter(setup.run_dir / setup.job.get("trace_file", "trace.json"), origin))


def start_engine(setup: RankSetup, driver: Driver | None) -> None:
    """Initial checkpoint (Megatron's random init, in HF format), SGLang on it, and the first weight update."""
    from executor.backends.local.tiny_model import write_hf_checkpoint

    t0 = time.time()
    init_tensors = setup.trainer.hf_tensors_on_rank0()  # a collective: every rank takes part
    if driver is None:
        return
    from executor.backends.local.rollout import RolloutEngine
    from executor.backends.local.weight_update import push_weights

    rl, run_dir, layout = setup.rl, setup.run_dir, setup.plan.train.layout
    write_hf_checkpoint(run_dir / "hf_init", setup.arch, init_tensors)
    t1 = time.time()
    max_tokens = rl.rollout.max_total_tokens or 4096
    with _heartbeat("SGLang engine starting (model load, scheduler and tokenizer processes)"):
        # resumed: another sampling seed, so the engine does not replay the first launch's draws
        engine = driver.engine = RolloutEngine(run_dir / "hf_init", max_tokens, rl.rollout.max_running_requests,
                                               setup.options.seed + setup.first_step - 1,
                                               rl.rollout.mem_fraction_static)
    t2 = time.time()
    first = push_weights(engine, init_tensors, rl.rollout.precision, rl.weight_update.mode, setup.arch,
                         run_dir / "hf_update")
    t3 = time.time()
    driver.trace.span("write_hf_checkpoint", t0, t1 - t0, lane="driver")
    driver.trace.span("engine_start", t1, t2 - t1, lane="rollout")
    driver.trace.span("initial_weight_update", t2, t3 - t2, lane="driver", engine_format=first.engine_format)
    driver.sink.update_run_info(setup.job["run_id"], engine_start_s=engine.start_s,
                                engine_start_method=engine.start_method, initial_weight_update_s=t3 - t2,
                                rollout_precision=rl.rollout.precision, engine_weight_format=first.engine_format,
                                weight_update_mode=rl.weight_update.mode, world_size=setup.world,
                                layout={"tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "dp": setup.dp},
                                optimizer_steps_per_rollout=setup.optimizer_steps, task=setup.options.task)
    print(f"[executor] engine ready in {engine.start_s:.1f} s; rollout weights: {first.engine_format}", flush=True)


@contextlib.contextmanager
def _heartbeat(what: str, every_s: float = 5.0) -> Iterator[None]:
    """A line every `every_s` while a long wait runs, so the user sees it is not stuck."""
    done = threading.Event()
    t0 = time.time()

    def beat() -> None:
        while not done.wait(every_s):
            print(f"[executor] {what}: {time.time() - t0:.0f} s", flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
