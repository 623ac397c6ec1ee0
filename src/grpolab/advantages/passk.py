"""Pass@k estimators: credit for raising a group's pass@k rather than its mean reward.

``passk`` (Pass@k Training's analytical advantage), ``pkpo`` (PKPO's unbiased pass@k reward transformation for
binary rewards) and ``grpo_passk`` (verl's best-minus-second advantage).

Departures: a group with fewer than k scored completions has no k-subset and gets 0 under ``passk`` and
``pkpo`` (the papers assume every completion is scored); ``grpo_passk`` gives a group with fewer than two scored
completions 0 where verl raises an error (verl's adapter keeps verl's error under verl conventions).
"""

from __future__ import annotations

import math
import numbers

import torch

from grpolab.advantages.group import _group_stats
from grpolab.advantages.registry import Paper, register

__all__ = ["PKPO_BASELINES", "grpo_passk", "passk", "pkpo"]


def _log_comb(n: torch.Tensor, k: int) -> torch.Tensor:
    """log C(n, k) for integer-valued n >= k >= 0 (elementwise)."""
    return torch.lgamma(n + 1) - math.lgamma(k + 1) - torch.lgamma(n - k + 1)


def _comb_ratio(top: torch.Tensor, bottom: torch.Tensor, k: int) -> torch.Tensor:
    """C(top, k) / C(bottom, k), 0 where top < k."""
    ratio = torch.exp(_log_comb(top.clamp(min=k), k) - _log_comb(bottom, k))
    return torch.where(top >= k, ratio, torch.zeros_like(ratio))


@register("passk", needs_group=True, binary_only=True, zero_sum=True, order=9, color="tab:gray",
          paper=Paper("Pass@k Training for Adaptively Balancing Exploration and Exploitation of Large Reasoning "
                      "Models", "2508.10751", 2025))
def passk(rewards: torch.Tensor, *, k: int = 2) -> torch.Tensor:
    """Pass@k training advantage, analytical form for binary rewards.

    Chen et al. 2025, Pass@k Training for Adaptively Balancing Exploration and Exploitation
    (arXiv 2508.10751). With N scored completions of which N_neg are wrong, the group's pass@k reward
    is R = 1 - C(N_neg, k) / C(N, k) and sigma = sqrt(R (1 - R)); then

        A_pos = (1 - R) / sigma,
        A_neg = (1 - R - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / sigma,

    and 0 for a group with sigma = 0. Requires 1 <= k <= G (k = 1 gives GRPO with population std); a
    group with fewer than k scored completions has no k-subset and gets 0, like a group with sigma = 0.
    """
    group_size = rewards.shape[1]
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or not 1 <= k <= group_size:
        raise ValueError(
            f"advantage estimator 'passk': k must be an integer with 1 <= k <= G = {group_size}, got {k!r}"
        )
    k = int(k)
    count, _, _ = _group_stats(rewards)
    wrong = torch.nansum(1.0 - rewards, dim=1, keepdim=True)
    group_reward = 1.0 - _comb_ratio(wrong, count, k)
    sigma = torch.sqrt(group_reward * (1.0 - group_reward))
    negative_term = _comb_ratio(wrong - 1, count - 1, k - 1) if k > 1 else torch.ones_like(wrong)
    safe_sigma = torch.where(sigma > 0, sigma, torch.ones_like(sigma))
    a_pos = (1.0 - group_reward) / safe_sigma
    a_neg = (1.0 - group_reward - negative_term) / safe_sigma
    advantages = torch.where(rewards == 1.0, a_pos, a_neg)
    has_signal = (sigma > 0) & (count >= k)  # [P, 1]
    return torch.where(has_signal, advantages, torch.zeros_like(advantages))


def _check_k(k: object, group_size: int, name: str, lowest: int = 1) -> int:
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or not lowest <= k <= group_size:
        raise ValueError(
            f"advantage estimator {name!r}: k must be an integer with {lowest} <= k <= G = {group_size}, got {k!r}"
        )
    return int(k)


# PKPO's baselines: the paper's recommended k-1 leave-one-out one (its s^(loo-1)), the group mean of the
# transformed rewards (rllm's PKPO estimator), or none (the paper's unbaselined transformation).
PKPO_BASELINES = ("loo_minus_one", "mean", "none")


@register("pkpo", needs_group=True, binary_only=True, order=15, color="teal",
          paper=Paper("Pass@K Policy Optimization: Solving Harder Reinforcement Learning Problems", "2505.15201", 2025))
def pkpo(rewards: torch.Tensor, *, k: int = 2, baseline: str = "loo_minus_one") -> torch.Tensor:
    """PKPO: the unbiased pass@k reward transformation for binary rewards, with a baseline.

    Walder and Karkhanis 2025, Pass@K Policy Optimization (arXiv 2505.15201). With n scored completions of
    which c are correct, the transformed reward s_i = (1 / C(n, k)) * sum over the k-subsets holding i of the
    subset's pass is (the paper's binary theorem)

        s_pos = k / n,    s_neg = (k / n) * (1 - C(n - c - 1, k - 1) / C(n - 1, k - 1)),

    so that sum_i s_i grad log p_i is an unbiased estimate of grad pass@k. ``baseline`` subtracts:

    * ``"loo_minus_one"`` (default; the paper's recommended s^(loo-1)): (k / n) times the unbiased pass@(k-1)
      of the other n - 1 completions. For binary rewards this leaves A_pos = (k / n) C(n - c, k - 1) /
      C(n - 1, k - 1), the chance that the k - 1 others of a subset all fail, and A_neg = 0. Needs k >= 2.
    * ``"mean"``: the group mean of s (zero-sum; rllm's PKPO estimator).
    * ``"none"``: s itself.

    Requires k <= G; a group with fewer than k scored completions gets 0. All-wrong groups get 0 under every
    baseline; all-correct groups get 0 except under ``"none"`` (k / n each).
    """
    if baseline not in PKPO_BASELINES:
        raise ValueError(f"advantage estimator 'pkpo': baseline must be one of {', '.join(PKPO_BASELINES)}, "
                         f"got {baseline!r}")
    k = _check_k(k, rewards.shape[1], "pkpo", lowest=2 if baseline == "loo_minus_one" else 1)
    count, _, _ = _group_stats(rewards)  # n: [P, 1]
    correct = torch.nansum(rewards, dim=1, keepdim=True)  # c: [P, 1]
    share = k / count.clamp(min=1)  # k / n
    if baseline == "loo_minus_one":
        a_pos = share * _comb_ratio(count - correct, count - 1, k - 1)
        a_neg = torch.zeros_like(a_pos)
    else:
        a_pos = share
        a_neg = share * (1.0 - _comb_ratio(count - correct - 1, count - 1, k - 1))
        if baseline == "mean":
            mean = (correct * a_pos + (count - correct) * a_neg) / count.clamp(min=1)
            a_pos, a_neg = a_pos - mean, a_neg - mean
    advantages = torch.where(rewards == 1.0, a_pos, a_neg)
    return torch.where(count >= k, advantages, torch.zeros_like(advantages))


@register("grpo_passk", needs_group=True, order=16, color="slategray",
          paper=Paper("Optimizing Language Models for Inference Time Objectives using Reinforcement Learning",
                      "2503.19595", 2025))
def grpo_passk(rewards: torch.Tensor, *, eps: float = 1e-6, norm_by_std: bool = True) -> torch.Tensor:
    """verl's ``grpo_passk``: only a group's best completion gets an advantage, r_max - r_second_max.

    Tang et al. 2025, Optimizing Language Models for Inference Time Objectives using Reinforcement Learning
    (arXiv 2503.19595), as verl 0.9.1 implements it (``compute_grpo_passk_outcome_advantage``): the advantage of
    the completion with the highest reward is the gap to the second highest, divided by (the group's sample
    standard deviation + eps) when ``norm_by_std`` (verl's ``algorithm.norm_adv_by_std_in_grpo``; verl's
    epsilon 1e-6 is the default here); every other completion gets 0. Tied best rewards have a gap of 0, so
    which of them verl picks never matters. With binary rewards only a group with exactly one success moves.
    """
    valid = ~torch.isnan(rewards)
    masked = torch.where(valid, rewards, torch.full_like(rewards, -math.inf))
    top = masked.topk(2, dim=1).values  # [P, 2]
    count, _, squares = _group_stats(rewards)
    has_two = count >= 2  # [P, 1]
    gap = torch.where(has_two, (top[:, :1] - top[:, 1:2]), torch.zeros_like(count))
    if norm_by_std:
        std = torch.sqrt(squares / (count - 1).clamp(min=1))
        gap = torch.where(gap > 0, gap / (std + eps), torch.zeros_like(gap))
    best = valid & (rewards == top[:, :1]) & has_two
    return torch.where(best, gap.expand_as(rewards), torch.zeros_like(rewards))
