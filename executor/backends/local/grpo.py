"""GRPO and PPO math as Miles does it (miles/utils/ppo_utils.py, loss_hub/losses.py), on lists of per-sample
tensors.

- advantages: rewards normalized inside each group of samples of one prompt: (r - mean) / (std + 1e-6),
  std with Bessel's correction (torch.std), broadcast to every response token;
- policy loss: PPO clipped ratio with eps_clip 0.2 below and eps_clip_high 0.28 above ("clip-higher");
- optional truncated importance sampling (TIS): the per-token loss is multiplied by
  clamp(exp(old_log_probs - rollout_log_probs), tis_clip_low, tis_clip);
- reductions are `sum_of_sample_mean`: each sample's token mean, summed over samples;
- the train/rollout gap: `train_rollout_logprob_abs_diff` = sample mean of |old - rollout| and
  `train_rollout_kl` = k3 estimate of KL(rollout || train) at the sampled tokens, clamped to [-10, 10] per token.
  Both are reported per step as the mean over samples (Miles' per-step value: sum_of_sample_mean / samples).
- PPO (`--advantage-estimator ppo`): the outcome reward sits on a sample's last response token; GAE turns it and the
  critic's values into per-token advantages and returns (gamma, lambda: Miles --gamma, --lambd, both 1.0 by
  default); the critic regresses the returns with the clipped value loss (--value-clip 0.2).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

EPS_CLIP = 0.2
EPS_CLIP_HIGH = 0.28


def group_advantages(
    rewards: torch.Tensor, group_size: int, std_normalize: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Per-sample advantages. `rewards` is [groups * group_size], samples of one prompt adjacent."""
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    grouped = rewards.float().view(-1, group_size)
    centered = grouped - grouped.mean(dim=-1, keepdim=True)
    if std_normalize and group_size > 1:
        centered = centered / (grouped.std(dim=-1, keepdim=True) + eps)
    return centered.reshape(-1)


def sum_of_sample_mean(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """Sum over samples of each sample's token mean (an empty sample counts 0)."""
    if not values:
        return torch.zeros(())
    return torch.stack([v.float().sum() / max(v.numel(), 1) for v in values]).sum()


def approx_kl_low_var(log_probs: torch.Tensor, log_probs_base: torch.Tensor) -> torch.Tensor:
    """Miles `compute_approx_kl(log_probs, log_probs_base, "low_var_kl")`: k3 with a per-token clamp to [-10, 10]."""
    log_ratio = -(log_probs.float() - log_probs_base.float())
    kl = log_ratio.exp() - 1 - log_ratio
    return kl.clamp(min=-10, max=10)


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    eps_clip: float = EPS_CLIP,
    eps_clip_high: float = EPS_CLIP_HIGH,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped policy-gradient loss and clip indicator (Miles `compute_policy_loss`)."""
    ppo_kl = old_log_probs - log_probs
    ratio = (-ppo_kl).exp()
    loss_unclipped = -ratio * advantages
    loss_clipped = -ratio.clamp(1 - eps_clip, 1 + eps_clip_high) * advantages
    return torch.maximum(loss_unclipped, loss_clipped), torch.gt(loss_clipped, loss_unclipped).float()


def tis_weights(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, clip_low: float = 0.0, clip_high: float = 2.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated importance-sampling weights and the fraction of tokens that were truncated."""
    ratio = (old_log_probs.float() - rollout_log_probs.float()).exp()
    clipped = ratio.clamp(min=clip_low, max=clip_high)
    return clipped, (clipped != ratio).float()


def logprob_gap(train_log_probs: Sequence[torch.Tensor], rollout_log_probs: Sequence[torch.Tensor]) -> dict[str, float]:
    """`train_rollout_logprob_abs_diff` and `train_rollout_kl`, mean over samples, NaN/inf tokens counted as 0."""
    n = len(train_log_probs)
    if n == 0:
        return {"train_rollout_logprob_abs_diff": 0.0, "train_rollout_kl": 0.0}
    abs_diff = [torch.nan_to_num((t.float() - r.float()).abs(), nan=0.0, posinf=0.0, neginf=0.0)
                for t, r in zip(train_log_probs, rollout_log_probs, strict=True)]
    kl = [torch.nan_to_num(approx_kl_low_var(r, t), nan=0.0, posinf=0.0, neginf=0.0)
          for t, r in zip(train_log_probs, rollout_log_probs, strict=True)]
    return {
        "train_rollout_logprob_abs_diff": float(sum_of_sample_mean(abs_diff)) / n,
        "train_rollout_kl": float(sum_of_sample_mean(kl)) / n,
    }


def grpo_sample_losses(
    log_probs: Sequence[torch.Tensor],
    old_log_probs: Sequence[torch.Tensor],
    rollout_log_probs: Sequence[torch.Tensor],
    advantages: Sequence[float | torch.Tensor],
    use_tis: bool,
    eps_clip: float = EPS_CLIP,
    eps_clip_high: float = EPS_CLIP_HIGH,
    tis_clip: float = 2.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`sum_of_sample_mean` of the per-token GRPO loss over a micro-batch of samples, plus detached stats."""
    losses, clipfracs, ppo_kls, tis_fracs = [], [], [], []
    for lp, old, roll, adv in zip(log_probs, old_log_probs, rollout_log_probs, advantages, strict=True):
        # GRPO: one advantage per sample, on every token; PPO: GAE's per-token advantages
        adv_t = (adv.to(lp.device).float() if isinstance(adv, torch.Tensor)
                 else torch.full_like(lp, float(adv), dtype=torch.float32))
        loss, clip = policy_loss(lp.float(), old.float(), adv_t, eps_clip, eps_clip_high)
        if use_tis:
            w, frac = tis_weights(old, roll, 0.0, tis_clip)
            loss = loss * w
            tis_fracs.append(frac)
        losses.append(loss)
        clipfracs.append(clip)
        ppo_kls.append((old.float() - lp.float()).detach())
    stats = {"pg_clipfrac": sum_of_sample_mean(clipfracs).detach(), "ppo_kl": sum_of_sample_mean(ppo_kls).detach()}
    if use_tis:
        stats["tis_clipfrac"] = sum_of_sample_mean(tis_fracs).detach()
    return sum_of_sample_mean(losses), stats


def gae(reward: float, values: torch.Tensor, gamma: float = 1.0, lambd: float = 1.0) -> tuple[torch.Tensor,
                                                                                             torch.Tensor]:
    """Per-token advantages and returns of one sample whose reward is its outcome, on the last response token:
    delta_t = r_t + gamma V_{t+1} - V_t (the value after the last token is 0), A_t = sum_k (gamma lambda)^k
    delta_{t+k}, returns = A + V."""
    v = values.detach().float().cpu()
    n = v.numel()
    adv = torch.zeros(n)
    last = 0.0
    for t in reversed(range(n)):
        r = float(reward) if t == n - 1 else 0.0
        following = float(v[t + 1]) if t + 1 < n else 0.0
        last = r + gamma * following - float(v[t]) + gamma * lambd * last
        adv[t] = last
    return adv, adv + v


def value_sample_losses(
    values: Sequence[torch.Tensor], old_values: Sequence[torch.Tensor], returns: Sequence[torch.Tensor],
    value_clip: float = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`sum_of_sample_mean` of the clipped value loss 0.5 max((V - R)^2, (V_old + clip(V - V_old) - R)^2) (PPO2's,
    the one Miles' --value-clip clips) over a micro-batch, plus its clip fraction."""
    losses, clipfracs = [], []
    for v, old, ret in zip(values, old_values, returns, strict=True):
        v, old, ret = v.float(), old.to(v.device).float(), ret.to(v.device).float()
        clipped = old + (v - old).clamp(-value_clip, value_clip)
        plain, clip = (v - ret) ** 2, (clipped - ret) ** 2
        losses.append(0.5 * torch.maximum(plain, clip))
        clipfracs.append(torch.gt(clip, plain).float())
    return sum_of_sample_mean(losses), {"value_clipfrac": sum_of_sample_mean(clipfracs).detach()}
