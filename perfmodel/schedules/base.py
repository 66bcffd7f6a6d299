"""What every pipeline schedule answers: its op order per rank (what the simulator runs), where its chunks sit
(which virtual stages a rank holds, where the embedding and the head live, how many parameter copies a rank
keeps), how many micro-batches of activations each rank holds at its peak, and the rules its framework enforces
on the layout and the micro-batch count. Scenario, parameters, memory and the sweep space ask a schedule class;
nobody compares schedule names.

The base class is plain 1F1B (PipeDream-Flush): one chunk per rank, virtual stage == rank. The order is static,
as in Megatron; the simulator adds the data dependencies. Zero-bubble schedules split the backward into B and W
and let W fill the waits (`defer_w`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

OpKind = Literal["F", "B", "W", "BW", "FB"]


@dataclass(frozen=True, slots=True)
class Op:
    """One op of a rank's order. "FB" is a forward (mb, chunk) and a full backward (b_mb, b_chunk) run as one
    overlapped pair (DualPipe's F&B): it starts when both inputs are there and hands both results on at its end."""

    kind: OpKind
    mb: int
    chunk: int  # model chunk on this rank (0 .. chunks-1)
    b_mb: int = -1  # "FB" only: the backward's micro-batch and chunk
    b_chunk: int = -1


class ScheduleError(ValueError):
    """A schedule asked for a layout its framework refuses."""


REGISTRY: dict[str, type[Schedule]] = {}  # name -> class, filled as each schedule module defines its class


class Schedule:
    """Base: one chunk per rank, virtual stage == rank, plain 1F1B order. A subclass with a `name`, in its own
    module of this package, registers itself (perfmodel/schedules/__init__.py imports every module)."""

    name: ClassVar[str] = ""
    split_backward: ClassVar[bool] = False  # B and W as separate ops
    defer_w: ClassVar[bool] = False  # W may fill waits (zero bubble)
    parameter_copies: ClassVar[int] = 1  # copies of its chunks' parameters a rank keeps (DualPipe: 2)
    min_pp: ClassVar[int] = 1  # the sweep enumerates this schedule from this pipeline size on

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and cls.name:
            REGISTRY[cls.name] = cls

    def __init__(self, pp: int, microbatches: int, vpp: int = 1, group: int | None = None) -> None:
        self.pp = pp
        self.m = microbatches
        self.vpp = vpp
        self.group = group

    # --- layout: class-level, asked before a micro-batch count exists -------------------------------------------

    @classmethod
    def default_for(cls, vpp: int) -> bool:
        """Whether a run that names no schedule gets this one at this vpp."""
        return False

    @classmethod
    def chunks_per_rank(cls, vpp: int) -> int:
        return 1

    @classmethod
    def layout_error(cls, pp: int, vpp: int, group: int | None) -> tuple[str, str] | None:
        """(field, why) when this schedule cannot run the layout at all (None when it can)."""
        if vpp > 1:
            return "train.schedule", (f"{cls.name} runs one chunk per rank; vpp must be 1 (or use "
                                      f"{default_schedule(vpp)})")
        if group is not None:
            return ("train.microbatch_group_size_per_vp_stage",
                    "applies to the interleaved schedule only; remove it or set vpp > 1")
        return None

    @classmethod
    def run_error(cls, ep: int, recompute: str, recomputed: frozenset[str]) -> tuple[str, str] | None:
        """(field, why) when the run's expert parallelism or recompute rules this schedule out (None when not)."""
        return None

    @classmethod
    def stages_on_rank(cls, rank: int, pp: int, stages: int) -> list[int]:
        """Virtual stages rank `rank` holds, of `stages` in all: j * pp + rank (Megatron's placement)."""
        return [j * pp + rank for j in range(stages // pp)]

    @classmethod
    def rule(cls, pp: int, microbatches: int, group: int | None = None) -> str | None:
        """Why this schedule's framework refuses the micro-batch count (None when it runs it). 1F1B and ZB-H1 run
        any count (fewer than pp micro-batches just leave ranks idle)."""
        return None

    @classmethod
    def rule_fix(cls, pp: int, microbatches: int) -> str:
        """What else a user may change when `rule` refuses a count, beyond the batch sizes ('' for nothing)."""
        return ""

    @classmethod
    def runnable_microbatches(cls, pp: int, microbatches: int, group: int | None = None) -> int:
        """The count a framework pads a packed batch to so this schedule runs it."""
        return microbatches

    @classmethod
    def inflight_per_stage(cls, rank: int, pp: int, microbatches: int, stages: list[int],
                           group: int | None) -> dict[int, float]:
        """Micro-batches whose activations each virtual stage of `rank` holds at the rank's peak. 1F1B: rank r
        runs pp - r warm-up forwards, so it holds min(m, pp - r) micro-batches (Narayanan et al. 2021, arXiv
        2104.04473 Sec. 2.2.1: "stashes <= p micro-batches")."""
        return {stages[0]: float(min(microbatches, pp - rank))}

    # --- one instance: the op order of a step ------------------------------------------------------------------

    @property
    def chunks(self) -> int:
        return self.chunks_per_rank(self.vpp)

    @property
    def virtual_stages(self) -> int:
        return self.pp * self.chunks

    def virtual_stage(self, rank: int, chunk: int) -> int:
        return chunk * self.pp + rank  # stages_on_rank's placement, without the list (the engine's hot path)

    def forward_order(self) -> list[tuple[int, int]]:
        """(micro-batch, chunk) of a forward-only pass, in the order a rank runs them."""
        return [(mb, c) for c in range(self.chunks) for mb in range(self.m)]

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


class ForwardOnly(Schedule):
    """Forward passes only (log-prob recomputation): the wrapped schedule's placement, its forward order."""

    def __init__(self, inner: Schedule) -> None:
        super().__init__(inner.pp, inner.m, inner.vpp, inner.group)
        self.inner = inner
        self.name = f"{inner.name}-forward-only"  # type: ignore[misc]

    @property
    def chunks(self) -> int:
        return self.inner.chunks

    def virtual_stage(self, rank: int, chunk: int) -> int:
        return self.inner.virtual_stage(rank, chunk)

    def rank_ops(self, rank: int) -> list[Op]:
        return [Op("F", mb, c) for mb, c in self.inner.forward_order()]


def default_schedule(vpp: int) -> str:
    """The schedule a run that names none gets at this vpp."""
    for name, cls in REGISTRY.items():
        if cls.default_for(vpp):
            return name
    raise LookupError(f"no registered schedule is the default for vpp {vpp}")
