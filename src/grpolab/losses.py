"""Per-token policy losses, their importance ratios and corrections, and named loss-aggregation modes.

``policy_loss`` returns the per-token loss [B, T] of one of two objectives (``objective``, the config's
``policy_loss``):

* ``clip``: PPO's clipped surrogate (Schulman et al. 2017, arXiv 1707.06347)
  ``max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))`` with separate lower and upper clip ranges (DAPO's
  "clip-higher", Yu et al. 2025, arXiv 2503.14476), and optionally the dual clip of Ye et al. 2020 ("Mastering
  Complex Control in MOBA Games with Deep Reinforcement Learning", arXiv 1912.09729): for A < 0 the loss is
  capped at ``-A c`` (c > 1), so that a token whose ratio has run far above 1 stops pushing.
* ``cispo``: CISPO (MiniMax-M1, arXiv 2506.13585): ``-sg(clip(r, r_min, r_max)) A log pi``, the clipped
  importance weight with its gradient stopped, times the log-probability; no token loses its gradient.

The ratio r is per token, ``exp(logp - old)``, or per sequence (``importance_sampling_level="sequence"``,
GSPO: Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071): ``s = exp(mean_t(logp -
old))`` over the sequence's tokens, clipped per sequence. Its gradient is GSPO-token's (the paper's eq. 13):
``s_t = sg(s) * pi_t / sg(pi_t)``, equal in value to s, with gradient ``s * grad log pi_t`` on each token; under
an advantage that is constant along the sequence this is exactly GSPO's gradient, whatever the aggregation.

``is_weights`` multiplies the policy term token by token: the truncated importance-sampling correction of Yao
et al. 2025 ("Your Efficient RL Framework Secretly Brings You Off-Policy RL Training", TIS),
``min(pi_trainer / pi_sampler, cap)`` (``truncated_is_weights``), for a sampler whose numerics differ from the
trainer's. An optional k3 KL penalty to a frozen reference (GRPO, Shao et al. 2024, arXiv 2402.03300) is added
after the correction, as TRL does.

``rows_with_gradient`` says which rows of a batch the loss gives a gradient, from the loss's own terms, so that
the update forwards only those (the others add an exactly 0 gradient): every term is multiplied by the mask, so a
row without a loss token has none; the policy term of either objective is ``-A`` times a finite factor (the
ratio, its clip, the dual-clip cap ``-A c``, the CISPO weight times log pi, the IS weight), so a row whose
advantage is 0 on every loss token has none from it; the KL term has a gradient on every token when beta > 0.
A term added to ``policy_loss`` whose gradient does not vanish with A (an entropy bonus, say) must be added
there too; ``tests/train/test_row_skipping.py`` checks that skipping rows equals training all of them under
every loss option.

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

Departures from the papers:

* When the trainer splits a batch into micro-batches, it passes the *whole* batch's token or sequence count as
  ``denominator`` so that the sum of the micro-batch losses equals the loss of the whole batch (the papers
  describe one batch).
* GSPO's objective averages the sequence losses (``seq_mean_token_mean``); under the default ``token_mean`` a
  sequence weighs by its length, as in TRL. GSPO's paper clips at 3e-4 / 4e-4, far tighter than the token-level
  0.2: the clip range is the user's to set.
* CISPO's paper normalises by the batch's token count (``token_mean``); any aggregation mode is accepted. Its
  loss value is ``-w A log pi``, not comparable in size with the clipped surrogate's; only its gradient is.
* The dual clip, the CISPO weight and the TIS weight take the sequence ratio as they take the token ratio; the
  papers define them per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["AGGREGATION_MODES", "IMPORTANCE_SAMPLING_LEVELS", "POLICY_OBJECTIVES", "PolicyLossTerms", "aggregate",
           "aggregation_denominator", "importance_log_ratio", "policy_loss", "rows_with_gradient",
           "truncated_is_weights"]

AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum")
POLICY_OBJECTIVES = ("clip", "cispo")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")


@dataclass
class PolicyLossTerms:
    """Per-token terms of the policy loss; every tensor is [B, T].

    Attributes:
        loss: the per-token loss to aggregate (policy term * IS weight + beta * KL).
        kl: per-token k3 KL estimate to the reference (zeros when there is no reference).
        clipped: 1.0 where a clip bound took the token's gradient away (``clip``) or capped its weight
            (``cispo``), else 0.0; equal to ``clipped_low + clipped_high``.
        clipped_low, clipped_high: the same split by bound: the ratio below 1 - eps_low (``clip``, A < 0) or
            below r_min (``cispo``); above 1 + eps_high (``clip``, A > 0) or above r_max (``cispo``).
        clipped_dual: 1.0 where the dual clip capped a negative-advantage token's loss at -A c, else 0.0.
    """

    loss: torch.Tensor
    kl: torch.Tensor
    clipped: torch.Tensor
    clipped_low: torch.Tensor | None = None
    clipped_high: torch.Tensor | None = None
    clipped_dual: torch.Tensor | None = None


def importance_log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, *, level: str = "token",
                         mask: torch.Tensor | None = None) -> torch.Tensor:
    """log r [B, T]: ``logp - old`` per token, or GSPO's sequence ratio (``level="sequence"``).

    The sequence form has the value ``mean_t(logp - old)`` over the tokens ``mask[B, T]`` keeps, on every token
    of the row, and the gradient of GSPO-token: d log r_t / d logp_t' = 1 if t = t' else 0, so that
    d r_t = r_t * d logp_t (see the module docstring). A row without tokens gets log r = 0.
    """
    _check_choice("importance_sampling_level", level, IMPORTANCE_SAMPLING_LEVELS)
    token = logprobs - old_logprobs
    if level == "token":
        return token
    if mask is None:
        raise ValueError("importance_sampling_level='sequence' needs the completion mask to average over")
    mask = mask.to(token.dtype)
    sequence = (token.detach() * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)  # [B, 1]
    return sequence + (logprobs - logprobs.detach())


def truncated_is_weights(trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """TIS weights [B, T]: ``min(exp(trainer - sampler), cap)``, without gradient (Yao et al. 2025).

    Args:
        trainer_logprobs: [B, T] log-probs of the sampled tokens under the trainer's policy that sampled them.
        sampler_logprobs: [B, T] the sampler's own log-probs of the same tokens.
        cap: the truncation C (> 0; ``math.inf`` = plain importance sampling).
    """
    return torch.exp(trainer_logprobs.detach().float() - sampler_logprobs.float()).clamp(max=cap)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.0,
    objective: str = "clip",
    importance_sampling_level: str = "token",
    mask: torch.Tensor | None = None,
    dual_clip_c: float | None = None,
    cispo_ratio_min: float | None = None,
    cispo_ratio_max: float = math.inf,
    is_weights: torch.Tensor | None = None,
) -> PolicyLossTerms:
    """The per-token policy loss of ``objective`` (see the module docstring for formulas and papers).

    Args:
        logprobs: [B, T] log-probabilities of the sampled tokens under the current policy (with grad).
        old_logprobs: [B, T] the same under the policy that sampled them (no grad).
        advantages: [B] (one per completion, broadcast over its tokens: outcome reward) or [B, T].
        epsilon_low, epsilon_high: ``clip`` clips the ratio to [1 - epsilon_low, 1 + epsilon_high];
            ``epsilon_high=None`` means symmetric clipping.
        ref_logprobs: [B, T] log-probabilities under the frozen reference policy, needed when beta > 0.
        beta: weight of the k3 KL penalty exp(ref - logp) - (ref - logp) - 1.
        objective: ``clip`` (PPO) or ``cispo``.
        importance_sampling_level: ``token`` or ``sequence`` (GSPO; needs ``mask``).
        mask: [B, T] the tokens that count, for the sequence ratio's mean.
        dual_clip_c: ``clip`` only: cap the loss of A < 0 tokens at -A c (c > 1); None = off.
        cispo_ratio_min, cispo_ratio_max: ``cispo`` clips the weight to [r_min, r_max]; None = no lower bound.
        is_weights: [B, T] weights (no grad) multiplying the policy term, e.g. ``truncated_is_weights``.
    """
    _check_choice("objective", objective, POLICY_OBJECTIVES)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # [B, 1], broadcast over T
    ratio = torch.exp(importance_log_ratio(logprobs, old_logprobs, level=importance_sampling_level, mask=mask))
    if objective == "cispo":
        if dual_clip_c is not None:
            raise ValueError("the dual clip applies to the clipped objective, not to cispo")
        loss, low, high = _cispo(ratio, logprobs, advantages, cispo_ratio_min, cispo_ratio_max)
        dual = torch.zeros_like(loss)
    else:
        high_range = epsilon_low if epsilon_high is None else epsilon_high
        loss, low, high = _clipped_surrogate(ratio, advantages, 1.0 - epsilon_low, 1.0 + high_range)
        loss, dual = _dual_clip(loss, advantages, dual_clip_c)
    if is_weights is not None:
        loss = loss * is_weights.detach()
    loss, kl = _add_kl(loss, logprobs, ref_logprobs, beta)
    return PolicyLossTerms(loss=loss, kl=kl.detach(), clipped=low + high, clipped_low=low, clipped_high=high,
                           clipped_dual=dual)


def rows_with_gradient(advantages: torch.Tensor, mask: torch.Tensor, *, beta: float = 0.0) -> torch.Tensor:
    """[B] bool: the rows whose loss under ``policy_loss`` (any objective, ratio level, dual clip, IS weights) and
    ``aggregate`` (any mode) can have a non-zero gradient; the others' is exactly 0 (see the module docstring).

    A row has a gradient when it has a loss token (``mask``) and some term has one there: the policy term
    where A != 0, the KL term (beta > 0) everywhere. This is where a new term of ``policy_loss`` changes the rule.

    Args:
        advantages: [B] (one per completion) or [B, T] (per token; only the tokens ``mask`` keeps count).
        mask: [B, T] the tokens that count in the loss.
        beta: the KL weight passed to ``policy_loss``.
    """
    tokens = mask > 0  # [B, T]
    if beta > 0:
        return tokens.any(dim=1)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # [B, 1], broadcast over T
    return ((advantages != 0) & tokens).any(dim=1)


def _clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, lower: float,
                       upper: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's ``max(-A r, -A clip(r, lower, upper))`` [B, T], and where the lower / upper bound was active."""
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, lower, upper)
    loss = torch.maximum(unclipped, clipped)
    active = (clipped > unclipped).to(loss.dtype).detach()
    negative = (advantages < 0).to(loss.dtype)
    return loss, active * negative, active * (1.0 - negative)


def _dual_clip(loss: torch.Tensor, advantages: torch.Tensor,
               c: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Ye et al.'s dual clip: for A < 0, ``min(loss, -A c)`` [B, T], and where the cap was active."""
    if c is None:
        return loss, torch.zeros_like(loss).detach()
    negative = (advantages < 0).expand_as(loss)
    cap = torch.where(negative, -advantages * c, torch.zeros_like(loss))  # 0 * inf would be NaN where A >= 0
    dual = negative & (loss > cap)
    return torch.where(dual, cap, loss), dual.to(loss.dtype).detach()


def _cispo(ratio: torch.Tensor, logprobs: torch.Tensor, advantages: torch.Tensor, ratio_min: float | None,
           ratio_max: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CISPO's ``-sg(clip(r, r_min, r_max)) A log pi`` [B, T], and where each bound capped the weight."""
    ratio = ratio.detach()
    weight = torch.clamp(ratio, min=ratio_min, max=ratio_max)
    low = (ratio < ratio_min).to(logprobs.dtype) if ratio_min is not None else torch.zeros_like(ratio)
    high = (ratio > ratio_max).to(logprobs.dtype)
    return -advantages * weight * logprobs, low.expand_as(logprobs), high.expand_as(logprobs)


def _add_kl(loss: torch.Tensor, logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None,
            beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``loss + beta * k3`` and the k3 estimate [B, T] (zeros when beta = 0)."""
    if beta <= 0:
        return loss, torch.zeros_like(loss)
    if ref_logprobs is None:
        raise ValueError("policy_loss: beta > 0 needs ref_logprobs from a reference policy")
    log_ratio = ref_logprobs - logprobs
    kl = torch.exp(log_ratio) - log_ratio - 1.0
    return loss + beta * kl, kl


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


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(choices)}")
