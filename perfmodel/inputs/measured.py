"""What a validation case measured: the metric names `perfmodel validate` scores (docs/validation-cases.md,
docs/serving.md), shared by training / RL cases and serving cases."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

TRAINER_METRICS = ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "log_probs_time_s", "train_time_s",
                   "train_tokens_per_s")


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

    def measures_the_trainer(self) -> bool:
        """A figure of the run's training itself (its step, throughput, training or log-prob phase): what says its
        trainer ran as the case states it. A rollout-, serving- or weight-update-only case may carry a placeholder
        training section (batch and lengths not published) that never ran."""
        return any(getattr(self, name) is not None for name in TRAINER_METRICS)

    def items(self) -> list[tuple[str, float]]:
        return [(k, v) for k, v in self.model_dump().items() if v is not None]
