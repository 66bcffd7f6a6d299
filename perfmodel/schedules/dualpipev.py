"""DualPipeV (DeepSeek / Sea AI Lab, the "cut-in-half" DualPipe of the DeepSeek-V3 report, arXiv 2412.19437
Sec. 3.2.1, and deepseek-ai/DualPipe): each rank holds two chunks in a V, virtual stages r and 2p-1-r, so the first
and the last stage sit on rank 0 (embedding and head both there) and the turn at stage p-1 -> p needs no transfer.
Micro-batches feed both legs of the V; F&B pairs overlap one micro-batch's EP all-to-all with another's compute;
split W is deferred into the waits. Its bubble, with 2p chunks on p ranks, is (p-1)(F&B + B - 3W) (the README's
table, (PP/2-1)(F&B+B-3W) with PP the chunk count): tests/schedules/test_dualpipev.py checks it."""

from __future__ import annotations

from perfmodel.schedules.base import Op, Schedule


class DualPipeV(Schedule):
    name = "dualpipev"
    split_backward = True
    defer_w = True
    overlaps_ep_comm = True
    greedy = True  # ops picked by readiness and priority (B before F, later leg first), not a fixed list
    min_pp = 2  # a V needs two ranks

    @classmethod
    def chunks_per_rank(cls, vpp: int) -> int:
        return 2

    @classmethod
    def stages_on_rank(cls, rank: int, pp: int, stages: int) -> list[int]:
        return sorted({rank, 2 * pp - 1 - rank})

    @classmethod
    def rule(cls, pp: int, microbatches: int, group: int | None = None) -> str | None:
        """`DualPipeV.step` asserts micro-batches >= 2 pp (deepseek-ai/DualPipe)."""
        if microbatches < 2 * pp:
            return (f"{cls.name} needs at least 2 x pp = {2 * pp} micro-batches per DP rank, got {microbatches} "
                    "(DualPipe's step())")
        return None

    @classmethod
    def runnable_microbatches(cls, pp: int, microbatches: int, group: int | None = None) -> int:
        return max(2 * pp, microbatches)  # raised to its minimum

    @classmethod
    def inflight_per_stage(cls, rank: int, pp: int, microbatches: int, stages: list[int],
                           group: int | None) -> dict[int, float]:
        """pp + 1 micro-batches of a half-stage chunk over 2 pp chunks on pp devices (README "PP/2 devices" for PP
        chunks), i.e. pp + 1/2 micro-batches of the rank's layers."""
        return {stages[0]: min(float(microbatches), pp + 0.5)}

    def virtual_stage(self, rank: int, chunk: int) -> int:
        return rank if chunk == 0 else 2 * self.pp - 1 - rank

    def inflight_limit(self, rank: int) -> int:
        # DualPipe keeps PP+1 micro-batches of activations per device (README table); a chunk is half a rank's
        # layers, so count in chunk activations.
        return 2 * (self.pp + 1)

    def rank_ops(self, rank: int) -> list[Op]:
        ops = [Op("F", i, c) for c in (0, 1) for i in range(self.m)]
        ops += [Op("B", i, c) for c in (1, 0) for i in range(self.m)]
        ops += [Op("W", i, c) for c in (1, 0) for i in range(self.m)]
        return ops
