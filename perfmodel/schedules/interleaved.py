"""Megatron's interleaved 1F1B (Narayanan et al. 2021 Sec. 2.2.2): v chunks per rank, chunk c on rank r is virtual
stage c * pp + r; the schedule of a run that names none and has vpp > 1."""

from __future__ import annotations

from perfmodel.schedules.base import Op, Schedule


class Interleaved(Schedule):
    """Order and warm-up as megatron-core 0.16.1 runs them (`pipeline_parallel/schedules.py`:
    `get_schedule_table`, `get_pp_rank_microbatches`): micro-batches go through the chunks in groups of
    `group` = microbatch_group_size_per_vp_stage (default pp), the last group taking the remainder; rank r
    warms up with (pp - r - 1) x 2 + (v - 1) x group forwards. Megatron refuses the group sizes and
    micro-batch counts that would stall this order (`rule`); so does `make_schedule`."""

    name = "interleaved"

    def __init__(self, pp: int, microbatches: int, vpp: int = 1, group: int | None = None) -> None:
        super().__init__(pp, microbatches, vpp, group)
        self.group = group or pp

    @classmethod
    def default_for(cls, vpp: int) -> bool:
        return vpp > 1

    @classmethod
    def chunks_per_rank(cls, vpp: int) -> int:
        return vpp

    @classmethod
    def layout_error(cls, pp: int, vpp: int, group: int | None) -> tuple[str, str] | None:
        return ("train.schedule", "interleaved needs vpp > 1") if vpp == 1 else None

    @classmethod
    def rule(cls, pp: int, microbatches: int, group: int | None = None) -> str | None:
        """megatron-core 0.16.1's checks in `forward_backward_pipelining_with_interleaving`: pp <=
        microbatch_group_size_per_vp_stage <= micro-batches, and the last group (micro-batches mod group) is empty
        or holds at least pp micro-batches; with the default group (pp) that is: micro-batches a multiple of pp."""
        n = group or pp
        if not pp <= n <= microbatches:
            if group is None:
                return (f"interleaved needs at least pp = {pp} micro-batches per DP rank, got {microbatches} "
                        "(megatron-core: microbatch_group_size_per_vp_stage must lie in [pp, micro-batches])")
            return (f"microbatch_group_size_per_vp_stage {n} must lie in [pp, micro-batches] = [{pp}, "
                    f"{microbatches}] (megatron-core interleaved schedule)")
        last = microbatches % n
        if 0 < last < pp:
            if group is None:
                return (f"interleaved needs micro-batches per DP rank ({microbatches}) to be a multiple of pp = "
                        f"{pp}: megatron-core refuses a last group of {last} < pp micro-batches (the order would "
                        "stall)")
            return (f"interleaved with microbatch_group_size_per_vp_stage {n}: the last group holds {microbatches} "
                    f"mod {n} = {last} < pp = {pp} micro-batches; megatron-core refuses it (the order would stall)")
        return None

    @classmethod
    def rule_fix(cls, pp: int, microbatches: int) -> str:
        return f", or set train.microbatch_group_size_per_vp_stage: {microbatches}" if microbatches >= pp else ""

    @classmethod
    def runnable_microbatches(cls, pp: int, microbatches: int, group: int | None = None) -> int:
        """Miles rounds dynamic micro-batches up to a multiple of microbatch_group_size_per_vp_stage and fills the
        gap with dummy micro-batches (radixark/miles `miles/backends/megatron_utils/data.py`, get_data_iterator)."""
        n = group or pp
        return max(n, -(-microbatches // n) * n)

    @classmethod
    def inflight_per_stage(cls, rank: int, pp: int, microbatches: int, stages: list[int],
                           group: int | None) -> dict[int, float]:
        """Megatron-core's schedule runs (pp - r - 1) x 2 + (v - 1) x g warm-up forwards
        (megatron/core/pipeline_parallel/schedules.py; g = microbatch_group_size_per_vp_stage, default pp), and one
        more forward precedes the first backward, so rank r holds min(m v, 2(pp - r - 1) + (v - 1) g + 1)
        chunk-micro-batches, forward k on chunk (k // g) % v. On rank 0 that is pp v + pp - 1 chunks of L/(pp v)
        layers, i.e. L layers x (1 + (pp - 1)/(pp v)): Megatron's `interleaved_schedule_memory_penalty`
        (theoretical_memory_usage.py), after Narayanan et al. 2021 Sec. 2.2.2."""
        v = len(stages)
        g = group or pp
        n = min(microbatches * v, 2 * (pp - rank - 1) + (v - 1) * g + 1)
        counts = {s: 0.0 for s in stages}
        for k in range(n):
            counts[stages[(k // g) % v]] += 1
        return counts

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

    def forward_order(self) -> list[tuple[int, int]]:
        return self._order(False)

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
