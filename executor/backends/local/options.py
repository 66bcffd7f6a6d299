"""`executor.options` of a plan with `backend: local` (validated with extra="forbid").

The plan itself carries the layout (train.layout), the batch (rl.prompts_per_step x rl.samples_per_prompt,
train.global_batch, train.micro_batch), the response cap (rl.response_tokens.max), the rollout precision
(rl.rollout.precision: fp8 or bf16), the KV pool cap (rl.rollout.max_total_tokens) and the weight update mode
(rl.weight_update.mode: ipc -> update_weights_from_tensor, disk -> update_weights_from_disk). Options hold the rest.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from executor.backends.local.task import TaskName
from executor.watchdog import DEFAULT_FLOOR_S, DEFAULT_MULTIPLE


class LocalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    task: TaskName = Field("add", description="the verifiable task (executor/backends/local/task.py)")
    steps: int = Field(20, ge=1, description="GRPO steps when --steps is not given")
    seed: int = Field(1, ge=0)
    lr: float = Field(1e-3, gt=0, description="Adam learning rate")
    adam_beta1: float = Field(0.9, gt=0, lt=1)
    adam_beta2: float = Field(0.98, gt=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    clip_grad: float = Field(1.0, ge=0)
    temperature: float = Field(1.0, gt=0, description="rollout sampling temperature")
    eps_clip: float = Field(0.2, gt=0)
    eps_clip_high: float = Field(0.28, gt=0)
    use_tis: bool = Field(False, description="truncated importance sampling (Miles --use-tis)")
    tis_clip: float = Field(2.0, gt=0)
    std_normalize: bool = Field(True, description="divide group-centred rewards by the group std")
    # PPO (rl.algorithm: ppo), with Miles' defaults: the critic trains at the actor's lr unless critic_lr is set
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount (Miles --gamma)")
    lambd: float = Field(1.0, ge=0, le=1, description="GAE lambda (Miles --lambd)")
    value_clip: float = Field(0.2, gt=0, description="clip of the value loss (Miles --value-clip)")
    critic_lr: float | None = Field(None, gt=0, description="critic Adam learning rate (Miles --critic-lr)")
    torch_threads: int = Field(0, ge=0, description="threads per trainer process; 0: cores / processes")
    engine_start_timeout_s: float = Field(300, gt=0)
    watchdog_multiple: float = Field(DEFAULT_MULTIPLE, gt=0, description="stalled after this many predicted steps "
                                     "without a line of progress (executor/watchdog.py)")
    watchdog_floor_s: float = Field(DEFAULT_FLOOR_S, gt=0, description="but never before this many seconds")
    checkpoint_every: int = Field(5, ge=0, description="a checkpoint (model, optimizer, RNG, prompt cursor) every this "
                                  "many steps and at the last; `executor launch --resume RUN` continues from the "
                                  "newest complete one; 0: none")
    checkpoints_kept: int = Field(2, ge=1, description="complete checkpoints kept (older ones are removed)")
