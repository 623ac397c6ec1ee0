"""Per-token clipped policy loss and named loss-aggregation modes.

``policy_loss`` is PPO's clipped surrogate (Schulman et al. 2017, arXiv 1707.06347) with separate lower
and upper clip ranges (DAPO's "clip-higher", Yu et al. 2025, arXiv 2503.14476) and an optional KL
penalty to a frozen reference policy with the k3 estimator that GRPO uses (Shao et al. 2024,
arXiv 2402.03300).

``aggregate`` reduces ``loss[B, T]`` under ``mask[B, T]`` to a scalar in one of four named modes:

==========================  ===============================================  ===========================
mode                        formula                                          source
==========================  ===============================================  ===========================
``token_mean``              sum(loss * mask) / sum(mask)                     DAPO (arXiv 2503.14476)
``seq_mean_token_mean``     mean_b [ sum_t(loss * mask) / sum_t(mask) ]      GRPO (arXiv 2402.03300)
``seq_mean_token_sum_norm`` sum(loss * mask) / (B * max_length)              Dr. GRPO (arXiv 2503.20783)
``seq_mean_token_sum``      mean_b [ sum_t(loss * mask) ]                    REINFORCE / Dr. GRPO's
                                                                             unnormalised sum
==========================  ===============================================  ===========================

Departure: when the trainer splits a batch into micro-batches, it passes the *whole* batch's token or
sequence count as ``denominator`` so that the sum of the micro-batch losses equals the loss of the
whole batch (the papers describe one batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["AGGREGATION_MODES", "PolicyLossTerms", "aggregate", "aggregation_denominator", "policy_loss"]

AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum")


@dataclass
class PolicyLossTerms:
    """Per-token terms of the policy loss; every tensor is [B, T].

    Attributes:
        loss: the per-token loss to aggregate (clipped surrogate + beta * KL).
        kl: per-token k3 KL estimate to the reference (zeros when there is no reference).
        clipped: 1.0 where the clipped branch was active, else 0.0.
    """

    loss: torch.Tensor
    kl: torch.Tensor
    clipped: torch.Tensor


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
) -> PolicyLossTerms:
    """Clipped surrogate loss per token.

    Args:
        logprobs: [B, T] log-probabilities of the sampled tokens under the current policy (with grad).
        old_logprobs: [B, T] the same under the policy that sampled them (no grad).
        advantages: [B] (one per completion, broadcast over its tokens: outcome reward) or [B, T].
        epsilon_low, epsilon_high: the ratio is clipped to [1 - epsilon_low, 1 + epsilon_high];
            ``epsilon_high=None`` means symmetric clipping.
        ref_logprobs: [B, T] log-probabilities under the frozen reference policy, needed when beta > 0.
        beta: weight of the k3 KL penalty exp(ref - logp) - (ref - logp) - 1.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # [B, 1], broadcast over T
    high = epsilon_low if epsilon_high is None else epsilon_high
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + high)
    loss = torch.maximum(unclipped, clipped)
    kl = torch.zeros_like(loss)
    if beta > 0:
        if ref_logprobs is None:
            raise ValueError("policy_loss: beta > 0 needs ref_logprobs from a reference policy")
        log_ratio = ref_logprobs - logprobs
        kl = torch.exp(log_ratio) - log_ratio - 1.0
        loss = loss + beta * kl
    return PolicyLossTerms(loss=loss, kl=kl.detach(), clipped=(clipped > unclipped).to(loss.dtype).detach())


def aggregation_denominator(mask: torch.Tensor, mode: str, *, max_length: int | None = None) -> float:
    """The normaliser of ``mode`` for a whole batch ``mask[B, T]``: tokens, sequences, or B * max_length."""
    _check_mode(mode)
    if mode == "token_mean":
        return float(mask.sum().clamp(min=1))
    if mode == "seq_mean_token_sum_norm":
        return float(mask.shape[0] * (max_length or mask.shape[1]))
    return float(max(mask.shape[0], 1))


def aggregate(
    loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token_mean",
    *,
    max_length: int | None = None,
    denominator: float | None = None,
) -> torch.Tensor:
    """Reduce ``loss[B, T]`` under ``mask[B, T]`` (1 = completion token) to a scalar.

    Args:
        loss: [B, T] per-token loss.
        mask: [B, T] 0/1 mask of the tokens that count.
        mode: one of ``AGGREGATION_MODES`` (see the module docstring for formulas and sources).
        max_length: the constant of ``seq_mean_token_sum_norm`` (default T).
        denominator: override of the normaliser, for micro-batches of a larger batch (see
            ``aggregation_denominator``).
    """
    _check_mode(mode)
    mask = mask.to(loss.dtype)
    if denominator is None:
        denominator = aggregation_denominator(mask, mode, max_length=max_length)
    masked = loss * mask
    if mode == "seq_mean_token_mean":
        per_sequence = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return per_sequence.sum() / denominator
    return masked.sum() / denominator


def _check_mode(mode: str) -> None:
    if mode not in AGGREGATION_MODES:
        raise ValueError(
            f"unknown loss aggregation mode {mode!r}; choose one of {', '.join(AGGREGATION_MODES)}"
        )
