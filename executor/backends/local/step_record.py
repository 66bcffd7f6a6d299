"""Rank 0 after a step: the ranks' measurements merged into one StepRecord, written to the store (through the
measurement sink) and the trace, and the step's progress line."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from executor.backends.local.rank_setup import Driver, RankSetup
    from executor.backends.local.weight_update import WeightUpdateResult
    from executor.records import MicroBatchTiming, StepRecord

_TIMED_PHASES = ("rollout", "log_probs", "train", "weight_update")  # the rest of a step is host_s.between_phases


@dataclass
class StepClock:
    """One step's phases back to back: each lap ends a phase (time.time()) and the next one starts there."""

    start: float
    spans: list[tuple[str, float, float, str]] = field(default_factory=list)  # (name, start, duration, lane)
    ends: dict[str, float] = field(default_factory=dict)  # phase name -> its end

    def lap(self, name: str, lane: str) -> None:
        now = time.time()
        begin = self.ends[self.spans[-1][0]] if self.spans else self.start
        self.spans.append((name, begin, now - begin, lane))
        self.ends[name] = now


def record_step(setup: RankSetup, driver: Driver, step: int, data: dict[str, Any], clock: StepClock,
                wu: WeightUpdateResult, gathered: list[dict[str, Any]], step_end: float) -> None:
    """Rank 0: merge the ranks' measurements into one StepRecord, write it and the trace, log progress."""
    import torch

    from executor.records import StepRecord

    abs_diff, kl = _logprob_gap(gathered)
    micro = _micro_batches(gathered)
    for m in gathered:
        for span in m["spans"]:
            driver.trace.span(span[0], span[1], span[2], pid=m["rank"], lane=span[3], step=step)
    rewards = torch.tensor(data["rewards"])
    step_t0, end = clock.start, clock.ends
    phases = _phases(clock, step_end)
    record = StepRecord(
        step=step, started_at=step_t0, phases_s=phases,
        tokens={"prompt": sum(data["prompt_lengths"]), "response": sum(data["response_lengths"]),
                "train": int(data["tokens"].numel())},
        reward_mean=float(rewards.mean()), reward_std=float(rewards.std()),
        train_rollout_logprob_abs_diff=abs_diff, train_rollout_kl=kl,
        rollout_log_prob_mean=sum(float(t.mean()) for t in data["rollout_log_probs"]) / len(data["rollout_log_probs"]),
        train_stats=_train_summary(gathered),
        weight_update={**wu.__dict__, "gather_s": end["gather_weights"] - end["train"]},
        peak_rss_bytes={**{f"rank{m['rank']}": m["rss"] for m in gathered}, "engine": _engine_peak_rss_bytes()},
        micro_batches=micro, samples=data["examples"],
        host_s={"reward": data["reward_s"], "generate": data["generate_s"], "gc_during_generate": data["gc_s"],
                "gc_step": data["gc_step_s"],  # what no phase holds: the batch's broadcast, the measurements' gather
                "between_phases": step_end - step_t0 - sum(phases[k] for k in _TIMED_PHASES)},
    )
    driver.trace.span(f"step {step}", step_t0, step_end - step_t0, lane="step")
    driver.sink.write_step(setup.job["run_id"], record)
    driver.trace.flush()
    print(_progress_line(record, setup.steps, step_end - step_t0), flush=True)


def _logprob_gap(gathered: list[dict[str, Any]]) -> tuple[float, float]:
    """Mean |train - rollout| log-prob and KL over the samples of the last PP stage's ranks (the ones that have
    log-probs)."""
    parts = [m["gap"] for m in gathered if m["gap"] is not None]
    n = sum(p[2] for p in parts)
    return sum(p[0] for p in parts) / n, sum(p[1] for p in parts) / n


def _train_summary(gathered: list[dict[str, Any]]) -> dict[str, float]:
    """Each training statistic averaged over the ranks that computed losses."""
    stats_parts = [m["train_stats"] for m in gathered if m["train_stats"]]
    return {k: sum(s[k] for s in stats_parts) / len(stats_parts) for k in stats_parts[0]}


def _micro_batches(gathered: list[dict[str, Any]]) -> list[MicroBatchTiming]:
    """Every rank's micro-batch forward (and backward) times, per pass."""
    from executor.records import MicroBatchTiming

    micro = []
    for m in gathered:
        for name, t in (("log_probs", m["lp_times"]), ("train", m["train_times"]), ("critic", m["critic_times"])):
            for i, f in enumerate(t.forward_s):
                b = t.backward_s[i] if i < len(t.backward_s) else None
                micro.append(MicroBatchTiming(m["rank"], name, i, f, b))
    return micro


def _phases(clock: StepClock, step_end: float) -> dict[str, float | None]:
    """The step's phases from the clock's laps."""
    step_t0, end = clock.start, clock.ends
    # PPO: the critic (values, update) runs between the broadcast and the log-probs; "train" counts it with the
    # actor's update, as perfmodel's train phase does, and "critic" says how much of it was the critic's
    critic_s = end["critic"] - end["broadcast_batch"] if "critic" in end else None
    lp_start = end.get("critic", end["broadcast_batch"])
    return {"rollout": end["rollout"] - step_t0, "log_probs": end["log_probs"] - lp_start,
            "train": end["train"] - end["log_probs"] + (critic_s or 0.0), "critic": critic_s,
            "weight_update": end["update_engine"] - end["train"],
            "offload": None, "onload": None, "step": step_end - step_t0}


def _progress_line(record: StepRecord, steps: int, step_s: float) -> str:
    ph = record.phases_s
    parts = ", ".join(f"{name} {ph[key]:.2f}" for name, key in (("rollout", "rollout"), ("log-probs", "log_probs"),
                                                               ("critic", "critic"), ("train", "train"),
                                                               ("update", "weight_update")) if ph.get(key) is not None)
    outside = record.host_s["between_phases"]
    stall = (f"; {outside:.2f} s outside the phases (GC {record.host_s['gc_step']:.2f} s)" if outside > 0.1 else "")
    return (f"[executor] step {record.step}/{steps}: {step_s:.2f} s ({parts}{stall}), reward "
            f"{record.reward_mean:.3f}, gap {record.train_rollout_logprob_abs_diff:.4f} (mean |train - rollout| "
            f"log-prob), kl {record.train_rollout_kl:.5f}")


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
