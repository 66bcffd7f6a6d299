"""DualPipeV (DeepSeek / Sea AI Lab, the "cut-in-half" DualPipe of the DeepSeek-V3 report, arXiv 2412.19437
Sec. 3.2.1, and deepseek-ai/DualPipe): each rank holds two chunks in a V, virtual stages r and 2p-1-r, so the first
and the last stage sit on rank 0 (embedding and head both there) and the turn at stage p-1 -> p needs no transfer.
Each rank runs the eight steps of `DualPipeV.step` (deepseek-ai/DualPipe, dualpipe/dualpipev.py) in their order:
forward pairs F&B run as one op (a forward of one leg and a full backward of the other, their EP all-to-all
hidden under each other's compute), zero-bubble backwards queue their W for the explicit weight steps. Its
bubble, with 2p chunks on p ranks, is the README's (PP/2-1)(F&B+B-3W) with PP = 2p: tests/schedules/
test_dualpipev.py checks the simulated order against it."""

from __future__ import annotations

from collections import deque

from perfmodel.schedules.base import Op, Schedule


class DualPipeV(Schedule):
    name = "dualpipev"
    split_backward = True  # W apart, at the weight steps of its order (never pulled into a wait)
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

    def rank_ops(self, rank: int) -> list[Op]:
        """`DualPipeV.step`'s steps 1-8 for this rank; a backward is full ("BW") unless zero bubble is on for
        it ("B", its W queued, run first-in first-out by the weight steps)."""
        p, m = self.pp, self.m
        ops: list[Op] = []
        next_f, next_b = [0, 0], [0, 0]
        queued_w: deque[Op] = deque()

        def fwd(c: int) -> None:
            ops.append(Op("F", next_f[c], c))
            next_f[c] += 1

        def bwd(c: int, zero_bubble: bool = False) -> None:
            ops.append(Op("B" if zero_bubble else "BW", next_b[c], c))
            if zero_bubble:
                queued_w.append(Op("W", next_b[c], c))
            next_b[c] += 1

        def fwd_bwd(cf: int, cb: int) -> None:
            ops.append(Op("FB", next_f[cf], cf, next_b[cb], cb))
            next_f[cf] += 1
            next_b[cb] += 1

        def weight() -> None:
            ops.append(queued_w.popleft())

        for _ in range(2 * (p - rank - 1)):  # 1: nF0
            fwd(0)
        for _ in range(rank + 1):  # 2: nF0F1
            fwd(0)
            fwd(1)
        for _ in range(p - rank - 1):  # 3: nB1W1F1, zero bubble
            bwd(1, True)
            weight()
            fwd(1)
        for i in range(m - 2 * p + rank + 1):  # 4 (main): nF0B1F1B0
            if i == 0 and rank == p - 1:  # the last rank does not overlap its first pair
                fwd(0)
                bwd(1)
            else:
                fwd_bwd(0, 1)
            fwd_bwd(1, 0)
        for _ in range(p - rank - 1):  # 5: nB1F1B0
            bwd(1)
            fwd_bwd(1, 0)
        zero_bubble = False
        for i in range(rank + 1):  # 6: nB1B0, the second half zero bubble
            if i == (rank + 1) // 2 and rank % 2 == 1:
                zero_bubble = True
            bwd(1, zero_bubble)
            if i == (rank + 1) // 2 and rank % 2 == 0:
                zero_bubble = True
            bwd(0, zero_bubble)
        for _ in range(p - rank - 1):  # 7: nWB0, zero bubble
            weight()
            bwd(0, True)
        while queued_w:  # 8: nW
            weight()
        return ops
