"""One GRPO or PPO step on every rank:

  rollout (rank 0, SGLang) -> broadcast batch -> [PPO: critic values -> GAE -> critic update]
  -> log_probs (Megatron forward-only, old policy) -> gap metrics -> train (policy loss, optimizer step)
  -> gather BF16 weights -> quantize -> engine update

then each rank's measurements are gathered on rank 0, which records the step (step_record.py).
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import TYPE_CHECKING, Any

from executor.backends.local.gc_pauses import GC_PAUSES
from executor.backends.local.step_record import StepClock, record_step

if TYPE_CHECKING:
    from executor.backends.local.kernel_profile import StepProfile
    from executor.backends.local.rank_setup import Driver, RankSetup
    from executor.backends.local.trainer import TrainBatch
    from executor.backends.local.weight_update import WeightUpdateResult


def run_step(setup: RankSetup, driver: Driver | None, rng: random.Random, step: int) -> None:
    """rollout -> broadcast -> log_probs -> train -> gather weights -> engine update; rank 0 records the step."""
    import torch.distributed as dist

    clock = StepClock(time.time())
    gc_start_s = GC_PAUSES.total_s
    data = _rollout_and_broadcast(setup, driver, rng, clock)
    profile = _profile(setup, step)
    with profile or contextlib.nullcontext():
        mine, wu = _train_and_update(setup, driver, data, clock)
    # ---- collect per-rank measurements on rank 0
    gathered: list[Any] = [None] * setup.world if setup.rank == 0 else []
    dist.gather_object(mine, gathered if setup.rank == 0 else None, dst=0)
    step_end = time.time()
    if driver is not None:
        data["gc_step_s"] = GC_PAUSES.total_s - gc_start_s
        record_step(setup, driver, step, data, clock, wu, gathered, step_end)
    if profile is not None:
        profile.write()


def _profile(setup: RankSetup, step: int) -> StepProfile | None:
    """The trainer's phases under torch.profiler when `executor launch --profile` asked for this step
    (kernel_profile.py)."""
    if setup.job.get("profile_step") != step:
        return None
    from executor.backends.local.kernel_profile import StepProfile

    return StepProfile(setup.run_dir, setup.job["run_id"], step, setup.rank, setup.plan.hardware)


def _rollout_and_broadcast(setup: RankSetup, driver: Driver | None, rng: random.Random,
                           clock: StepClock) -> dict[str, Any]:
    """Rank 0 generates and scores the step's batch; every rank receives it."""
    import torch.distributed as dist

    payload: list[Any] = [None]
    if driver is not None:
        payload = [_generate_batch(setup, driver, rng)]
    clock.lap("rollout", "rollout")
    dist.broadcast_object_list(payload, src=0)
    clock.lap("broadcast_batch", "train")
    return payload[0]


def _generate_batch(setup: RankSetup, driver: Driver, rng: random.Random) -> dict[str, Any]:
    """Rank 0: sample prompts, generate with SGLang, reward, group advantages, pack into training rows."""
    import torch

    from executor.backends.local.grpo import group_advantages
    from executor.backends.local.task import reward, sample_prompts
    from executor.backends.local.tokenizer import PAD_ID
    from executor.backends.local.trainer import pack_samples

    rl, options, engine = setup.rl, setup.options, driver.engine
    prompts = sample_prompts(options.task, rng, rl.prompts_per_step)
    expanded = [p for p in prompts for _ in range(rl.samples_per_prompt)]
    gc_before = GC_PAUSES.total_s
    gen_t0 = time.perf_counter()
    gens = engine.generate([p.token_ids for p in expanded], rl.response_tokens.max, options.temperature)
    generate_s = time.perf_counter() - gen_t0
    gc_s = GC_PAUSES.total_s - gc_before
    reward_t0 = time.perf_counter()
    rewards = torch.tensor([reward(g.response_text, p.answer) for g, p in zip(gens, expanded)])
    reward_s = time.perf_counter() - reward_t0
    adv = group_advantages(rewards, rl.samples_per_prompt, options.std_normalize)
    tokens, plen, rlen = pack_samples([p.token_ids for p in expanded], [g.response_ids for g in gens], PAD_ID)
    # one example per prompt (the first of its group), at most 4, for the store
    examples = list(zip(expanded, gens, rewards.tolist()))[:: rl.samples_per_prompt][:4]
    return {
        "tokens": tokens, "prompt_lengths": plen, "response_lengths": rlen, "advantages": adv.tolist(),
        "rollout_log_probs": [g.log_probs for g in gens],
        "rewards": rewards.tolist(), "reward_s": reward_s, "generate_s": generate_s, "gc_s": gc_s,
        "examples": [{"prompt": p.text, "answer": p.answer, "response": g.response_text, "reward": float(r)}
                     for p, g, r in examples],
    }


def _dp_share(setup: RankSetup, data: dict[str, Any]) -> TrainBatch:
    """This DP rank's rows of the broadcast batch."""
    from executor.backends.local.trainer import TrainBatch

    idx = list(range(setup.dp_rank, setup.samples_per_step, setup.dp))
    return TrainBatch(data["tokens"][idx], [data["prompt_lengths"][i] for i in idx],
                      [data["response_lengths"][i] for i in idx], [data["advantages"][i] for i in idx],
                      [data["rollout_log_probs"][i] for i in idx], rewards=[data["rewards"][i] for i in idx])


def _critic_step(setup: RankSetup, local: TrainBatch, times: Any) -> dict[str, float]:
    """PPO: the critic's values over the batch, GAE advantages and returns from them and the outcome rewards (the
    actor's per-token advantages), then the critic's update on the clipped value loss. The last pipeline stage holds
    values and computes every loss; the other stages only pass activations."""
    import torch

    from executor.backends.local.grpo import gae

    critic, opts = setup.critic, setup.options
    values = critic.compute_values(local, times)
    if critic.is_last_stage:
        out = [gae(r, v, opts.gamma, opts.lambd) for r, v in zip(local.rewards, values, strict=True)]
        local.advantages = [a for a, _ in out]
        local.returns = [ret for _, ret in out]
        local.old_values = values
    else:
        local.old_values = local.returns = [torch.zeros(r) for r in local.response_lengths]
    stats = critic.train(local, setup.optimizer_steps, times)
    return {f"critic_{k}": v for k, v in stats.items()} if critic.is_last_stage else {}


def _train_and_update(setup: RankSetup, driver: Driver | None, data: dict[str, Any],
                      clock: StepClock) -> tuple[dict[str, Any], WeightUpdateResult | None]:
    """log_probs, train and the weight push on this rank: returns its measurements and (rank 0) the update's."""
    import torch

    from executor.backends.local.grpo import logprob_gap
    from executor.backends.local.trainer import MicroBatchTimes

    trainer = setup.trainer
    local = _dp_share(setup, data)
    lp_times, train_times, critic_times = MicroBatchTimes(), MicroBatchTimes(), MicroBatchTimes()
    critic_stats: dict[str, float] = {}
    if setup.critic is not None:  # ---- PPO: the critic first (values, GAE, its update)
        critic_stats = _critic_step(setup, local, critic_times)
        clock.lap("critic", "train")
    # ---- old-policy log-probs (Megatron forward only)
    local.old_log_probs = trainer.compute_log_probs(local, lp_times)
    clock.lap("log_probs", "train")
    gap_part = None
    if trainer.is_last_stage:
        g = logprob_gap(local.old_log_probs, local.rollout_log_probs)
        n = len(local)
        gap_part = (g["train_rollout_logprob_abs_diff"] * n, g["train_rollout_kl"] * n, n)
    # ---- train
    if not trainer.is_last_stage:
        local.old_log_probs = [torch.zeros(r) for r in local.response_lengths]
    train_stats = trainer.train(local, setup.optimizer_steps, train_times) | critic_stats
    clock.lap("train", "train")
    # ---- weights -> engine
    tensors = trainer.hf_tensors_on_rank0()
    clock.lap("gather_weights", "train")
    wu = None
    if driver is not None:
        from executor.backends.local.weight_update import push_weights

        wu = push_weights(driver.engine, tensors, setup.rl.rollout.precision, setup.rl.weight_update.mode,
                          setup.arch, setup.run_dir / "hf_update")
    clock.lap("update_engine", "rollout")
    mine = {"rank": setup.rank, "gap": gap_part, "train_stats": train_stats if trainer.is_last_stage else None,
            "lp_times": lp_times, "train_times": train_times, "critic_times": critic_times, "spans": clock.spans,
            "rss": trainer.peak_rss_bytes()}
    return mine, wu
