"""One torchrun rank of a local GRPO or PPO run:
`python -m torch.distributed.run ... -m executor.backends.local.worker --job J`.

Every rank trains (megatron-core, its PP stage / EP experts / DP share). Rank 0 also drives: it hosts the
SGLang engine, samples prompts, scores rewards, computes group advantages, pushes weights, and writes the
step records (through the measurement sink into the store), the trace and the progress log. One step:

  rollout (rank 0, SGLang) -> broadcast batch -> [PPO: critic values -> GAE -> critic update]
  -> log_probs (Megatron forward-only, old policy) -> gap metrics -> train (policy loss, optimizer step)
  -> gather BF16 weights -> quantize -> engine update

PPO runs Miles' order: the critic (the actor's model with a value head, on the same ranks and layout) first, then
the actor (docs/rl-phases.md, Miles 4.4).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib
import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executor.backends.local.checkpoint import restore
from executor.backends.local.cpu_shims import apply_megatron_shims, needs_cpu_shims

if TYPE_CHECKING:
    from executor.backends.local.options import LocalOptions
    from executor.backends.local.rollout import RolloutEngine
    from executor.backends.local.tiny_model import TinyArch
    from executor.backends.local.trainer import TrainBatch, Trainer
    from executor.backends.local.weight_update import WeightUpdateResult
    from executor.measurement_sink import MeasurementSink
    from executor.trace import TraceWriter
    from perfmodel.inputs.job import RLSpec
    from perfmodel.inputs.plan import Plan


def _vm_hwm_bytes(pid: int) -> int:
    """Peak resident set size of a process (Linux VmHWM), 0 if unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _engine_peak_rss_bytes() -> int:
    import psutil

    return sum(_vm_hwm_bytes(c.pid) for c in psutil.Process().children(recursive=True))


# Imported by `run` up front, in this order: after apply_megatron_shims (megatron-core must be patched before its
# first import) and before any timing, so no step phase pays for a first import. The helpers' own local imports of
# these modules are then only cache hits.
_RUN_MODULES = (
    "torch", "torch.distributed", "executor.backends.local.grpo", "executor.backends.local.options",
    "executor.backends.local.task", "executor.backends.local.tiny_model", "executor.backends.local.tokenizer",
    "executor.backends.local.trainer", "executor.records", "perfmodel.inputs.plan",
)


@dataclass(frozen=True)
class _Setup:
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
class _Driver:
    """Rank 0's resources; the engine is stored as soon as it starts, so `run`'s cleanup shuts it down even when
    the first weight update fails."""

    sink: MeasurementSink
    trace: TraceWriter
    engine: RolloutEngine | None = None  # started by _start_engine, before the first step


@dataclass
class _StepClock:
    """One step's phases back to back: each lap ends a phase (time.time()) and the next one starts there."""

    start: float
    spans: list[tuple[str, float, float, str]] = field(default_factory=list)  # (name, start, duration, lane)
    ends: dict[str, float] = field(default_factory=dict)  # phase name -> its end

    def lap(self, name: str, lane: str) -> None:
        now = time.time()
        begin = self.ends[self.spans[-1][0]] if self.spans else self.start
        self.spans.append((name, begin, now - begin, lane))
        self.ends[name] = now


def run(job: dict[str, Any]) -> None:
    apply_megatron_shims()
    for module in _RUN_MODULES:
        importlib.import_module(module)
    import torch.distributed as dist

    t_setup = time.time()
    setup = _setup(job)
    if setup.rank == 0:
        print(f"[executor] trainer ready: megatron-core model on {setup.world} rank(s) in {time.time() - t_setup:.1f} s"
              + (" (with a critic)" if setup.critic is not None else "") + "; starting the SGLang engine", flush=True)
    driver = _open_driver(setup)  # None off rank 0
    try:
        _start_engine(setup, driver)
        dist.barrier()

        rng = random.Random(setup.options.seed)
        if setup.first_step > 1:  # resumed: the prompt sampler where the checkpoint left it
            rng.setstate(setup.resumed_sampler_state)
        for step in range(setup.first_step, setup.steps + 1):
            _run_step(setup, driver, rng, step)
            if step == setup.first_step:
                _freeze_gc(driver)
            every = setup.options.checkpoint_every
            if every and (step % every == 0 or step == setup.steps):
                _checkpoint(setup, driver, step, rng)

        dist.barrier()
    finally:  # also on errors and SIGTERM from torchrun: never leave SGLang's processes behind
        if driver is not None and driver.engine is not None:
            driver.engine.shutdown()
        if driver is not None:
            driver.sink.close()
    dist.destroy_process_group()


def _setup(job: dict[str, Any]) -> _Setup:
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
    return _Setup(job=job, plan=plan, options=options, arch=arch, rl=rl, steps=steps, run_dir=run_dir, rank=rank,
                  world=world, trainer=trainer, critic=critic, dp=trainer.dp_size, dp_rank=trainer.dp_rank,
                  samples_per_step=samples_per_step, optimizer_steps=samples_per_step // plan.train.global_batch,
                  first_step=first_step, resumed_sampler_state=sampler_state)


def _checkpoint(setup: _Setup, driver: _Driver | None, step: int, rng: random.Random) -> None:
    """Every rank writes its share; rank 0 seals it once all are in place and says so (checkpoint.py)."""
    from executor.backends.local.checkpoint import save

    t0 = time.time()
    folder, size = save(setup.run_dir, step, setup.rank, setup.world, setup.trainer, setup.critic, rng,
                        setup.job["run_id"], setup.options.checkpoints_kept)
    if driver is None:
        return
    driver.sink.update_run_info(setup.job["run_id"], last_checkpoint={"step": step, "path": str(folder),
                                                                      "bytes": size, "write_s": time.time() - t0})
    print(f"[executor] checkpoint of step {step}: {size / 2**20:.1f} MiB in {time.time() - t0:.2f} s -> {folder}",
          flush=True)


def _open_driver(setup: _Setup) -> _Driver | None:
    """Rank 0: the measurement sink and the trace (its time origin is now); None on the other ranks."""
    origin = time.time()
    if setup.rank != 0:
        return None
    from executor.measurement_sink import MeasurementSink
    from executor.trace import TraceWriter

    sink = MeasurementSink.open(setup.job["store_path"])
    return _Driver(sink=sink, trace=TraceWriter(setup.run_dir / setup.job.get("trace_file", "trace.json"), origin))


def _start_engine(setup: _Setup, driver: _Driver | None) -> None:
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
    driver.sink.update_run_info(setup.job["run_id"], engine_start_s=engine.start_s, initial_weight_update_s=t3 - t2,
                                rollout_precision=rl.rollout.precision, engine_weight_format=first.engine_format,
                                weight_update_mode=rl.weight_update.mode, world_size=setup.world,
                                layout={"tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "dp": setup.dp},
                                optimizer_steps_per_rollout=setup.optimizer_steps, task=setup.options.task)
    print(f"[executor] engine ready in {engine.start_s:.1f} s; rollout weights: {first.engine_format}", flush=True)


def _run_step(setup: _Setup, driver: _Driver | None, rng: random.Random, step: int) -> None:
    """rollout -> broadcast -> log_probs -> train -> gather weights -> engine update; rank 0 records the step."""
    import torch.distributed as dist

    clock = _StepClock(time.time())
    gc_start_s = _GC_PAUSES.total_s
    data = _rollout_and_broadcast(setup, driver, rng, clock)
    mine, wu = _train_and_update(setup, driver, data, clock)
    # ---- collect per-rank measurements on rank 0
    gathered: list[Any] = [None] * setup.world if setup.rank == 0 else []
    dist.gather_object(mine, gathered if setup.rank == 0 else None, dst=0)
    step_end = time.time()
    if driver is not None:
        data["gc_step_s"] = _GC_PAUSES.total_s - gc_start_s
        _record_step(setup, driver, step, data, clock, wu, gathered, step_end)


def _rollout_and_broadcast(setup: _Setup, driver: _Driver | None, rng: random.Random,
                           clock: _StepClock) -> dict[str, Any]:
    """Rank 0 generates and scores the step's batch; every rank receives it."""
    import torch.distributed as dist

    payload: list[Any] = [None]
    if driver is not None:
        payload = [_generate_batch(setup, driver, rng)]
    clock.lap("rollout", "rollout")
    dist.broadcast_object_list(payload, src=0)
    clock.lap("broadcast_batch", "train")
    return payload[0]


def _generate_batch(setup: _Setup, driver: _Driver, rng: random.Random) -> dict[str, Any]:
    """Rank 0: sample prompts, generate with SGLang, reward, group advantages, pack into training rows."""
    import torch

    from executor.backends.local.grpo import group_advantages
    from executor.backends.local.task import reward, sample_prompts
    from executor.backends.local.tokenizer import PAD_ID
    from executor.backends.local.trainer import pack_samples

    rl, options, engine = setup.rl, setup.options, driver.engine
    prompts = sample_prompts(options.task, rng, rl.prompts_per_step)
    expanded = [p for p in prompts for _ in range(rl.samples_per_prompt)]
    gc_before = _GC_PAUSES.total_s
    gen_t0 = time.perf_counter()
    gens = engine.generate([p.token_ids for p in expanded], rl.response_tokens.max, options.temperature)
    generate_s = time.perf_counter() - gen_t0
    gc_s = _GC_PAUSES.total_s - gc_before
    reward_t0 = time.perf_counter()
    rewards = torch.tensor([reward(g.response_text, p.answer) for g, p in zip(gens, expanded)])
    reward_s = time.perf_counter() - reward_t0
    adv = group_advantages(rewards, rl.samples_per_prompt, options.std_normalize)
    tokens, plen, rlen = pack_samples([p.token_ids for p in expanded], [g.response_ids for g in gens], PAD_ID)
    # one example per prompt (the first of its group), at most 4, for the store
    examples = list(zip(expanded, gens, rewards.tolist()))[:: rl.samples_per_prompt][:4]
    return {
        "tokens": tokens, "prompt_lengths": plen, "response_lengths": rlen, "advantages": adv.tolist(),
        "rollout_log_probs": [g.log_probs for g in gens],
        "rewards": rewards.tolist(), "reward_s": reward_s, "generate_s": generate_s, "gc_s": gc_s,
        "examples": [{"prompt": p.text, "answer": p.answer, "response": g.response_text, "reward": float(r)}
                     for p, g, r in examples],
    }


def _dp_share(setup: _Setup, data: dict[str, Any]) -> TrainBatch:
    """This DP rank's rows of the broadcast batch."""
    from executor.backends.local.trainer import TrainBatch

    idx = list(range(setup.dp_rank, setup.samples_per_step, setup.dp))
    return TrainBatch(data["tokens"][idx], [data["prompt_lengths"][i] for i in idx],
                      [data["response_lengths"][i] for i in idx], [data["advantages"][i] for i in idx],
                      [data["rollout_log_probs"][i] for i in idx], rewards=[data["rewards"][i] for i in idx])


def _critic_step(setup: _Setup, local: TrainBatch, times: Any) -> dict[str, float]:
    """PPO: the critic's values over the batch, GAE advantages and returns from them and the outcome rewards (the
    actor's per-token advantages), then the critic's update on the clipped value loss. The last pipeline stage holds
    values and computes every loss; the other stages only pass activations."""
    import torch

    from executor.backends.local.grpo import gae

    critic, opts = setup.critic, setup.options
    values = critic.compute_values(local, times)
    if critic.is_last_stage:
        out = [gae(r, v, opts.gamma, opts.lambd) for r, v in zip(local.rewards, values, strict=True)]
        local.advantages = [a for a, _ in out]
        local.returns = [ret for _, ret in out]
        local.old_values = values
    else:
        local.old_values = local.returns = [torch.zeros(r) for r in local.response_lengths]
    stats = critic.train(local, setup.optimizer_steps, times)
    return {f"critic_{k}": v for k, v in stats.items()} if critic.is_last_stage else {}


def _train_and_update(setup: _Setup, driver: _Driver | None, data: dict[str, Any],
                      clock: _StepClock) -> tuple[dict[str, Any], WeightUpdateResult | None]:
    """log_probs, train and the weight push on this rank: returns its measurements and (rank 0) the update's."""
    import torch

    from executor.backends.local.grpo import logprob_gap
    from executor.backends.local.trainer import MicroBatchTimes

    trainer = setup.trainer
    local = _dp_share(setup, data)
    lp_times, train_times, critic_times = MicroBatchTimes(), MicroBatchTimes(), MicroBatchTimes()
    critic_stats: dict[str, float] = {}
    if setup.critic is not None:  # ---- PPO: the critic first (values, GAE, its update)
        critic_stats = _critic_step(setup, local, critic_times)
        clock.lap("critic", "train")
    # ---- old-policy log-probs (Megatron forward only)
    local.old_log_probs = trainer.compute_log_probs(local, lp_times)
    clock.lap("log_probs", "train")
    gap_part = None
    if trainer.is_last_stage:
        g = logprob_gap(local.old_log_probs, local.rollout_log_probs)
        n = len(local)
        gap_part = (g["train_rollout_logprob_abs_diff"] * n, g["train_rollout_kl"] * n, n)
    # ---- train
    if not trainer.is_last_stage:
        local.old_log_probs = [torch.zeros(r) for r in local.response_lengths]
    train_stats = trainer.train(local, setup.optimizer_steps, train_times) | critic_stats
    clock.lap("train", "train")
    # ---- weights -> engine
    tensors = trainer.hf_tensors_on_rank0()
    clock.lap("gather_weights", "train")
    wu = None
    if driver is not None:
        from executor.backends.local.weight_update import push_weights

        wu = push_weights(driver.engine, tensors, setup.rl.rollout.precision, setup.rl.weight_update.mode,
                          setup.arch, setup.run_dir / "hf_update")
    clock.lap("update_engine", "rollout")
    mine = {"rank": setup.rank, "gap": gap_part, "train_stats": train_stats if trainer.is_last_stage else None,
            "lp_times": lp_times, "train_times": train_times, "critic_times": critic_times, "spans": clock.spans,
            "rss": trainer.peak_rss_bytes()}
    return mine, wu


def _record_step(setup: _Setup, driver: _Driver, step: int, data: dict[str, Any], clock: _StepClock,
                 wu: WeightUpdateResult, gathered: list[dict[str, Any]], step_end: float) -> None:
    """Rank 0: merge the ranks' measurements into one StepRecord, write it and the trace, log progress."""
    import torch

    from executor.records import MicroBatchTiming, StepRecord

    parts = [m for m in gathered if m["gap"] is not None]  # the last PP stage's ranks
    n = sum(p["gap"][2] for p in parts)
    abs_diff = sum(p["gap"][0] for p in parts) / n
    kl = sum(p["gap"][1] for p in parts) / n
    stats_parts = [m["train_stats"] for m in gathered if m["train_stats"]]
    train_summary = {k: sum(s[k] for s in stats_parts) / len(stats_parts) for k in stats_parts[0]}
    micro = []
    for m in gathered:
        for name, t in (("log_probs", m["lp_times"]), ("train", m["train_times"]), ("critic", m["critic_times"])):
            for i, f in enumerate(t.forward_s):
                b = t.backward_s[i] if i < len(t.backward_s) else None
                micro.append(MicroBatchTiming(m["rank"], name, i, f, b))
        for span in m["spans"]:
            driver.trace.span(span[0], span[1], span[2], pid=m["rank"], lane=span[3], step=step)
    rewards = torch.tensor(data["rewards"])
    response_tokens = sum(data["response_lengths"])
    step_t0, end = clock.start, clock.ends
    # PPO: the critic (values, update) runs between the broadcast and the log-probs; "train" counts it with the
    # actor's update, as perfmodel's train phase does, and "critic" says how much of it was the critic's
    critic_s = end["critic"] - end["broadcast_batch"] if "critic" in end else None
    lp_start = end.get("critic", end["broadcast_batch"])
    phases = {"rollout": end["rollout"] - step_t0, "log_probs": end["log_probs"] - lp_start,
              "train": end["train"] - end["log_probs"] + (critic_s or 0.0), "critic": critic_s,
              "weight_update": end["update_engine"] - end["train"],
              "offload": None, "onload": None, "step": step_end - step_t0}
    record = StepRecord(
        step=step, started_at=step_t0, phases_s=phases,
        tokens={"prompt": sum(data["prompt_lengths"]), "response": response_tokens,
                "train": int(data["tokens"].numel())},
        reward_mean=float(rewards.mean()), reward_std=float(rewards.std()),
        train_rollout_logprob_abs_diff=abs_diff, train_rollout_kl=kl,
        rollout_log_prob_mean=sum(float(t.mean()) for t in data["rollout_log_probs"]) / len(data["rollout_log_probs"]),
        train_stats=train_summary,
        weight_update={**wu.__dict__, "gather_s": end["gather_weights"] - end["train"]},
        peak_rss_bytes={**{f"rank{m['rank']}": m["rss"] for m in gathered}, "engine": _engine_peak_rss_bytes()},
        micro_batches=micro, samples=data["examples"],
        host_s={"reward": data["reward_s"], "generate": data["generate_s"], "gc_during_generate": data["gc_s"],
                "gc_step": data["gc_step_s"],  # what no phase holds: the batch's broadcast, the measurements' gather
                "between_phases": step_end - step_t0 - sum(phases[k] for k in ("rollout", "log_probs", "train",
                                                                               "weight_update"))},
    )
    driver.trace.span(f"step {step}", step_t0, step_end - step_t0, lane="step")
    driver.sink.write_step(setup.job["run_id"], record)
    driver.trace.flush()
    ph = record.phases_s
    parts = ", ".join(f"{name} {ph[key]:.2f}" for name, key in (("rollout", "rollout"), ("log-probs", "log_probs"),
                                                               ("critic", "critic"), ("train", "train"),
                                                               ("update", "weight_update")) if ph.get(key) is not None)
    outside = record.host_s["between_phases"]
    stall = (f"; {outside:.2f} s outside the phases (GC {record.host_s['gc_step']:.2f} s)" if outside > 0.1 else "")
    print(f"[executor] step {step}/{setup.steps}: {step_end - step_t0:.2f} s ({parts}{stall}), reward "
          f"{record.reward_mean:.3f}, gap {abs_diff:.4f} (mean |train - rollout| log-prob), kl {kl:.5f}", flush=True)


def _freeze_gc(driver: _Driver | None) -> None:
    """After a warm-up step, the heap built so far (torch, megatron-core, SGLang: millions of objects) is moved out
    of the collected generations, here and in SGLang's scheduler, as SGLang's freeze_gc advises: walked by every
    full collection it stalled a step by 0.5 s on the driver (every ~10th step, host_s.gc_step) and the engine's
    generate by as much (measured on examples/local-grpo.yaml)."""
    gc.collect()
    gc.freeze()
    if driver is not None and driver.engine is not None:
        driver.engine.freeze_gc()


class _GcPauses:
    """Seconds this process spent in Python's garbage collector (gc.callbacks), to tell a GC pause from a wait on
    the engine when a rollout stalls."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._t0 = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.total_s += time.perf_counter() - self._t0


_GC_PAUSES = _GcPauses()


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


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(prog="executor.backends.local.worker")
    parser.add_argument("--job", required=True, help="job.json written by the runner")
    args = parser.parse_args(argv)
    job = json.loads(Path(args.job).read_text(encoding="utf-8"))
    run(job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
