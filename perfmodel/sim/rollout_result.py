"""What one simulated rollout gives (`perfmodel.sim.rollout.simulate_rollout`): the result, its timeline segments
and the straggler share, checked against physics when built."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from perfmodel.invariants import PhysicsError, check_parts_non_negative
from perfmodel.sim.response_law import ResponseLaw


class TimelineSegment(NamedTuple):
    engine: int
    start_s: float
    end_s: float
    batch: int
    kind: str  # "prefill" | "decode"


def straggler_fraction(batch_curves: tuple[tuple[tuple[float, int], ...], ...], rollout_time_s: float) -> float:
    """Share of a rollout's wall time with fewer than half of its peak running requests still running (summed over
    engines): the long tail of heavy-tailed response lengths, where the engines decode a few stragglers. Computed
    once per simulated rollout (a sweep shares one rollout among many plans)."""
    if rollout_time_s <= 0 or not batch_curves:
        return 0.0
    times = np.unique(np.concatenate([[0.0, rollout_time_s]] + [[t for t, _ in curve] for curve in batch_curves]))
    times = times[times <= rollout_time_s]
    running = np.zeros(len(times))
    for curve in batch_curves:  # each engine's step function, read at every change of any engine
        at = np.array([t for t, _ in curve])
        n = np.array([b for _, b in curve], dtype=float)
        i = np.searchsorted(at, times, side="right") - 1
        running += np.where(i >= 0, n[np.clip(i, 0, None)], 0.0)
    peak = running.max()
    if peak <= 0:
        return 0.0
    return float(np.diff(times)[running[:-1] < peak / 2].sum() / rollout_time_s)


@dataclass(frozen=True, slots=True)
class RolloutResult:
    rollout_time_s: float
    tokens_generated: int  # response tokens (what Miles' perf/tokens_per_gpu_per_sec counts)
    prompt_tokens: int
    tokens_per_s_per_gpu: float
    rollout_gpus: int
    num_engines: int  # simulated schedulers (SGLang engines x dp replicas without DP-attention)
    engine_gpus: int  # GPUs per simulated scheduler
    engine_busy_s: tuple[float, ...]
    engine_last_finish_s: tuple[float, ...]
    engine_decode_steps: tuple[int, ...]
    engine_max_batch: tuple[int, ...]
    batch_curves: tuple[tuple[tuple[float, int], ...], ...]  # per engine: (t_s, running batch) at each change
    idle_tail_gpu_s: float  # sum over engines of (rollout end - last finish) x engine GPUs
    prefill_time_s: float  # summed over engines
    decode_time_s: float  # summed over engines
    timeline: tuple[TimelineSegment, ...]
    response_lengths: tuple[int, ...]
    law: ResponseLaw
    kv_pool_bytes_per_gpu: float
    weights_bytes_per_gpu: float
    max_running_requests: float
    sim_events: int  # simpy events processed (the speed metric: grows with segments, not tokens)
    decode_segments: int
    notes: tuple[str, ...] = field(default=())
    straggler_fraction: float = 0.0  # `straggler_fraction(batch_curves, rollout_time_s)`

    def __post_init__(self) -> None:
        where = f"rollout on {self.rollout_gpus} GPUs, {self.num_engines} engines"
        check_parts_non_negative("rollout times >= 0", where, {
            "rollout_time_s": self.rollout_time_s, "prefill_time_s": self.prefill_time_s,
            "decode_time_s": self.decode_time_s, "idle_tail_gpu_s": self.idle_tail_gpu_s}
            | {f"engine_busy_s[{i}]": b for i, b in enumerate(self.engine_busy_s)})
        if self.rollout_time_s <= 0:
            raise PhysicsError("rollout > 0", where, f"rollout_time_s = {self.rollout_time_s}")
        for i, (busy, last) in enumerate(zip(self.engine_busy_s, self.engine_last_finish_s)):
            if busy > self.rollout_time_s * (1 + 1e-6) + 1e-9 or last > self.rollout_time_s * (1 + 1e-6) + 1e-9:
                raise PhysicsError("an engine is busy within the rollout", where, f"engine {i} busy {busy:.6g} s, "
                                   f"last finish {last:.6g} s, rollout {self.rollout_time_s:.6g} s")

    @property
    def prefill_fraction(self) -> float:
        busy = self.prefill_time_s + self.decode_time_s
        return self.prefill_time_s / busy if busy else 0.0

    @property
    def idle_tail_fraction(self) -> float:
        """Share of the rollout GPU-time spent idle in the tail."""
        total = self.rollout_time_s * self.rollout_gpus
        return self.idle_tail_gpu_s / total if total else 0.0

    def spans(self, offset_s: float = 0.0) -> list:
        from perfmodel.trace import Span

        return [Span(f"engine {s.engine}", "compute", f"{s.kind} B={s.batch}", s.start_s + offset_s,
                     s.end_s - s.start_s, {"batch": s.batch}) for s in self.timeline]

    def to_json(self) -> dict:
        return {
            "rollout_time_s": self.rollout_time_s,
            "tokens_generated": self.tokens_generated,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "num_engines": self.num_engines,
            "engine_gpus": self.engine_gpus,
            "idle_tail_gpu_s": self.idle_tail_gpu_s,
            "idle_tail_fraction": self.idle_tail_fraction,
            "straggler_fraction": self.straggler_fraction,
            "prefill_time_s": self.prefill_time_s,
            "decode_time_s": self.decode_time_s,
            "engine_busy_s": list(self.engine_busy_s),
            "response_law": {"kind": self.law.kind, "mean": self.law.mean,
                             "truncated_fraction": self.law.truncated_fraction, "note": self.law.note},
            "notes": list(self.notes),
        }
