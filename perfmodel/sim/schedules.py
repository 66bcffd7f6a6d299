"""Pipeline schedules as pluggable classes: each says which virtual stage a rank's chunk holds and in which
order the rank runs its forward (F), backward (B, or full backward BW) and weight-gradient (W) ops.

The order is static, as in Megatron; the simulator adds the data dependencies. Zero-bubble schedules split the
backward into B and W and let W fill the waits (`defer_w`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

OpKind = Literal["F", "B", "W", "BW"]


@dataclass(frozen=True, slots=True)
class Op:
    kind: OpKind
    mb: int
    chunk: int  # model chunk on this rank (0 .. chunks-1)


class Schedule:
    """Base: one chunk per rank, virtual stage == rank, plain 1F1B (PipeDream-Flush)."""

    name: ClassVar[str] = "1f1b"
    split_backward: ClassVar[bool] = False  # B and W as separate ops
    defer_w: ClassVar[bool] = False  # W may fill waits (zero bubble)
    overlaps_ep_comm: ClassVar[bool] = False  # F&B pairs hide the EP all-to-all (DualPipe)
    greedy: ClassVar[bool] = False  # False: run rank_ops in order; True: pick ready ops by priority

    def inflight_limit(self, rank: int) -> int:
        return 1 << 30

    def __init__(self, pp: int, microbatches: int, vpp: int = 1) -> None:
        self.pp = pp
        self.m = microbatches
        self.vpp = vpp

    @property
    def chunks(self) -> int:
        return 1

    @property
    def virtual_stages(self) -> int:
        return self.pp * self.chunks

    def virtual_stage(self, rank: int, chunk: int) -> int:
        return rank

    def rank_ops(self, rank: int) -> list[Op]:
        warmup = min(self.pp - rank - 1, self.m)
        ops: list[Op] = [Op("F", i, 0) for i in range(warmup)]
        bw = "B" if self.split_backward else "BW"
        for i in range(self.m - warmup):
            ops.append(Op("F", warmup + i, 0))
            ops.append(Op(bw, i, 0))
            if self.split_backward and not self.defer_w:
                ops.append(Op("W", i, 0))
        for i in range(self.m - warmup, self.m):
            ops.append(Op(bw, i, 0))
            if self.split_backward and not self.defer_w:
                ops.append(Op("W", i, 0))
        if self.split_backward and self.defer_w:
            ops.extend(Op("W", i, 0) for i in range(self.m))  # run early whenever the rank would wait
        return ops


class OneFOneB(Schedule):
    name = "1f1b"


class Interleaved(Schedule):
    """Megatron's interleaved 1F1B: v chunks per rank, chunk c on rank r is virtual stage c * pp + r.

    Order and warm-up as megatron-core 0.16.1 runs them (`pipeline_parallel/schedules.py`:
    `get_schedule_table`, `get_pp_rank_microbatches`): micro-batches go through the chunks in groups of
    `group` = microbatch_group_size_per_vp_stage (default pp), the last group taking the remainder; rank r
    warms up with (pp - r - 1) x 2 + (v - 1) x group forwards. Megatron refuses the group sizes and
    micro-batch counts that would stall this order (`interleaved_rule`); so does `make_schedule`."""

    name = "interleaved"

    def __init__(self, pp: int, microbatches: int, vpp: int = 1, group: int | None = None) -> None:
        super().__init__(pp, microbatches, vpp)
        self.group = group or pp

    @property
    def chunks(self) -> int:
        return self.vpp

    def virtual_stage(self, rank: int, chunk: int) -> int:
        return chunk * self.pp + rank

    def _order(self, backward: bool) -> list[tuple[int, int]]:
        seq: list[tuple[int, int]] = []
        n = self.group
        for start in range(0, self.m, n):
            last = start + n >= self.m  # the last group takes the remainder (get_schedule_table)
            group = range(start, self.m if last else start + n)
            chunks = range(self.vpp - 1, -1, -1) if backward else range(self.vpp)
            for c in chunks:
                seq.extend((mb, c) for mb in group)
            if last:
                break
        return seq

    def rank_ops(self, rank: int) -> list[Op]:
        fwd, bwd = self._order(False), self._order(True)
        total = len(fwd)
        warmup = min(total, (self.pp - rank - 1) * 2 + (self.vpp - 1) * self.group)
        ops = [Op("F", mb, c) for mb, c in fwd[:warmup]]
        b = 0
        for mb, c in fwd[warmup:]:
            ops.append(Op("F", mb, c))
            ops.append(Op("BW", *bwd[b]))
            b += 1
        ops.extend(Op("BW", mb, c) for mb, c in bwd[b:])
        return ops


class ZeroBubbleH1(Schedule):
    """ZB-H1 (Qi et al. 2024, arXiv 2401.10241): 1F1B order with B and W split; W fills the waits, which cuts
    the 1F1B bubble to (p-1)(F+B-2W) at 1F1B's activation memory."""

    name = "zb-h1"
    split_backward = True
    defer_w = True


class DualPipeV(Schedule):
    """DualPipeV (DeepSeek / Sea AI Lab, "cut-in-half" DualPipe): each rank holds two chunks in a V, virtual
    stages r and 2p-1-r, so the first and last stages sit on rank 0 and the turn at stage p-1 -> p needs no
    transfer. Ops: the V-shaped forward/backward with split W deferred into waits, and F&B pairs that overlap
    the EP all-to-all of one micro-batch with the compute of another (deepseek-ai/DualPipe README)."""

    name = "dualpipev"
    split_backward = True
    defer_w = True
    overlaps_ep_comm = True

    @property
    def chunks(self) -> int:
        return 2

    def virtual_stage(self, rank: int, chunk: int) -> int:
        return rank if chunk == 0 else 2 * self.pp - 1 - rank

    greedy = True  # ops picked by readiness and priority (B before F, later leg first), not a fixed list

    def inflight_limit(self, rank: int) -> int:
        # DualPipe keeps PP+1 micro-batches of activations per device (README table); a chunk is half a rank's
        # layers, so count in chunk activations.
        return 2 * (self.pp + 1)

    def rank_ops(self, rank: int) -> list[Op]:
        ops = [Op("F", i, c) for c in (0, 1) for i in range(self.m)]
        ops += [Op("B", i, c) for c in (1, 0) for i in range(self.m)]
        ops += [Op("W", i, c) for c in (1, 0) for i in range(self.m)]
        return ops


class DualPipe(DualPipeV):
    """DualPipe proper runs two mirrored pipelines over pp ranks (pp even); with the same F&B overlap its
    bubble equals DualPipeV's (deepseek-ai/DualPipe README table). Modeled through the V placement."""

    name = "dualpipe"


SCHEDULES: dict[str, type[Schedule]] = {
    cls.name: cls for cls in (OneFOneB, Interleaved, ZeroBubbleH1, DualPipeV, DualPipe)
}


def interleaved_rule(pp: int, microbatches: int, group: int | None = None) -> str | None:
    """Why megatron-core 0.16.1 refuses an interleaved run (None when it runs it). Its checks in
    `forward_backward_pipelining_with_interleaving`: pp <= microbatch_group_size_per_vp_stage <= micro-batches,
    and the last group (micro-batches mod group) is empty or holds at least pp micro-batches; with the default
    group (pp) that is: micro-batches a multiple of pp."""
    n = group or pp
    if not pp <= n <= microbatches:
        if group is None:
            return (f"interleaved needs at least pp = {pp} micro-batches per DP rank, got {microbatches} "
                    "(megatron-core: microbatch_group_size_per_vp_stage must lie in [pp, micro-batches])")
        return (f"microbatch_group_size_per_vp_stage {n} must lie in [pp, micro-batches] = [{pp}, {microbatches}] "
                "(megatron-core interleaved schedule)")
    last = microbatches % n
    if 0 < last < pp:
        if group is None:
            return (f"interleaved needs micro-batches per DP rank ({microbatches}) to be a multiple of pp = {pp}: "
                    f"megatron-core refuses a last group of {last} < pp micro-batches (the order would stall)")
        return (f"interleaved with microbatch_group_size_per_vp_stage {n}: the last group holds {microbatches} mod "
                f"{n} = {last} < pp = {pp} micro-batches; megatron-core refuses it (the order would stall)")
    return None


def dualpipe_rule(name: str, pp: int, microbatches: int) -> str | None:
    """Why deepseek-ai/DualPipe refuses a run (None when it runs it): `DualPipe.step` asserts an even pp and an
    even number of micro-batches >= 2 pp; `DualPipeV.step` asserts micro-batches >= 2 pp."""
    if name == "dualpipe" and pp % 2:
        return f"dualpipe needs an even pp, got {pp}; use dualpipev"
    if microbatches < 2 * pp:
        return (f"{name} needs at least 2 x pp = {2 * pp} micro-batches per DP rank, got {microbatches} "
                "(DualPipe's step())")
    if name == "dualpipe" and microbatches % 2:
        return f"dualpipe needs an even number of micro-batches per DP rank, got {microbatches} (two half-batches)"
    return None


def schedule_rule(name: str, pp: int, microbatches: int, group: int | None = None) -> str | None:
    """Why the framework that owns schedule `name` would refuse these micro-batches (None when it runs them)."""
    if name == "interleaved":
        return interleaved_rule(pp, microbatches, group)
    if name in ("dualpipe", "dualpipev"):
        return dualpipe_rule(name, pp, microbatches)
    return None  # 1F1B and ZB-H1 run any count (fewer than pp micro-batches just leave ranks idle)


def runnable_microbatches(name: str, pp: int, microbatches: int, group: int | None = None) -> int:
    """The micro-batch count a framework pads a packed batch to so its schedule runs it: Miles rounds dynamic
    micro-batches up to a multiple of microbatch_group_size_per_vp_stage and fills the gap with dummy
    micro-batches (radixark/miles `miles/backends/megatron_utils/data.py`, get_data_iterator); for DualPipe(V)
    the count is raised to its minimum (2 pp, even for DualPipe)."""
    if name == "interleaved":
        n = group or pp
        return max(n, -(-microbatches // n) * n)
    if name in ("dualpipe", "dualpipev"):
        m = max(2 * pp, microbatches)
        return m + (m % 2 if name == "dualpipe" else 0)
    return microbatches


class ScheduleError(ValueError):
    """A schedule asked for a layout its framework refuses."""


def make_schedule(name: str, pp: int, microbatches: int, vpp: int = 1, group: int | None = None) -> Schedule:
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; valid: {', '.join(SCHEDULES)}")
    why = schedule_rule(name, pp, microbatches, group)
    if why:
        raise ScheduleError(why)
    if name == "interleaved":
        return Interleaved(pp, microbatches, vpp, group)
    return SCHEDULES[name](pp, microbatches, vpp)


class ForwardOnly(Schedule):
    """Forward passes only (log-prob recomputation): the wrapped schedule's placement, its forward order."""

    def __init__(self, inner: Schedule) -> None:
        super().__init__(inner.pp, inner.m, inner.vpp)
        self.inner = inner
        self.name = f"{inner.name}-forward-only"  # type: ignore[misc]

    @property
    def chunks(self) -> int:
        return self.inner.chunks

    def virtual_stage(self, rank: int, chunk: int) -> int:
        return self.inner.virtual_stage(rank, chunk)

    def rank_ops(self, rank: int) -> list[Op]:
        if isinstance(self.inner, Interleaved):
            return [Op("F", mb, c) for mb, c in self.inner._order(False)]
        return [Op("F", mb, c) for c in range(self.chunks) for mb in range(self.m)]
