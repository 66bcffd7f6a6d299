"""DualPipe proper (DeepSeek-V3 report Sec. 3.2.1, deepseek-ai/DualPipe): two mirrored pipelines over pp ranks (pp
even); with the same F&B overlap its bubble equals DualPipeV's (the README's table), so it is modeled through the
V placement, but every rank keeps both directions' copies of its chunks ("Parameter 2x") and pp + 1 micro-batches
of a stage's activations spread over its two stages."""

from __future__ import annotations

from perfmodel.schedules.dualpipev import DualPipeV


class DualPipe(DualPipeV):
    name = "dualpipe"
    parameter_copies = 2

    @classmethod
    def layout_error(cls, pp: int, vpp: int, group: int | None) -> tuple[str, str] | None:
        if vpp == 1 and pp % 2:
            return "train.schedule", f"{cls.name} needs an even pp, got {pp}; use {DualPipeV.name}"
        return super().layout_error(pp, vpp, group)

    @classmethod
    def rule(cls, pp: int, microbatches: int, group: int | None = None) -> str | None:
        """`DualPipe.step` asserts an even pp and an even number of micro-batches >= 2 pp."""
        if pp % 2:
            return f"{cls.name} needs an even pp, got {pp}; use {DualPipeV.name}"
        if microbatches < 2 * pp:
            return super().rule(pp, microbatches, group)
        if microbatches % 2:
            return (f"{cls.name} needs an even number of micro-batches per DP rank, got {microbatches} (two "
                    "half-batches)")
        return None

    @classmethod
    def runnable_microbatches(cls, pp: int, microbatches: int, group: int | None = None) -> int:
        m = max(2 * pp, microbatches)
        return m + m % 2

    @classmethod
    def inflight_per_stage(cls, rank: int, pp: int, microbatches: int, stages: list[int],
                           group: int | None) -> dict[int, float]:
        per = min(float(microbatches), (pp + 1) / 2)
        return {s: per * (2 if len(stages) == 1 else 1) for s in stages}
