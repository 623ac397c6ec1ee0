"""The pass@k training advantage (analytical form for binary rewards): credit for raising a group's pass@k.

Departure: a group with fewer than k scored completions has no k-subset and gets 0 (the paper assumes every
completion is scored).
"""

from __future__ import annotations

import math
import numbers

import torch

from grpolab.advantages.group import _group_stats
from grpolab.advantages.registry import Paper, register

__all__ = ["passk"]


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
