"""GRPO advantages, clipped loss, TIS and the train/rollout gap metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from executor.backends.local.grpo import (
    approx_kl_low_var,
    group_advantages,
    grpo_sample_losses,
    logprob_gap,
    policy_loss,
    sum_of_sample_mean,
    tis_weights,
)


def test_group_advantages_normalize_inside_each_group() -> None:
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]), group_size=4)
    # group 1: mean 0.25, std (Bessel) = sqrt(0.25) = 0.5 -> (0.75/0.5, -0.25/0.5 x3)
    expected = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0])
    assert torch.allclose(adv, expected, atol=1e-5)


def test_group_advantages_without_std_and_bad_groups() -> None:
    adv = group_advantages(torch.tensor([2.0, 0.0]), group_size=2, std_normalize=False)
    assert adv.tolist() == [1.0, -1.0]
    with pytest.raises(ValueError):
        group_advantages(torch.ones(3), group_size=2)


def test_policy_loss_clips_at_0_2_below_and_0_28_above() -> None:
    old = torch.zeros(4)
    lp = torch.log(torch.tensor([1.5, 1.5, 0.5, 1.1]))  # ratios 1.5, 1.5, 0.5, 1.1
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    loss, clip = policy_loss(lp, old, adv)
    # A>0, r=1.5: max(-1.5, -1.28) = -1.28 (clipped); A<0, r=1.5: max(1.5, 1.28) = 1.5 (not clipped)
    # A<0, r=0.5: max(0.5, 0.8) = 0.8 (clipped); A>0, r=1.1: -1.1 (inside)
    assert torch.allclose(loss, torch.tensor([-1.28, 1.5, 0.8, -1.1]), atol=1e-5)
    assert clip.tolist() == [1.0, 0.0, 1.0, 0.0]


def test_sum_of_sample_mean_is_per_sample_token_mean_summed() -> None:
    values = [torch.tensor([1.0, 3.0]), torch.tensor([4.0]), torch.tensor([0.0, 0.0, 6.0])]
    assert float(sum_of_sample_mean(values)) == pytest.approx(2.0 + 4.0 + 2.0)


def test_k3_low_var_kl_matches_hand_values_and_clamps() -> None:
    # compute_approx_kl(rollout, train): log_ratio = train - rollout; k3 = exp(x) - 1 - x
    rollout = torch.tensor([-1.0, -2.0, -0.5])
    train = torch.tensor([-1.5, -1.0, -0.5])
    kl = approx_kl_low_var(rollout, train)
    x = torch.tensor([-0.5, 1.0, 0.0])
    assert torch.allclose(kl, x.exp() - 1 - x)
    assert float(approx_kl_low_var(torch.tensor([-20.0]), torch.tensor([0.0]))) == 10.0  # clamped


def test_logprob_gap_metrics_hand_computed() -> None:
    train = [torch.tensor([-1.0, -2.0]), torch.tensor([-0.5])]
    rollout = [torch.tensor([-1.2, -1.6]), torch.tensor([-0.5])]
    gap = logprob_gap(train, rollout)
    # abs diff: sample 1 mean (0.2 + 0.4) / 2 = 0.3, sample 2: 0 -> mean over samples 0.15
    assert gap["train_rollout_logprob_abs_diff"] == pytest.approx(0.15, abs=1e-6)
    k3 = lambda x: math.exp(x) - 1 - x  # noqa: E731
    expected_kl = ((k3(0.2) + k3(-0.4)) / 2 + 0.0) / 2  # x = train - rollout per token
    assert gap["train_rollout_kl"] == pytest.approx(expected_kl, abs=1e-6)


def test_logprob_gap_zeroes_non_finite_tokens() -> None:
    gap = logprob_gap([torch.tensor([float("-inf"), -1.0])], [torch.tensor([-1.0, -1.0])])
    assert gap["train_rollout_logprob_abs_diff"] == 0.0


def test_tis_truncates_at_clip() -> None:
    w, frac = tis_weights(torch.tensor([0.0, 0.0]), torch.tensor([-2.0, 0.1]), clip_high=2.0)
    assert torch.allclose(w, torch.tensor([2.0, math.exp(-0.1)]), atol=1e-6)
    assert frac.tolist() == [1.0, 0.0]


def test_grpo_sample_losses_on_policy_gradient_is_minus_advantage() -> None:
    lp = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss, stats = grpo_sample_losses([lp], [lp.detach()], [lp.detach()], [0.5], use_tis=True)
    loss.backward()
    # ratio 1 on policy: loss = mean(-ratio * A), d/dlp = -A * ratio / tokens
    assert torch.allclose(lp.grad, torch.tensor([-0.25, -0.25]))
    assert float(stats["ppo_kl"]) == 0.0 and float(stats["tis_clipfrac"]) == 0.0


def test_gae_puts_the_outcome_on_the_last_token_and_discounts_back() -> None:
    from executor.backends.local.grpo import gae

    values = torch.tensor([0.2, 0.5, 0.4])
    # gamma = lambda = 1 (Miles' defaults): A_t = R - V_t, returns = R on every token
    adv, ret = gae(1.0, values)
    assert torch.allclose(adv, torch.tensor([0.8, 0.5, 0.6])) and torch.allclose(ret, torch.ones(3))
    # by hand, gamma 0.9, lambda 0.5: deltas d2 = 1 - 0.4, d1 = 0.9 * 0.4 - 0.5, d0 = 0.9 * 0.5 - 0.2
    adv, ret = gae(1.0, values, gamma=0.9, lambd=0.5)
    d2, d1, d0 = 0.6, 0.36 - 0.5, 0.45 - 0.2
    a2, a1 = d2, d1 + 0.45 * d2
    assert torch.allclose(adv, torch.tensor([d0 + 0.45 * a1, a1, a2])) and torch.allclose(ret, adv + values)


def test_value_loss_is_half_the_larger_squared_error_of_the_clipped_and_plain_values() -> None:
    from executor.backends.local.grpo import value_sample_losses

    v, old, ret = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), torch.tensor([0.0, 0.5])
    loss, stats = value_sample_losses([v], [old], [ret], value_clip=0.2)
    # token 0: plain (1 - 0)^2 = 1, clipped (0.2 - 0)^2 = 0.04 -> 0.5; token 1: both 0.25 -> 0.125; sample mean
    assert float(loss) == pytest.approx((0.5 + 0.125) / 2)
    assert float(stats["value_clipfrac"]) == 0.0  # the plain error was the larger one
    v.requires_grad_(True)
    loss, _ = value_sample_losses([v], [old], [ret], value_clip=0.2)
    loss.backward()
    assert v.grad.tolist() == pytest.approx([0.5, -0.25])  # d/dv 0.5 (v - R)^2 / 2 tokens


def test_ppo_policy_loss_takes_per_token_advantages() -> None:
    lp = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss, _ = grpo_sample_losses([lp], [lp.detach()], [lp.detach()], [torch.tensor([1.0, -3.0])], use_tis=False)
    loss.backward()
    assert lp.grad.tolist() == pytest.approx([-0.5, 1.5])  # on policy: -A_t / tokens
