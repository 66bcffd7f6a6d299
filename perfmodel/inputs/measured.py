"""What a validation case measured: the metric names `perfmodel validate` scores (docs/validation-cases.md,
docs/serving.md), shared by training / RL cases and serving cases."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Measured(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    step_time_s: float | None = Field(None, gt=0)
    tokens_per_s_per_gpu: float | None = Field(None, gt=0)
    tflops_per_gpu: float | None = Field(None, gt=0)
    mfu: float | None = Field(None, gt=0, le=1)
    rollout_time_s: float | None = Field(None, gt=0)
    log_probs_time_s: float | None = Field(None, gt=0)
    train_time_s: float | None = Field(None, gt=0)
    weight_update_time_s: float | None = Field(None, gt=0)
    rollout_tokens_per_gpu_s: float | None = Field(None, gt=0)
    train_tokens_per_s: float | None = Field(None, gt=0)
    # kind: serve (a serving benchmark; perfmodel/inputs/serve.py)
    output_tokens_per_s_per_gpu: float | None = Field(None, gt=0)
    total_tokens_per_s_per_gpu: float | None = Field(None, gt=0)
    ttft_median_ms: float | None = Field(None, gt=0)
    ttft_mean_ms: float | None = Field(None, gt=0)
    tpot_median_ms: float | None = Field(None, gt=0)
    tpot_mean_ms: float | None = Field(None, gt=0)

    def items(self) -> list[tuple[str, float]]:
        return [(k, v) for k, v in self.model_dump().items() if v is not None]
