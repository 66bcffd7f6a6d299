"""Megatron's EP all-to-all overlap (`--overlap-moe-expert-parallel-comm`, Megatron-Bridge `moe_a2a_overlap`): the
interleaved 1F1B order (no pipelining at pp 1) whose 1F1B steps each run the forward of one micro-batch and the
backward of another together, the EP dispatch and combine of each under the other's compute (megatron-core
`model_parallel_config.py`: "Overlap EP A2A communications with independent computations of different micro-batches
in 1f1b phase"; `pipeline_parallel/schedules.py`: one extra warm-up forward "to ensure the forward and backward
computations are independent in all 1f1b steps", `combined_1f1b_schedule_for_no_pipelining` at pp 1). The pair is
the engine's "FB" op, as DualPipe's F&B (sim/pipeline.py)."""

from __future__ import annotations

from perfmodel.schedules.base import Op
from perfmodel.schedules.interleaved import Interleaved


class Combined1F1B(Interleaved):
    name = "combined-1f1b"

    @classmethod
    def default_for(cls, vpp: int) -> bool:
        return False

    @classmethod
    def layout_error(cls, pp: int, vpp: int, group: int | None) -> tuple[str, str] | None:
        if pp > 1 and vpp == 1:  # megatron-core TransformerConfig: "virtual_pipeline_model_parallel_size must be
            # specified when pipeline_model_parallel_size > 1"
            return "train.schedule", (f"{cls.name} (EP all-to-all overlap) needs vpp > 1 when pp > 1, as "
                                      "megatron-core requires")
        if pp == 1 and group is not None:
            return ("train.microbatch_group_size_per_vp_stage",
                    "applies to a pipeline (pp > 1) only; remove it")
        return None

    @classmethod
    def run_error(cls, ep: int, recompute: str, recomputed: frozenset[str]) -> tuple[str, str] | None:
        """megatron-core's asserts for overlap_moe_expert_parallel_comm (transformer_config.py): expert parallelism,
        no full recompute, no recompute of the MoE layer."""
        if ep == 1:
            return "train.schedule", f"{cls.name} overlaps the EP all-to-all: it needs ep > 1"
        if recompute == "full":
            return "train.recompute", f"megatron-core refuses full recompute with {cls.name} (EP all-to-all overlap)"
        if "moe" in recomputed:
            return "train.recompute_modules", f"megatron-core refuses moe recompute with {cls.name}; remove moe"
        return None

    @classmethod
    def rule(cls, pp: int, microbatches: int, group: int | None = None) -> str | None:
        return super().rule(pp, microbatches, group) if pp > 1 else None

    @classmethod
    def runnable_microbatches(cls, pp: int, microbatches: int, group: int | None = None) -> int:
        return super().runnable_microbatches(pp, microbatches, group) if pp > 1 else microbatches

    @classmethod
    def warmup(cls, rank: int, pp: int, vpp: int, group: int) -> int:
        """Interleaved 1F1B's warm-up forwards plus the extra one (none without a pipeline, then the extra one)."""
        return ((pp - rank - 1) * 2 + (vpp - 1) * group if pp > 1 else 0) + 1

    @classmethod
    def inflight_per_stage(cls, rank: int, pp: int, microbatches: int, stages: list[int],
                           group: int | None) -> dict[int, float]:
        """The warm-up's forwards, one more than interleaved 1F1B's, and no more: a pair runs its forward and its
        backward layer by layer in opposite orders (megatron-core models/common/model_chunk_schedule_plan.py:
        "Phase 1: forward_layer[0] + backward_layer[3]" ...), so the forward's activations grow as the backward
        frees the other micro-batch's; the peak is interleaved 1F1B's (one layer more at most, not counted)."""
        v = len(stages)
        g = group or pp
        n = min(microbatches * v, cls.warmup(rank, pp, v, g))
        counts = {s: 0.0 for s in stages}
        for k in range(n):
            counts[stages[(k // g) % v]] += 1
        return counts

    def rank_ops(self, rank: int) -> list[Op]:
        fwd, bwd = self._order(False), self._order(True)
        warmup = min(len(fwd), self.warmup(rank, self.pp, self.vpp, self.group))
        ops = [Op("F", mb, c) for mb, c in fwd[:warmup]]
        for b, (mb, c) in enumerate(fwd[warmup:]):
            ops.append(Op("FB", mb, c, *bwd[b]))
        ops.extend(Op("BW", mb, c) for mb, c in bwd[len(fwd) - warmup:])
        return ops
