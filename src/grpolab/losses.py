"""Per-token policy losses, their importance ratios and corrections, and named loss-aggregation modes.

``policy_loss`` returns the per-token loss [B, T] of one of five objectives under its ``LossOptions`` (one value:
the objective, the config's ``policy_loss``, and its hyper-parameters):

* ``clip``: PPO's clipped surrogate (Schulman et al. 2017, arXiv 1707.06347)
  ``max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))`` with separate lower and upper clip ranges (DAPO's
  "clip-higher", Yu et al. 2025, arXiv 2503.14476), and optionally the dual clip of Ye et al. 2020 ("Mastering
  Complex Control in MOBA Games with Deep Reinforcement Learning", arXiv 1912.09729): for A < 0 the loss is
  capped at ``-A c`` (c > 1), so that a token whose ratio has run far above 1 stops pushing.
* ``cispo``: CISPO (MiniMax-M1, arXiv 2506.13585): ``-sg(clip(r, r_min, r_max)) A log pi``, the clipped
  importance weight with its gradient stopped, times the log-probability; no token loses its gradient.
* ``sapo``: SAPO (Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv 2511.20347), as TRL 1.16 computes it:
  ``-A * sigmoid(tau (r - 1)) * 4 / tau`` with tau = tau_pos where A > 0, else tau_neg; a smooth gate in place of
  the clip, whose gradient at r = 1 is the policy gradient's (-A grad log pi).
* ``luspo``: LUSPO (arXiv 2602.05261, "Length-Unbiased Sequence Policy Optimization"), as TRL 1.16 computes it: the
  clipped surrogate of each token times its sequence's loss-token count |y|; aggregated as ``seq_mean_token_mean``
  (GSPO's) this is TRL's ``mean_b sum_t loss`` exactly (the paper pairs it with the sequence ratio).
* ``vespo``: VESPO (arXiv 2602.10693, "Variational Sequence-Level Soft Policy Optimization"), as TRL 1.16 computes it:
  ``-sg(phi(w)) A log pi`` with the sequence weight ``w = exp(sum_t clamp(logp - old, -20, 20))`` (times the TIS
  weights' product when given, which then do not multiply the loss), clamped to [1e-8, e^20], and the Gamma
  weight ``phi(w) = exp(lam + k log w - lam w)`` (phi(1) = 1), (k, lam) = (k_pos, lam_pos) where A >= 0, else
  (k_neg, lam_neg). It takes the token ratios whatever ``importance_sampling_level`` says.

The ratio r is per token, ``exp(logp - old)``, or per sequence (``importance_sampling_level="sequence"``,
GSPO: Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071): ``s = exp(mean_t(logp -
old))`` over the sequence's tokens, clipped per sequence. Its gradient is GSPO-token's (the paper's eq. 13):
``s_t = sg(s) * pi_t / sg(pi_t)``, equal in value to s, with gradient ``s * grad log pi_t`` on each token; under
an advantage that is constant along the sequence this is exactly GSPO's gradient, whatever the aggregation.

``is_weights`` multiplies the policy term token by token: the truncated importance-sampling correction of Yao
et al. 2025 ("Your Efficient RL Framework Secretly Brings You Off-Policy RL Training", TIS),
``min(pi_trainer / pi_sampler, cap)`` (``truncated_is_weights``), for a sampler whose numerics differ from the
trainer's. ``off_policy_threshold`` is DeepSeek-V3.2's off-policy sequence masking (arXiv 2512.02556, eq. 9; TRL
1.16's ``off_policy_mask_threshold``): a completion with A < 0 whose mean per-token KL(sampler || policy),
``mean_t(log pi_sampler - log pi)``, exceeds the threshold contributes no policy term (``off_policy_mask``).
An optional k3 KL penalty to a frozen reference (GRPO, Shao et al. 2024, arXiv 2402.03300) is added
after the correction, as TRL does.

``entropy_bonus`` is the entropy regularisation of verl's ``entropy_coeff`` and TRL's ``entropy_coef``: the loss
less ``coef`` times the mean entropy of the trained tokens, aggregated like the loss (verl's ``agg_loss``; TRL takes
the token mean whatever its ``loss_type``, the same under ``token_mean``).

``rows_with_gradient`` says which rows of a batch the loss gives a gradient, from the loss's own terms, so that
the update forwards only those (the others add an exactly 0 gradient): every term is multiplied by the mask, so a
row without a loss token has none; the policy term of either objective is ``-A`` times a finite factor (the
ratio, its clip, the dual-clip cap ``-A c``, the CISPO weight times log pi, the IS weight), so a row whose
advantage is 0 on every loss token has none from it; the KL term has a gradient on every token when beta > 0.
The entropy bonus (``entropy_bonus``) has a gradient on every token, so with ``entropy_coef`` > 0 every row with a
loss token has one; ``tests/train/test_row_skipping.py`` checks that skipping rows equals training all of them under
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
* SAPO, LUSPO and VESPO follow TRL 1.16's code (``GRPOTrainer._compute_loss``, ``get_gamma_weights``) rather than
  re-deriving the papers; VESPO sums the TIS weights' logs over the loss tokens only (TRL: over every position).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["AGGREGATION_MODES", "IMPORTANCE_SAMPLING_LEVELS", "POLICY_OBJECTIVES", "LossOptions", "PolicyLossTerms",
           "aggregate",
           "aggregation_denominator", "entropy_bonus", "importance_log_ratio", "off_policy_mask", "policy_loss",
           "rows_with_gradient", "truncated_is_weights", "vespo_weights"]

AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum")
POLICY_OBJECTIVES = ("clip", "cispo", "sapo", "luspo", "vespo")
_LOG_W_MIN = math.log(1e-8)  # VESPO's clamp of log w (TRL 1.16's, from the paper's code)
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
        off_policy_masked: 1.0 where the off-policy mask dropped the token's policy term, else 0.0.
    """

    loss: torch.Tensor
    kl: torch.Tensor
    clipped: torch.Tensor
    clipped_low: torch.Tensor | None = None
    clipped_high: torch.Tensor | None = None
    clipped_dual: torch.Tensor | None = None
    off_policy_masked: torch.Tensor | None = None


@dataclass(frozen=True)
class LossOptions:
    """The options of ``policy_loss``: its objective and that objective's hyper-parameters (docs/losses.md). Every
    field but ``objective`` (the config's ``policy_loss``) is the ``TrainConfig`` field of the same name, and a
    run's come from its config (``grpolab.train.update.loss_options``); the defaults here, which leave CISPO's
    weight unbounded, serve direct calls of ``policy_loss``."""

    objective: str = "clip"
    """One of ``POLICY_OBJECTIVES`` (module docstring)."""
    epsilon_low: float = 0.2
    """``clip``, ``luspo``: the ratio's lower clip bound is 1 - epsilon_low."""
    epsilon_high: float | None = None
    """``clip``, ``luspo``: the upper bound is 1 + epsilon_high (DAPO's clip-higher); None = epsilon_low."""
    beta: float = 0.0
    """Weight of the k3 KL penalty exp(ref - logp) - (ref - logp) - 1 to the reference policy."""
    importance_sampling_level: str = "token"
    """``token`` or ``sequence`` (GSPO); ``vespo`` ignores it."""
    dual_clip_c: float | None = None
    """``clip``, ``luspo``: cap the loss of A < 0 tokens at -A c (c > 1); None = off."""
    cispo_ratio_min: float | None = None
    """``cispo``: the lower bound of the clipped weight; None = no lower bound."""
    cispo_ratio_max: float = math.inf
    """``cispo``: the upper bound of the clipped weight."""
    sapo_temperature_pos: float = 1.0
    """``sapo``: the gate's temperature where A > 0."""
    sapo_temperature_neg: float = 1.05
    """``sapo``: the gate's temperature where A <= 0."""
    vespo_k_pos: float = 2.0
    """``vespo``: the Gamma weight's k where A >= 0."""
    vespo_lambda_pos: float = 3.0
    """``vespo``: the Gamma weight's lambda where A >= 0."""
    vespo_k_neg: float = 3.0
    """``vespo``: the Gamma weight's k where A < 0."""
    vespo_lambda_neg: float = 2.0
    """``vespo``: the Gamma weight's lambda where A < 0."""
    off_policy_mask_threshold: float | None = None
    """Drop the policy term of A < 0 completions whose mean KL(sampler || policy) exceeds it (``off_policy_mask``;
    needs the mask); None = off."""

    @property
    def clip_high(self) -> float:
        """The upper clip range of ``clip`` and ``luspo``: ``epsilon_high``, or ``epsilon_low`` when None."""
        return self.epsilon_low if self.epsilon_high is None else self.epsilon_high


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
    options: LossOptions,
    *,
    ref_logprobs: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    is_weights: torch.Tensor | None = None,
    sampling_logprobs: torch.Tensor | None = None,
) -> PolicyLossTerms:
    """The per-token policy loss of ``options.objective`` (see the module docstring for formulas and papers).

    Args:
        logprobs: [B, T] log-probabilities of the sampled tokens under the current policy (with grad).
        old_logprobs: [B, T] the same under the policy that sampled them (no grad).
        advantages: [B] (one per completion, broadcast over its tokens: outcome reward) or [B, T].
        options: the objective and its hyper-parameters (``LossOptions``).
        ref_logprobs: [B, T] log-probabilities under the frozen reference policy, needed when ``options.beta`` > 0.
        mask: [B, T] the tokens that count, for the sequence ratio's mean (and ``luspo``'s and ``vespo``'s sums);
            needed by the sequence ratio, ``luspo``, ``vespo`` and the off-policy mask.
        is_weights: [B, T] weights (no grad) multiplying the policy term, e.g. ``truncated_is_weights`` (``vespo``
            folds them into its sequence weight instead).
        sampling_logprobs: [B, T] the sampler's log-probs for the off-policy mask's KL; default ``old_logprobs``.
    """
    objective = options.objective
    _check_choice("objective", objective, POLICY_OBJECTIVES)
    if options.dual_clip_c is not None and objective not in ("clip", "luspo"):
        raise ValueError(f"the dual clip applies to the clipped objective, not to {objective}")
    if (objective in ("luspo", "vespo") or options.off_policy_mask_threshold is not None) and mask is None:
        raise ValueError(f"objective {objective!r} and the off-policy mask need the completion mask to sum over")
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # [B, 1], broadcast over T
    log_ratio = importance_log_ratio(logprobs, old_logprobs, level=options.importance_sampling_level, mask=mask)
    ratio = torch.exp(log_ratio)
    if objective == "vespo":
        phi = vespo_weights(logprobs, old_logprobs, advantages, mask, options.vespo_k_pos, options.vespo_lambda_pos,
                            options.vespo_k_neg, options.vespo_lambda_neg, is_weights=is_weights)
        loss = -phi * advantages * logprobs
        is_weights = None  # folded into w
        low = high = dual = torch.zeros_like(loss).detach()
    elif objective == "cispo":
        loss, low, high = _cispo(ratio, logprobs, advantages, options.cispo_ratio_min, options.cispo_ratio_max)
        dual = torch.zeros_like(loss)
    elif objective == "sapo":
        loss = _sapo(ratio, advantages, options.sapo_temperature_pos, options.sapo_temperature_neg)
        low = high = dual = torch.zeros_like(loss).detach()
    elif objective in ("clip", "luspo"):
        loss, low, high = _clipped_surrogate(ratio, advantages, 1.0 - options.epsilon_low, 1.0 + options.clip_high)
        loss, dual = _dual_clip(loss, advantages, options.dual_clip_c)
        if objective == "luspo":
            loss = loss * mask.to(loss.dtype).sum(dim=1, keepdim=True)  # |y_i|, a constant
    dropped = torch.zeros_like(loss).detach()
    if options.off_policy_mask_threshold is not None:
        sampling = old_logprobs if sampling_logprobs is None else sampling_logprobs
        keep = off_policy_mask(advantages, logprobs, sampling, mask, options.off_policy_mask_threshold)
        loss, dropped = loss * keep, (1.0 - keep).expand_as(loss)
    if is_weights is not None:
        loss = loss * is_weights.detach()
    loss, kl = _add_kl(loss, logprobs, ref_logprobs, options.beta)
    return PolicyLossTerms(loss=loss, kl=kl.detach(), clipped=low + high, clipped_low=low, clipped_high=high,
                           clipped_dual=dual, off_policy_masked=dropped)


def rows_with_gradient(advantages: torch.Tensor, mask: torch.Tensor, *, beta: float = 0.0,
                       entropy_coef: float = 0.0) -> torch.Tensor:
    """[B] bool: the rows whose loss under ``policy_loss`` (any objective, ratio level, dual clip, IS weights) and
    ``aggregate`` (any mode) can have a non-zero gradient; the others' is exactly 0 (see the module docstring).

    A row has a gradient when it has a loss token (``mask``) and some term has one there: the policy term
    where A != 0, the KL term (beta > 0) and the entropy bonus (``entropy_coef`` != 0) everywhere. This is where a
    new term of the loss changes the rule.

    Args:
        advantages: [B] (one per completion) or [B, T] (per token; only the tokens ``mask`` keeps count).
        mask: [B, T] the tokens that count in the loss.
        beta: the KL weight passed to ``policy_loss``.
        entropy_coef: the weight of ``entropy_bonus``.
    """
    tokens = mask > 0  # [B, T]
    if beta > 0 or entropy_coef != 0:
        return tokens.any(dim=1)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # [B, 1], broadcast over T
    return ((advantages != 0) & tokens).any(dim=1)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, mode: str, coef: float, *,
                  denominator: float | None = None) -> torch.Tensor:
    """``coef`` times the entropy [B, T] of the trained tokens aggregated like the loss (``aggregate``'s ``mode``
    and ``denominator``): the scalar to subtract from the loss (verl ``entropy_coeff``, TRL ``entropy_coef``)."""
    return coef * aggregate(entropy, mask, mode, denominator=denominator)


def off_policy_mask(advantages: torch.Tensor, logprobs: torch.Tensor, sampling_logprobs: torch.Tensor,
                    mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """DeepSeek-V3.2's off-policy sequence mask [B, 1] (or [B, T] under per-token advantages [B, T]), without
    gradient: 1 where A >= 0 or the completion's mean per-token ``log pi_sampler - log pi`` over ``mask`` is at most
    ``threshold``, else 0 (TRL 1.16 ``get_off_policy_mask``; NaN log-probs count as 0)."""
    with torch.no_grad():
        mask = mask.to(logprobs.dtype)
        kl = torch.nan_to_num(sampling_logprobs.to(logprobs.dtype) - logprobs.detach(), nan=0.0)
        mean_kl = (kl * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1.0)  # [B, 1]
        return ((advantages >= 0) | (mean_kl <= threshold)).to(logprobs.dtype)


def vespo_weights(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  k_pos: float, lambda_pos: float, k_neg: float, lambda_neg: float, *,
                  is_weights: torch.Tensor | None = None) -> torch.Tensor:
    """VESPO's Gamma weight phi(w) [B, 1] (or [B, T] under per-token advantages), without gradient: w the sequence
    importance weight, ``phi(w) = exp(lam + k log w - lam w)`` (module docstring; TRL 1.16 ``get_gamma_weights``)."""
    with torch.no_grad():
        mask = mask.to(logprobs.dtype)
        token = torch.clamp(logprobs.detach() - old_logprobs, -20.0, 20.0)
        log_w = (token * mask).sum(dim=1, keepdim=True)  # [B, 1]
        if is_weights is not None:
            log_is = torch.clamp(torch.log(is_weights.detach().to(logprobs.dtype)), _LOG_W_MIN, 20.0)
            log_w = log_w + (log_is * mask).sum(dim=1, keepdim=True)
        log_w = torch.clamp(log_w, _LOG_W_MIN, 20.0)
        nonneg = advantages >= 0
        k = torch.where(nonneg, k_pos, k_neg)
        lam = torch.where(nonneg, lambda_pos, lambda_neg).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
        return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def _sapo(ratio: torch.Tensor, advantages: torch.Tensor, tau_pos: float, tau_neg: float) -> torch.Tensor:
    """SAPO's ``-A sigmoid(tau (r - 1)) 4 / tau`` [B, T], tau = tau_pos where A > 0, else tau_neg."""
    tau = torch.where(advantages > 0, ratio.new_tensor(tau_pos), ratio.new_tensor(tau_neg))  # in ratio's dtype
    return -advantages * torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau


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
