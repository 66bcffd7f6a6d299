"""The sub-phases of one RL step outside the simulated rollout, log-prob passes, training and weight update: what a
framework does between them (docs/rl-phases.md has each one, per framework, with its source).

Each is a small formula over the step's samples and bytes, the hardware's links and the stack's RL knobs
(`stacks/<framework>.yaml`, `perfmodel/inputs/stack.py`):

- `reward_tail_s`: rewards run on the rollout's host as each response returns (Miles `generate_and_rm`, NeMo-RL's
  environment workers, verl's reward loop, OpenRLHF's remote reward): hidden under generation except the last
  response's, and whatever all of them together take beyond the rollout (one event loop runs them in turn).
- `data_to_trainer_s`: the rollout's samples converted, normalized, scheduled and moved to the trainer (Ray object
  store, DataProto dispatch): per sample host work plus the bytes per token at a serialization rate.
- `weight_restore_s`, `weight_backup_s`: the local weights copied from / to pinned host memory over the host link
  around the log-prob passes and after training (Miles `_switch_model` and `weights_backuper`, NeMo-RL
  `prepare_for_lp_inference`).
- `advantages_s`: GRPO group normalization / GAE: HBM passes over the response tokens on the GPU, plus host time
  per token where the framework computes them on the CPU.
- `checkpoint_s`: weights and optimizer state written to the shared filesystem every `rl.checkpoint_every` steps,
  spread over the steps.
- `comm_reinit_s`: a colocated trainer that sleeps destroys its NCCL/RCCL process groups and re-creates them at
  wake-up (Miles `sleep` -> `destroy_process_groups`, `wake_up` -> `reload_process_groups`); PyTorch creates each
  group's communicator lazily, at its first collective, so the first forward pass after the wake pays one
  communicator per group it uses, stage after stage (a stage reaches its first collective when its first
  micro-batch arrives), inside the log-prob timer; training then creates the gradient groups only it uses.
- the stack's fixed driver work per step (`rl_step_host_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.cost.comm import host_copy_s
from perfmodel.cost.compute import memory_bound_time_s
from perfmodel.cost.memory.training import memoized_training_memory
from perfmodel.cost.serve.weight_update import DISK_WRITE_BYTES_PER_S
from perfmodel.inputs.scenario import Scenario
from perfmodel.memo import Memo

ADVANTAGE_HBM_BYTES_PER_TOKEN = 32.0
"""Assumption: the advantage computation reads and writes about eight fp32 values per response token (log-probs,
reference log-probs or KL, rewards, values, advantages, returns: Miles loss.py::compute_advantages_and_returns)."""
CHECKPOINT_BYTES_PER_PARAM = 2.0 + 12.0
"""Megatron's distributed checkpoint: BF16 weights plus the FP32 main parameters and two Adam moments."""


@dataclass(frozen=True, slots=True)
class SubPhase:
    """One sub-phase of an RL step: its name, seconds on the step's critical path, the phase timer that holds it
    (rollout, log_probs, ref_log_probs, train, weight_update; `other` when no phase timer does) and what it
    scales with."""

    name: str
    seconds: float
    phase: str
    scales_with: str


def reward_tail_s(scn: Scenario, rollout_time_s: float) -> float:
    rl = scn.run.rl
    return rl.reward_host_s + max(0.0, rl.responses_per_step * rl.reward_host_s - rollout_time_s)


def data_to_trainer_s(scn: Scenario, samples: int, tokens: int) -> float:
    st = scn.stack
    return samples * st.rl_sample_host_s + tokens * st.rl_token_bytes / st.rl_host_bytes_per_s


def weight_copy_s(scn: Scenario, memo: Memo | None = None) -> float:
    """One copy of a training GPU's local weights (the worst pipeline rank) between the GPU and pinned host memory."""
    return host_copy_s(scn.hardware, memoized_training_memory(scn, memo if memo is not None else Memo()).weights_bytes)


def weight_restore_s(scn: Scenario, copy_s: float | None = None) -> float:
    """Host -> GPU before a log-prob pass; 0 unless the stack restores."""
    if not scn.stack.rl_weight_restore:
        return 0.0
    return weight_copy_s(scn) if copy_s is None else copy_s


def weight_backup_s(scn: Scenario, copy_s: float | None = None) -> float:
    """GPU -> host after training; 0 unless the stack backs the weights up."""
    if not scn.stack.rl_weight_backup:
        return 0.0
    return weight_copy_s(scn) if copy_s is None else copy_s


def advantages_s(scn: Scenario, response_tokens_per_gpu: float, response_tokens: int) -> float:
    gpu = memory_bound_time_s(scn.hardware, response_tokens_per_gpu * ADVANTAGE_HBM_BYTES_PER_TOKEN)
    return gpu + response_tokens * scn.stack.rl_advantage_token_s


def checkpoint_s(scn: Scenario) -> float:
    every = scn.run.rl.checkpoint_every
    if not every:
        return 0.0
    return scn.model.total_params() * CHECKPOINT_BYTES_PER_PARAM / DISK_WRITE_BYTES_PER_S / every


def forward_groups(scn: Scenario) -> int:
    """Process groups of more than one rank a pipeline stage's forward pass collects over: tensor parallel
    (sequence-parallel gathers, vocab-parallel cross-entropy), context parallel (KV gathers), expert parallel
    (dispatch) and expert tensor parallel."""
    lay = scn.layout
    return sum(size > 1 for size in (lay.tp, lay.cp, lay.ep, lay.etp))


def train_only_groups(scn: Scenario) -> int:
    """Groups training adds to the forward's: the dense gradients' data-parallel (x context-parallel) group, the
    experts' data-parallel group and the model-parallel group of the gradient-norm all-reduce."""
    lay = scn.layout
    stage_gpus = scn.run.gpus // lay.pp
    return sum(size > 1 for size in (scn.dp * lay.cp, stage_gpus // (lay.ep * lay.etp), scn.run.gpus // scn.dp))


def comm_reinit_s(scn: Scenario) -> tuple[float, float]:
    """(in the first forward pass after the wake, in training): communicators a sleeping trainer re-creates. The
    forward's groups one stage after another, plus the pipeline's p2p group (every stage posts its first receive
    at once); training's gradient groups at its end, on every stage at once. (0, 0) unless colocated with a
    memory saver and a stack that destroys its groups (rl_comm_init_s > 0)."""
    st, rl = scn.stack, scn.run.rl
    if not (st.rl_comm_init_s and st.memory_saver and rl.placement == "colocated"):
        return 0.0, 0.0
    pp = scn.layout.pp
    first_pass = (pp * forward_groups(scn) + (pp > 1)) * st.rl_comm_init_s
    return first_pass, train_only_groups(scn) * st.rl_comm_init_s


@dataclass(frozen=True, slots=True)
class TrainPathExtras:
    """The sub-phases on the training side's path (before and after the passes), in the order they run."""

    data_to_trainer_s: float
    ref_restore_s: float
    actor_restore_s: float
    advantages_s: float
    weight_backup_s: float
    comm_init_first_pass_s: float = 0.0  # inside the first log-prob pass's timer (comm_reinit_s)
    comm_init_train_s: float = 0.0  # inside the training timer
    comm_init_critic_s: float = 0.0  # PPO: the critic's own groups (its value pass and update), in critic_train

    @property
    def before_passes_s(self) -> float:
        return self.data_to_trainer_s

    @property
    def total_s(self) -> float:
        return (self.data_to_trainer_s + self.ref_restore_s + self.actor_restore_s + self.advantages_s
                + self.weight_backup_s + self.comm_init_s)

    @property
    def comm_init_s(self) -> float:
        return self.comm_init_first_pass_s + self.comm_init_train_s + self.comm_init_critic_s

    @property
    def outside_timers_s(self) -> float:
        """What no phase timer holds (the step's `other`)."""
        return self.total_s - self.comm_init_s

    @property
    def moves_s(self) -> float:
        """What goes over the host link (the breakdown's offload)."""
        return self.ref_restore_s + self.actor_restore_s + self.weight_backup_s


def train_path_extras(scn: Scenario, samples: int, tokens: int, response_tokens: int,
                      copy_s: float | None = None) -> TrainPathExtras:
    """`copy_s`: `weight_copy_s(scn)` when the caller has it (a sweep memoizes it per training layout)."""
    st = scn.stack
    if copy_s is None:
        copy_s = weight_copy_s(scn) if st.rl_weight_restore or st.rl_weight_backup else 0.0
    restore = weight_restore_s(scn, copy_s)
    ref = scn.run.rl.log_probs.ref_model
    # tokens a training GPU holds: its DP share, split over CP (the last pipeline stage computes the advantages)
    per_gpu = response_tokens / (scn.dp * scn.layout.cp)
    first_pass, train = comm_reinit_s(scn)
    return TrainPathExtras(
        data_to_trainer_s=data_to_trainer_s(scn, samples, tokens),
        ref_restore_s=restore if ref else 0.0,
        actor_restore_s=restore,
        advantages_s=advantages_s(scn, per_gpu, response_tokens),
        weight_backup_s=weight_backup_s(scn, copy_s),
        comm_init_first_pass_s=first_pass,
        comm_init_train_s=train,
        comm_init_critic_s=first_pass + train if scn.run.rl.algorithm == "ppo" else 0.0,
    )
