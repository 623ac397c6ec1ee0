"""The optimal token baseline (OTB): a baseline per token position, from the policy's own per-token probabilities.

Li et al. 2026, The Optimal Token Baseline: Variance Reduction for Long-Horizon LLM-RL (arXiv 2602.07078), as verl
0.9.1 computes it (``compute_optimal_token_baseline_advantage``). Within a group of G completions, token t of
completion i gets

    A_it = R_it - B_t,   B_t = sum_i R_it W_it / sum_i W_it,   W_it = sum_{j <= t} (1 - 2 pi_ij + sum_v pi_j(v)^2)

where R_it is the return from t on (under an outcome reward, the completion's reward at every one of its tokens),
pi_ij the probability the sampling policy gave the token drawn at j, and sum_v pi_j(v)^2 the sum of the squared
probabilities over the vocabulary there (the paper's logit-gradient proxy of the squared gradient norm). Sums run
over the completions that reach t. With ``handle_zero_tail`` (verl's default) the baseline is 0 on the part of a
group's one longest completion that runs past the second longest, where it would be that completion's own return.

Unlike every other estimator the advantages are per token [B, T] (B = P * G), and it needs ``TokenStatistics`` of
the batch besides the rewards: grpolab's own engine computes them in one no-grad forward of the batch before the
update (``grpolab.train.forward.policy_token_statistics``), as verl does in its old-log-prob pass
(``actor.calculate_sum_pi_squared``). ``--engine trl`` cannot pass per-token advantages and refuses it; verl users
run verl's own (``algorithm.adv_estimator=optimal_token_baseline``), which the verl parity tests match to 1e-6.

Departures from verl: an unscorable completion (NaN reward) gets advantage 0 and is left out of its group's sums
and lengths, as every grpolab estimator treats it (verl has no such completions), so a group with one scorable
completion gives it its reward on every token, as verl does a prompt with one response; the sums run in float64; verl's
importance-sampling scaling of W (``rollout_is_weights``) is not offered. The advantages do not sum to 0 over a
group, and a group whose rewards are all 1 still moves its longest completion's tail under ``handle_zero_tail``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from grpolab.advantages.registry import Paper, register

__all__ = ["TokenStatistics", "optimal_token_baseline"]


@dataclass(frozen=True)
class TokenStatistics:
    """Per-token quantities of the policy that sampled a batch of B = P * G completions (rows in group order).

    Attributes:
        mask: [B, T] 1 at each completion token, 0 past its end.
        logprobs: [B, T] the sampling policy's log-probability of each drawn token (at the sampling temperature).
        sum_pi_squared: [B, T] the sum over the vocabulary of the squared probabilities at each token.
    """

    mask: torch.Tensor
    logprobs: torch.Tensor
    sum_pi_squared: torch.Tensor

    @classmethod
    def uniform(cls, rows: int, tokens: int = 1, vocab: int = 2) -> TokenStatistics:
        """Statistics of a uniform policy over ``vocab`` tokens (for checking an estimator's settings early)."""
        shape = (rows, tokens)
        return cls(torch.ones(shape), torch.full(shape, -math.log(vocab)), torch.full(shape, 1.0 / vocab))

    def checked(self, rows: int, name: str) -> TokenStatistics:
        """The statistics as float64, after checking their shapes and values (``ValueError`` naming the problem; a
        float32 rounding of 1e-4 past 0 or 1 is let through)."""
        shapes = {tuple(t.shape) for t in (self.mask, self.logprobs, self.sum_pi_squared)}
        if len(shapes) != 1 or len(next(iter(shapes))) != 2 or next(iter(shapes))[0] != rows:
            raise ValueError(f"advantage estimator {name!r}: token statistics must be three [B, T] tensors with "
                             f"B = {rows} rows (P * G), got shapes {sorted(shapes)}")
        mask = self.mask.detach().double()
        logprobs, squares = self.logprobs.detach().double(), self.sum_pi_squared.detach().double()
        valid = mask > 0
        if not (torch.isfinite(logprobs[valid]).all() and (logprobs[valid] <= 1e-4).all()):
            raise ValueError(f"advantage estimator {name!r}: token log-probabilities must be finite and <= 0 at "
                             "completion tokens")
        squares_ok = torch.isfinite(squares[valid]).all() and (squares[valid] >= 0).all()
        if not (squares_ok and (squares[valid] <= 1 + 1e-4).all()):
            raise ValueError(f"advantage estimator {name!r}: the sum of squared probabilities must lie in [0, 1] "
                             "at completion tokens")
        return TokenStatistics(mask, torch.where(valid, logprobs, 0.0), torch.where(valid, squares, 0.0))


@register("optimal_token_baseline", needs_group=True, order=17, color="mediumvioletred", needs_token_statistics=True,
          paper=Paper("The Optimal Token Baseline: Variance Reduction for Long-Horizon LLM-RL", "2602.07078", 2026))
def optimal_token_baseline(rewards: torch.Tensor, *, statistics: TokenStatistics, handle_zero_tail: bool = True,
                           epsilon: float = 1e-8) -> torch.Tensor:
    """Per-token advantages [P * G, T] of outcome rewards [P, G] under the optimal token baseline (module
    docstring); ``statistics`` arrive checked, as float64."""
    p, g = rewards.shape
    t = statistics.mask.shape[1]
    scored = ~torch.isnan(rewards).reshape(-1, 1)  # [B, 1]
    mask = statistics.mask * scored  # [B, T]; an unscorable completion is out of its group's sums
    returns = torch.nan_to_num(rewards).reshape(-1, 1) * mask  # [B, T]
    step_weight = (1 - 2 * statistics.logprobs.exp() + statistics.sum_pi_squared) * mask
    weight = step_weight.cumsum(dim=1)  # W_it [B, T]
    grouped = (returns.view(p, g, t), weight.view(p, g, t), mask.view(p, g, t))
    numerator = (grouped[0] * grouped[1] * grouped[2]).sum(dim=1, keepdim=True)  # [P, 1, T]
    denominator = (grouped[1] * grouped[2]).sum(dim=1, keepdim=True) + epsilon
    baseline = (numerator / denominator).expand(p, g, t)
    if handle_zero_tail:
        baseline = torch.where(_lone_tail(grouped[2]), 0.0, baseline)
    return ((grouped[0] - baseline) * grouped[2]).reshape(p * g, t)


def _lone_tail(mask: torch.Tensor) -> torch.Tensor:
    """[P, G, T] True on the tokens of a group's one longest completion past the second longest's length."""
    lengths = mask.sum(dim=2)  # [P, G]
    top = lengths.topk(2, dim=1).values  # [P, 2]
    longest, second = top[:, 0:1], top[:, 1:2]
    lone = ((lengths == longest).sum(dim=1, keepdim=True) == 1) & (longest > second)  # [P, 1]
    position = torch.arange(mask.shape[2], device=mask.device).view(1, 1, -1)
    return (lone & (lengths == longest)).unsqueeze(2) & (position >= second.unsqueeze(2))
