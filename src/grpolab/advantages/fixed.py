"""Fixed-reference estimators: each completion's advantage depends on its own reward only, never on its group.

``sign``, ``fixed_baseline``, ``reinforce`` (PSR), ``nsr`` and ``w_reinforce``. None of them needs G >= 2 and
none starves on a group whose rewards are all equal (except where the reward itself gives 0: ``reinforce``
on a wrong completion, ``nsr`` on a right one).

Departure: ``fixed_baseline`` uses a constant baseline where Williams 1992 allows a learned one.
"""

from __future__ import annotations

import torch

from grpolab.advantages.registry import Paper, register

__all__ = ["GRADIENT_STARVATION", "NEGATIVE_REINFORCEMENT", "fixed_baseline", "nsr", "reinforce", "sign",
           "w_reinforce"]

GRADIENT_STARVATION = Paper("Gradient Starvation in Binary-Reward GRPO: Why Group-Mean Centering Fails and Why the "
                            "Simplest Fix Works", "2605.07689", 2026)
NEGATIVE_REINFORCEMENT = Paper("The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning",
                               "2506.01347", 2025)


@register("sign", binary_only=True, order=0, color="tab:blue", paper=GRADIENT_STARVATION,
          granularities=("outcome", "token"))
def sign(rewards: torch.Tensor) -> torch.Tensor:
    """Sign (fixed-reference) advantage: A = 2r - 1, i.e. +1 for a correct completion, -1 for a wrong one.

    Gradient starvation in binary-reward GRPO (arXiv 2605.07689). Never zero, so no group starves;
    in expectation it performs "pass@G failure descent" (gradient ascent on pass@G).
    """
    return 2.0 * rewards - 1.0


@register("fixed_baseline", order=7, color="tab:olive", paper=GRADIENT_STARVATION)
def fixed_baseline(rewards: torch.Tensor, *, baseline: float = 0.5) -> torch.Tensor:
    """Fixed baseline: A = r - b with a constant b (default 0.5; ``sign`` is 2 x this at b = 0.5).

    The REINFORCE baseline of Williams 1992 with a constant instead of a learned or group value; the
    fixed-reference family of arXiv 2605.07689.
    """
    return rewards - float(baseline)


@register("reinforce", order=4, color="tab:purple", paper=NEGATIVE_REINFORCEMENT)
def reinforce(rewards: torch.Tensor) -> torch.Tensor:
    """Positive-sample reinforcement (PSR): A = r, so only rewarded completions are reinforced.

    Zhu et al. 2025, The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning
    (arXiv 2506.01347); plain REINFORCE without a baseline (Williams 1992).
    """
    return rewards.clone()


@register("nsr", order=5, color="tab:brown", paper=NEGATIVE_REINFORCEMENT)
def nsr(rewards: torch.Tensor) -> torch.Tensor:
    """Negative-sample reinforcement (NSR): A = r - 1, so only unrewarded completions are pushed down.

    Zhu et al. 2025 (arXiv 2506.01347).
    """
    return rewards - 1.0


@register("w_reinforce", binary_only=True, order=6, color="tab:pink", paper=NEGATIVE_REINFORCEMENT)
def w_reinforce(rewards: torch.Tensor, *, lam: float = 0.1) -> torch.Tensor:
    """Weighted REINFORCE: A = lambda for a correct completion and -1 for a wrong one (default lambda 0.1).

    Zhu et al. 2025 (arXiv 2506.01347): the PSR term down-weighted by lambda added to NSR.
    """
    return float(lam) * rewards - (1.0 - rewards)
