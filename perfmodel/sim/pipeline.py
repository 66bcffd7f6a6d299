"""The pipeline engine: one simpy process per pipeline rank runs its schedule's ops, waiting on the data
dependencies (activations from the previous virtual stage, gradients from the next) that p2p transfers deliver.

It knows nothing of models or hardware: op durations come from a callable, so the same engine runs the cost
model's stages and the synthetic stages of the bubble-formula tests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

from perfmodel.names import EP_COMM
from perfmodel.schedules import Op, Schedule
from perfmodel.trace import Span


class PipelineStall(RuntimeError):
    """The schedule's static order deadlocks: some rank waits on an op that waits on it."""


@dataclass(frozen=True, slots=True)
class OpTimes:
    """Durations of one micro-batch's ops on one virtual stage. Comm maps are the exposed (not overlapped) parts
    already included in the durations, for accounting."""

    f_s: float
    b_s: float  # backward for inputs, or the full backward when the schedule does not split it
    w_s: float = 0.0  # backward for weights (split schedules only)
    recompute_s: float = 0.0  # part of b_s spent replaying the forward
    f_comm_s: dict[str, float] = field(default_factory=dict)
    b_comm_s: dict[str, float] = field(default_factory=dict)
    moe_share: float = 0.0  # of the compute, the MoE experts' (an F&B pair's middle window, fb_pair_ep_s)
    f_dispatch_share: float = 0.5  # of the forward's EP all-to-all, the dispatch's
    b_combine_share: float = 0.5  # of the backward's, the combine gradient's (the first one out)


@dataclass(slots=True)
class TraceEvent:
    rank: int
    name: str
    start_s: float
    dur_s: float
    track: str  # "compute" or "comm"
    args: dict[str, float | int | str] = field(default_factory=dict)


@dataclass(slots=True)
class RankStats:
    end_s: float = 0.0
    busy_s: dict[str, float] = field(default_factory=dict)  # forward, backward, weight_grad, recompute, comm:*

    def add(self, key: str, dt: float) -> None:
        if dt:
            self.busy_s[key] = self.busy_s.get(key, 0.0) + dt

    @property
    def total_busy_s(self) -> float:
        return sum(self.busy_s.values())


@dataclass(slots=True)
class PipelineResult:
    makespan_s: float
    ranks: list[RankStats]
    trace: list[TraceEvent]
    events: int  # simpy events processed, to show how cost grows

    def bubble_s(self, rank: int) -> float:
        return self.makespan_s - self.ranks[rank].total_busy_s


def fb_pair_ep_s(f: OpTimes, b: OpTimes, f_compute: float, b_compute: float, overlap_share: float) -> float:
    """The EP all-to-all time an F&B pair adds to its two halves' compute. megatron-core runs the pair layer by
    layer (models/common/model_chunk_schedule_plan.py, schedule_layer_1f1b) in three windows, the communication
    stream beside the compute stream: the backward's combine gradient beside the forward's attention; the
    forward's dispatch and the backward's dispatch gradient beside the backward's and the forward's experts; the
    forward's combine beside the backward's attention. Each window takes the longer of the two (chunk sums: every
    layer alike); what the compute hides still holds `overlap_share` of the SMs, which the compute beside it
    loses."""
    f_a2a, b_a2a = f.f_comm_s.get(EP_COMM, 0.0), b.b_comm_s.get(EP_COMM, 0.0)
    if f_a2a + b_a2a <= 0:
        return 0.0
    f_moe, b_moe = f_compute * f.moe_share, b_compute * b.moe_share
    f_dispatch, b_combine = f_a2a * f.f_dispatch_share, b_a2a * b.b_combine_share
    windows = (max(b_combine, f_compute - f_moe) + max(f_dispatch + b_a2a - b_combine, b_moe + f_moe)
               + max(f_a2a - f_dispatch, b_compute - b_moe))
    exposed = min(f_a2a + b_a2a, max(0.0, windows - f_compute - b_compute))  # rounding of large sums
    return exposed + (f_a2a + b_a2a - exposed) * overlap_share


def run_pipeline(
    schedule: Schedule,
    op_times: Callable[[int, int], OpTimes],
    p2p_s: Callable[[int], float],
    record_trace: bool = False,
    overlap_share: float = 0.0,
) -> PipelineResult:
    """Simulate one step of the pipeline. op_times(virtual_stage, mb); p2p_s(virtual_stage) is the transfer
    time between virtual stage vs and vs+1 (and back for gradients) when they sit on different ranks;
    `overlap_share` the share of the GPU's SMs the EP all-to-all kernels take while hidden under the other half of
    an F&B pair (its compute runs that much slower for as long as they run).

    One long function on purpose: the rank processes are closures over the events and statistics of one
    simulation, on the hot path of every sweep candidate; split into functions they would pass a dozen shared
    objects per op."""
    if schedule.chunks == 1 and not record_trace and all(op.kind == "F" for op in schedule.rank_ops(0)):
        return _forward_only_flow(schedule, op_times, p2p_s)
    env = simpy.Environment()
    pp, m, n_vs = schedule.pp, schedule.m, schedule.virtual_stages
    owner = [0] * n_vs
    chunk_of = [0] * n_vs
    for r in range(pp):
        for c in range(schedule.chunks):
            vs = schedule.virtual_stage(r, c)
            owner[vs], chunk_of[vs] = r, c
    # f_in[vs][mb]: the activations for F(vs, mb) have arrived; g_in[vs][mb]: the gradient for B(vs, mb) has.
    f_in = [[env.event() for _ in range(m)] for _ in range(n_vs)]
    g_in = [[env.event() for _ in range(m)] for _ in range(n_vs)]
    for mb in range(m):
        f_in[0][mb].succeed()
    times_cache: dict[tuple[int, int], OpTimes] = {}
    stats = [RankStats() for _ in range(pp)]
    trace: list[TraceEvent] = []
    counter = [0]

    def times(vs: int, mb: int) -> OpTimes:
        key = (vs, mb)
        t = times_cache.get(key)
        if t is None:
            t = times_cache[key] = op_times(vs, mb)
        return t

    def deliver(ev: simpy.Event, delay: float) -> None:
        if delay <= 0:
            ev.succeed()
        else:
            env.timeout(delay).callbacks.append(lambda _e, ev=ev: ev.succeed())

    def dependencies(rank: int, op: Op) -> list[simpy.Event]:
        vs = schedule.virtual_stage(rank, op.chunk)
        if op.kind == "F":
            return [f_in[vs][op.mb]]
        if op.kind in ("B", "BW"):
            return [g_in[vs][op.mb]]
        if op.kind == "FB":
            return [f_in[vs][op.mb], g_in[schedule.virtual_stage(rank, op.b_chunk)][op.b_mb]]
        return []  # W: its B ran earlier on this rank

    def hand_on(rank: int, kind: str, vs: int, mb: int) -> None:
        if kind == "F":
            if vs + 1 < n_vs:
                deliver(f_in[vs + 1][mb], 0.0 if owner[vs + 1] == rank else p2p_s(vs))
            elif not g_in[vs][mb].triggered:
                g_in[vs][mb].succeed()  # the loss is computed: backward of the last stage may start
        elif kind in ("B", "BW") and vs > 0:
            deliver(g_in[vs - 1][mb], 0.0 if owner[vs - 1] == rank else p2p_s(vs - 1))

    def execute(rank: int, op: Op):
        vs = schedule.virtual_stage(rank, op.chunk)
        t = times(vs, op.mb)
        st = stats[rank]
        start = env.now
        counter[0] += 1
        if op.kind == "F":
            dur, comm = t.f_s, t.f_comm_s
            st.add("forward", dur - sum(comm.values()))
        elif op.kind == "W":
            dur, comm = t.w_s, {}
            st.add("weight_grad", dur)
        else:
            bt = times(schedule.virtual_stage(rank, op.b_chunk), op.b_mb) if op.kind == "FB" else t
            dur = bt.b_s + (bt.w_s if op.kind != "B" else 0.0)
            comm = bt.b_comm_s
            st.add("recompute", bt.recompute_s)
            st.add("backward", dur - bt.recompute_s - sum(comm.values()))
            if op.kind == "FB":
                # DualPipe's pair: each half's EP all-to-all runs under the other half's compute, whose SMs it
                # shares while it runs (`overlap_share`); what is left over stays exposed.
                f_compute = t.f_s - sum(t.f_comm_s.values())
                b_compute = dur - sum(comm.values())
                ep = fb_pair_ep_s(t, bt, f_compute, b_compute, overlap_share)
                comm = {k: t.f_comm_s.get(k, 0.0) + comm.get(k, 0.0) for k in {*t.f_comm_s, *comm}}
                if EP_COMM in comm:
                    comm[EP_COMM] = ep
                st.add("forward", f_compute)
                dur = f_compute + b_compute + sum(comm.values())
        for kind, c in comm.items():
            st.add(f"comm:{kind}", c)
        yield env.timeout(dur)
        if record_trace:
            label = f"{op.kind}{op.mb}" + (f".{op.chunk}" if schedule.chunks > 1 else "")
            if op.kind == "FB":
                label = f"F{op.mb}.{op.chunk}&B{op.b_mb}.{op.b_chunk}"
            comm_total = sum(comm.values())
            trace.append(TraceEvent(rank, label, start, dur - comm_total, "compute", {"stage": vs, "mb": op.mb}))
            if comm_total > 0:
                trace.append(TraceEvent(rank, "+".join(comm), start + dur - comm_total, comm_total, "comm",
                                        {k: v for k, v in comm.items()}))
        if op.kind == "FB":  # the pair hands both results on at its end
            hand_on(rank, "F", vs, op.mb)
            hand_on(rank, "BW", schedule.virtual_stage(rank, op.b_chunk), op.b_mb)
        else:
            hand_on(rank, op.kind, vs, op.mb)

    def rank_proc(rank: int):
        ops = schedule.rank_ops(rank)
        w_ready: deque[Op] = deque()
        w_done: set[tuple[int, int]] = set()
        for op in ops:
            if op.kind == "W":
                if (op.mb, op.chunk) in w_done:
                    continue
                yield from execute(rank, op)
                w_done.add((op.mb, op.chunk))
                if schedule.defer_w:
                    w_ready.remove(op)
                continue
            for dep in dependencies(rank, op):
                while not dep.triggered and schedule.defer_w and w_ready:
                    w = w_ready.popleft()
                    yield from execute(rank, w)
                    w_done.add((w.mb, w.chunk))
                if not dep.triggered:
                    yield dep
            yield from execute(rank, op)
            if op.kind == "B" and schedule.defer_w:
                w_ready.append(Op("W", op.mb, op.chunk))
        stats[rank].end_s = env.now

    procs = [env.process(rank_proc(r)) for r in range(pp)]
    env.run()
    stuck = [r for r, p in enumerate(procs) if p.is_alive]
    if stuck:  # every rank waits on another: the schedule's order cannot run (a bug to refuse, not a time)
        raise PipelineStall(f"{schedule.name} with pp {pp}, vpp {schedule.vpp}, {m} micro-batches: ranks "
                            f"{stuck[:8]}{'...' if len(stuck) > 8 else ''} wait forever on a dependency")
    makespan = max(s.end_s for s in stats)
    return PipelineResult(makespan, stats, trace, counter[0])


def _forward_only_flow(schedule: Schedule, op_times: Callable[[int, int], OpTimes],
                       p2p_s: Callable[[int], float]) -> PipelineResult:
    """A forward-only pass with one chunk per rank is a flow shop: F(r, mb) starts when rank r is free and the
    activations of F(r-1, mb) have arrived. The recurrence gives the same times the simpy processes do (tested
    against them), without an event per op; log-prob passes in sweeps take this path."""
    pp, m = schedule.pp, schedule.m
    stats = [RankStats() for _ in range(pp)]
    arrive = [0.0] * m
    for r in range(pp):
        free = 0.0
        st = stats[r]
        hop = p2p_s(r) if r + 1 < pp else 0.0
        for mb in range(m):
            t = op_times(r, mb)
            start = max(free, arrive[mb])
            free = start + t.f_s
            st.add("forward", t.f_s - sum(t.f_comm_s.values()))
            for kind, c in t.f_comm_s.items():
                st.add(f"comm:{kind}", c)
            arrive[mb] = free + hop
        st.end_s = free
    return PipelineResult(max(s.end_s for s in stats), stats, [], pp * m)


def pipeline_spans(events: list[TraceEvent], prefix: str = "stage", offset_s: float = 0.0) -> list[Span]:
    """Spans from the pipeline engine's TraceEvents."""
    return [Span(f"{prefix} {e.rank}", e.track, e.name, e.start_s + offset_s, e.dur_s, dict(e.args)) for e in events]
