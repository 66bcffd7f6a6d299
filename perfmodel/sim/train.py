"""One Megatron training step (or a forward-only log-prob pass) of one representative DP replica.

The pipeline engine runs the schedule over per-stage op times from the cost model; the DP gradient sync
overlaps the last backward of each rank, then the optimizer step runs (on the host for the offloaded share).
Stragglers enter through the cost model's expert-load imbalance, not by simulating every GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from perfmodel.cost.dispatch import overlap_share
from perfmodel.cost.train.stage import (
    ChunkCost,
    chunk_cost,
    dp_grad_sync_s,
    optimizer_step_s,
    p2p_time_s,
    param_gather_exposed_s,
    param_gather_mode,
)
from perfmodel.inputs.scenario import Scenario
from perfmodel.invariants import check_train_step
from perfmodel.memo import Memo
from perfmodel.schedules import ForwardOnly, Schedule, make_schedule
from perfmodel.sim.pipeline import OpTimes, PipelineResult, TraceEvent, run_pipeline


@dataclass(slots=True)
class TrainStepResult:
    step_time_s: float
    pipeline_s: float
    microbatches: int
    tokens: int
    breakdown_s: dict[str, float]  # averaged over pipeline ranks; sums to step_time_s
    bubble_s_per_stage: list[float]
    exposed_comm_s: dict[str, float]  # per collective kind, averaged over pipeline ranks
    model_flops: float  # all GPUs of the step
    hardware_flops: float  # model FLOPs plus recomputed forwards
    gpus: int
    peak_flops_per_gpu: float
    events: int
    where: str = ""  # the layout, for errors
    trace: list[TraceEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_train_step(self.where, self.step_time_s, self.breakdown_s, self.bubble_s_per_stage,
                         self.exposed_comm_s, self.model_flops, self.hardware_flops, self.gpus,
                         self.peak_flops_per_gpu)

    @property
    def model_tflops_per_gpu(self) -> float:
        return self.model_flops / self.step_time_s / self.gpus / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> float:
        return self.hardware_flops / self.step_time_s / self.gpus / 1e12

    @property
    def mfu(self) -> float:
        return self.model_flops / self.step_time_s / self.gpus / self.peak_flops_per_gpu

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens / self.step_time_s / self.gpus

    @staticmethod
    def consecutive(steps: list[TrainStepResult]) -> TrainStepResult:
        """Several optimizer steps run back to back (an RL step whose samples exceed global_batch): times, tokens
        and FLOPs add up; the trace shows the steps one after the other."""
        if len(steps) == 1:
            return steps[0]

        def add(dicts: list[dict[str, float]]) -> dict[str, float]:
            out: dict[str, float] = {}
            for d in dicts:
                for k, v in d.items():
                    out[k] = out.get(k, 0.0) + v
            return out

        trace: list[TraceEvent] = []
        offset = 0.0
        for st in steps:
            trace.extend(TraceEvent(e.rank, e.name, e.start_s + offset, e.dur_s, e.track, e.args) for e in st.trace)
            offset += st.step_time_s
        first = steps[0]
        return TrainStepResult(
            step_time_s=sum(st.step_time_s for st in steps),
            pipeline_s=sum(st.pipeline_s for st in steps),
            microbatches=sum(st.microbatches for st in steps),
            tokens=sum(st.tokens for st in steps),
            breakdown_s=add([st.breakdown_s for st in steps]),
            bubble_s_per_stage=[sum(v) for v in zip(*(st.bubble_s_per_stage for st in steps))],
            exposed_comm_s=add([st.exposed_comm_s for st in steps]),
            model_flops=sum(st.model_flops for st in steps),
            hardware_flops=sum(st.hardware_flops for st in steps),
            gpus=first.gpus,
            peak_flops_per_gpu=first.peak_flops_per_gpu,
            events=sum(st.events for st in steps),
            where=first.where,
            trace=trace,
        )


def _op_times(cost: ChunkCost, schedule: Schedule) -> OpTimes:
    # DualPipe's overlap of one micro-batch's all-to-all with another's compute is the pipeline engine's: it
    # happens in the F&B pairs of the schedule's order, not in the ops that run alone.
    f_comm = dict(cost.fwd_comm_s)
    b_comm = dict(cost.bwd_comm_s)
    f_s = cost.fwd_compute_s + sum(f_comm.values())
    b_core = cost.recompute_s + cost.bwd_input_s + sum(b_comm.values())
    parts = (cost.moe_share, cost.f_dispatch_share, cost.b_combine_share)
    if schedule.split_backward:
        return OpTimes(f_s, b_core, cost.bwd_weight_s, cost.recompute_s, f_comm, b_comm, *parts)
    return OpTimes(f_s, b_core + cost.bwd_weight_s, 0.0, cost.recompute_s, f_comm, b_comm, *parts)


def _quantize(n: int) -> int:
    if n <= 256:
        return max(1, n)
    step = 1 << max(0, n.bit_length() - 6)  # 32 to 64 steps per octave
    return max(step, round(n / step) * step)


def scale_chunk_cost(c: ChunkCost, r: float) -> ChunkCost:
    if r == 1.0:
        return c
    return ChunkCost(c.fwd_compute_s * r, c.bwd_input_s * r, c.bwd_weight_s * r, c.recompute_s * r,
                     {k: v * r for k, v in c.fwd_comm_s.items()}, {k: v * r for k, v in c.bwd_comm_s.items()},
                     c.model_flops * r, c.p2p_bytes * r, c.moe_share, c.f_dispatch_share, c.b_combine_share)


def default_microbatches(scn: Scenario) -> list[tuple[int, int]]:
    """(tokens, seq_len) per micro-batch of one DP rank for fixed micro-batching."""
    t = scn.train
    return [(t.micro_batch * t.seq_len, t.seq_len)] * scn.num_microbatches


def _rank_tail(scn: Scenario, schedule: Schedule, op_times: Callable[[int, int], OpTimes], rank: int,
               microbatches: int) -> dict[str, float]:
    """What follows a rank's pipeline work: the DP gradient sync (overlapping its last backward), the parameter
    all-gathers (under its first forward, or FSDP's under each pass: `param_gather_exposed_s`) and the optimizer
    step."""
    grad_s, _ = dp_grad_sync_s(scn, rank)

    def fwd_s(mb: int) -> float:
        return sum(op_times(schedule.virtual_stage(rank, c), mb).f_s for c in range(schedule.chunks))

    def bwd_s(mb: int) -> float:
        return sum(op_times(schedule.virtual_stage(rank, c), mb).b_s for c in range(schedule.chunks))

    # every micro-batch's passes only when FSDP gathers per pass; else the first forward hides the one gather
    per_pass = scn.train.fsdp and param_gather_mode(scn) != "step"
    fwd = [fwd_s(mb) for mb in range(microbatches)] if per_pass else [fwd_s(0)]
    bwd = [bwd_s(mb) for mb in range(microbatches)] if per_pass else []
    return {"comm:dp_grad": max(0.0, grad_s - bwd_s(microbatches - 1)),
            "comm:dp_param_gather": param_gather_exposed_s(scn, rank, fwd, bwd),
            "optimizer": optimizer_step_s(scn, rank)}


def _flops(virtual_stages: int, microbatches: int, cost_of: Callable[[int, int], ChunkCost],
           forward_only: bool) -> tuple[float, float]:
    """(model FLOPs, recomputed forward FLOPs) of every chunk of every micro-batch, per GPU of a stage."""
    model_flops = 0.0
    recompute_flops = 0.0
    for vs in range(virtual_stages):
        for mb in range(microbatches):
            c = cost_of(vs, mb)
            model_flops += c.model_flops / 3.0 if forward_only else c.model_flops
            if not forward_only and c.recompute_s > 0 and c.fwd_compute_s > 0:
                recompute_flops += (c.model_flops / 3.0) * (c.recompute_s / c.fwd_compute_s)
    return model_flops, recompute_flops


def simulate_train_step(
    scn: Scenario,
    microbatches: list[tuple[int, int]] | None = None,
    forward_only: bool = False,
    record_trace: bool = False,
    include_optimizer: bool = True,
    memo: Memo | None = None,
) -> TrainStepResult:
    """Simulate one step. `microbatches` lists (tokens, seq_len) per micro-batch of one DP rank (RL packs
    variable-length samples by max_tokens_per_gpu); default: the fixed micro-batches of the scenario."""
    mbs = microbatches or default_microbatches(scn)
    lay = scn.layout
    schedule = make_schedule(scn.schedule, lay.pp, len(mbs), lay.vpp, scn.train.microbatch_group_size_per_vp_stage)
    if forward_only:
        schedule = ForwardOnly(schedule)
    costs: dict[tuple[int, int, int], ChunkCost] = {}

    def cost_of(vs: int, mb: int) -> ChunkCost:
        tokens, seq = mbs[mb]
        key = (vs, tokens, seq)
        c = costs.get(key)
        if c is None:
            # Packed micro-batches all differ a little: price a token count on a 1/32-octave grid and scale
            # linearly (below 1.6% error, unbiased) instead of pricing every distinct count.
            q_tokens, q_seq = _quantize(tokens), _quantize(seq)
            c = scale_chunk_cost(chunk_cost(scn, vs, q_tokens, q_seq, memo=memo), tokens / q_tokens)
            costs[key] = c
        return c

    def op_times(vs: int, mb: int) -> OpTimes:
        c = cost_of(vs, mb)
        if forward_only:
            return OpTimes(c.fwd_compute_s + sum(c.fwd_comm_s.values()), 0.0, 0.0, 0.0, dict(c.fwd_comm_s), {})
        return _op_times(c, schedule)

    p2p_cache: dict[int, float] = {}
    largest_mb = mbs.index(max(mbs))  # sends are sized by the largest micro-batch

    def p2p(vs: int) -> float:
        if vs not in p2p_cache:
            p2p_cache[vs] = p2p_time_s(scn, cost_of(vs, largest_mb).p2p_bytes)
        return p2p_cache[vs]

    share = overlap_share(scn.hardware, scn.train.moe_dispatcher, scn.stack.hybridep_units)
    pipe: PipelineResult = run_pipeline(schedule, op_times, p2p, record_trace, share)

    per_rank_extra = [_rank_tail(scn, schedule, op_times, rank, len(mbs))
                      if not forward_only and include_optimizer else {} for rank in range(lay.pp)]
    tail_s = max(pipe.ranks[r].end_s - pipe.makespan_s + sum(per_rank_extra[r].values()) for r in range(lay.pp))
    step = pipe.makespan_s + max(0.0, tail_s)

    n = lay.pp
    breakdown: dict[str, float] = {}
    for rank in range(n):
        for k, v in pipe.ranks[rank].busy_s.items():
            breakdown[k] = breakdown.get(k, 0.0) + v / n
        for k, v in per_rank_extra[rank].items():
            breakdown[k] = breakdown.get(k, 0.0) + v / n
    breakdown["bubble"] = max(0.0, step - sum(breakdown.values()))
    exposed = {k.split(":", 1)[1]: v for k, v in breakdown.items() if k.startswith("comm:")}
    model_flops, recompute_flops = _flops(schedule.virtual_stages, len(mbs), cost_of, forward_only)
    replicas = scn.dp * lay.tp * lay.cp
    tokens = sum(t for t, _ in mbs) * scn.dp
    return TrainStepResult(
        step_time_s=step,
        pipeline_s=pipe.makespan_s,
        microbatches=len(mbs),
        tokens=tokens,
        breakdown_s=breakdown,
        bubble_s_per_stage=[step - pipe.ranks[r].total_busy_s - sum(per_rank_extra[r].values()) for r in range(n)],
        exposed_comm_s=exposed,
        model_flops=model_flops * replicas,
        hardware_flops=(model_flops + recompute_flops) * replicas,
        gpus=scn.run.train_gpus,
        peak_flops_per_gpu=scn.hardware.peak(scn.train.precision),
        events=pipe.events,
        where=f"{lay.model_copy(update={'dp': scn.dp}).short()} {schedule.name}, {len(mbs)} micro-batches per DP rank",
        trace=pipe.trace,
    )
