"""Group-centred estimators: each completion's advantage is measured against its own group's statistics.

``grpo``, ``dr_grpo``, ``rloo``, ``reinforce_pp``, ``ngrpo``, ``avspo``, ``maxrl``, ``batch_std``, ``gpg`` and ``opo``,
with the group statistics they share (over scorable members only: NaN rewards are left out).

Departures from the papers:

* ``grpo`` divides by the *sample* (Bessel-corrected) standard deviation by default, as DeepSeekMath's
  reference code and TRL do, so that grpolab's advantages equal TRL's exactly; ``std="population"``
  gives the biased version. With G = 2 and one success the two differ by sqrt(2).
* Statistics over a group with unscorable members use only its scorable members; the papers assume
  every completion is scored.
* ``ngrpo`` implements only NGRPO's advantage calibration (the virtual maximum-reward sample); its
  asymmetric clipping belongs to the loss (``epsilon_low`` / ``epsilon_high`` in ``grpolab.losses``).
* ``avspo`` implements only AVSPO's virtual samples in the group statistics, as a stateless estimator: one
  virtual ``low`` (0) and one virtual ``high`` (1) reward join every group's mean and population std. The paper
  injects its virtual samples adaptively, guided by its Advantage Collapse Rate monitored during training; that
  schedule needs state across steps, which the registry's ``fn(rewards[P, G])`` does not have. It is an estimator,
  not a remedy: it changes only how advantages are computed from a group's rewards (as ``ngrpo``'s one virtual
  sample does), needs no trainer code, and runs wherever grpolab's estimators run (the TRL engine included).
* ``reinforce_pp`` whitens per completion, not per token (equal under outcome rewards when all completions
  have the same length).
* ``batch_std`` takes the batch's standard deviation over completions, as TRL's ``scale_rewards="batch"`` does;
  Lite PPO's batch is the same, its paper does not say whether the std is the sample or the population one.
* ``gpg`` follows verl 0.9.1 (``compute_gpg_outcome_advantage``): its batch factor alpha is the number of
  responses over the number of *non-zero* rewards. The GPG paper describes alpha as the batch size over the
  number of valid samples; grpolab counts what verl counts. Unscorable completions are in neither count.
* ``opo`` weighs the baseline by completion length, as verl 0.9.1's ``compute_opo_outcome_advantage`` does (the
  OPO paper's optimal baseline, with the squared gradient norm of a completion taken as proportional to its
  length). A group whose scored completions have no tokens at all gets 0. OPO's other half, strictly on-policy
  training (one gradient step per batch), is a trainer setting, not part of the estimator.
"""

from __future__ import annotations

import math

import torch

from grpolab.advantages.registry import Paper, register

__all__ = ["AVSPO", "DEEPSEEKMATH", "avspo", "batch_std", "dr_grpo", "gpg", "grpo", "maxrl", "ngrpo", "opo",
           "reinforce_pp", "rloo"]

DEEPSEEKMATH = Paper("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
                     "2402.03300", 2024)


def _group_stats(rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group (count, mean, sum of squared deviations) over scorable members; shapes [P, 1].

    The mean is taken relative to a pivot (the group's largest scored reward), so a constant group gets
    exactly its value as mean and exactly 0 deviations, whatever the value (no 1e-17 rounding noise that
    a zero ``eps`` would blow up to O(1) advantages).
    """
    valid = ~torch.isnan(rewards)
    count = valid.sum(dim=1, keepdim=True).to(rewards.dtype)
    pivot = torch.where(valid, rewards, torch.full_like(rewards, -math.inf)).amax(dim=1, keepdim=True)
    pivot = torch.where(torch.isfinite(pivot), pivot, torch.zeros_like(pivot))  # [P, 1]; 0 if all NaN
    shifted = torch.where(valid, rewards - pivot, torch.zeros_like(rewards))
    mean = pivot + shifted.sum(dim=1, keepdim=True) / count.clamp(min=1)
    squared = torch.where(valid, (rewards - mean) ** 2, torch.zeros_like(rewards))
    return count, mean, squared.sum(dim=1, keepdim=True)


def _std(count: torch.Tensor, squares: torch.Tensor, kind: str, estimator: str) -> torch.Tensor:
    """Per-group standard deviation [P, 1], Bessel-corrected (``kind="sample"``) or not (``"population"``)."""
    if kind == "sample":
        return torch.sqrt(squares / (count - 1).clamp(min=1))
    if kind == "population":
        return torch.sqrt(squares / count.clamp(min=1))
    raise ValueError(f"advantage estimator {estimator!r}: std must be 'sample' or 'population', got {kind!r}")


def _divide(numerator: torch.Tensor, spread: torch.Tensor, eps: float) -> torch.Tensor:
    """numerator / (spread + eps), and 0 where the spread is 0 (so eps = 0 never gives 0 / 0)."""
    safe = torch.where(spread > 0, spread, torch.ones_like(spread))
    return torch.where(spread > 0, numerator / (safe + eps), torch.zeros_like(numerator))


@register("grpo", needs_group=True, zero_sum=True, order=2, color="tab:green", paper=DEEPSEEKMATH,
          granularities=("outcome", "token"))
def grpo(rewards: torch.Tensor, *, eps: float = 1e-4, std: str = "sample") -> torch.Tensor:
    """GRPO: A = (r - mean_g) / (std_g + eps).

    Shao et al. 2024, DeepSeekMath (arXiv 2402.03300). ``std="sample"`` (default) is the
    Bessel-corrected standard deviation that DeepSeekMath's code and TRL use (``torch.std``), kept so
    that advantages match TRL's; ``std="population"`` divides by G instead of G - 1. Groups whose
    rewards are all equal get 0: the starving case.
    """
    count, mean, squares = _group_stats(rewards)
    return _divide(rewards - mean, _std(count, squares, std, "grpo"), eps)


@register("dr_grpo", needs_group=True, zero_sum=True, order=1, color="tab:orange", granularities=("outcome", "token"),
          paper=Paper("Understanding R1-Zero-Like Training: A Critical Perspective", "2503.20783", 2025))
def dr_grpo(rewards: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO: A = r - mean_g, no division by the standard deviation.

    Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective (arXiv 2503.20783).
    """
    _, mean, _ = _group_stats(rewards)
    return rewards - mean


@register("rloo", needs_group=True, zero_sum=True, order=3, color="tab:red",
          paper=Paper("Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in "
                      "LLMs", "2402.14740", 2024))
def rloo(rewards: torch.Tensor) -> torch.Tensor:
    """RLOO: A_i = r_i - mean of the other G - 1 rewards = G / (G - 1) * (r_i - mean_g).

    Ahmadian et al. 2024, Back to Basics: Revisiting REINFORCE Style Optimization (arXiv 2402.14740).
    A group with fewer than two scorable completions gets 0 (there is no leave-one-out baseline).
    """
    count, mean, _ = _group_stats(rewards)
    scale = torch.where(count > 1, count / (count - 1).clamp(min=1), torch.zeros_like(count))
    return scale * (rewards - mean)




@register("reinforce_pp", needs_group=True, zero_sum=True, order=8, color="tab:cyan",
          paper=Paper("REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models", "2501.03262",
                      2025))
def reinforce_pp(rewards: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """REINFORCE++ baseline: A = r - mean_g, then whitened over the whole batch.

    Hu et al. 2025, REINFORCE++ (arXiv 2501.03262), the "REINFORCE++-baseline" variant: the group mean
    is subtracted, then the batch mean and batch standard deviation (population) of the centred values
    normalise them. Departure: grpolab whitens per completion, not per token (equal under outcome
    rewards when all completions have the same length). The batch mean of the centred values is 0 by
    construction (each group's sum to 0), so it is not subtracted: the computed one is rounding (8e-17 at G = 3),
    which would give an all-equal group advantages of -8e-17 instead of 0, training it and counting it useful.
    """
    _, mean, _ = _group_stats(rewards)
    centred = rewards - mean
    scored = centred[~torch.isnan(centred)]
    if scored.numel() == 0:
        return torch.zeros_like(rewards)
    return _divide(centred, scored.std(unbiased=False), eps)



@register("ngrpo", needs_group=True, order=10, color="gold",
          paper=Paper("NGRPO: Negative-enhanced Group Relative Policy Optimization", "2509.18851", 2025))
def ngrpo(rewards: torch.Tensor, *, max_reward: float = 1.0, eps: float = 1e-4) -> torch.Tensor:
    """NGRPO advantage calibration: group statistics include one virtual sample with the maximum reward.

    Nan et al. 2025, NGRPO: Negative-enhanced Group Relative Policy Optimization (arXiv 2509.18851).
    A = (r - mean') / (std' + eps), with mean' and std' (population) over the G scored rewards plus a
    virtual ``max_reward``. An all-wrong group then gets negative advantages instead of 0; an
    all-correct group still gets 0.
    """
    count, mean, squares = _with_virtual(*_group_stats(rewards), max_reward)
    return _divide(rewards - mean, torch.sqrt(squares / count), eps)


def _with_virtual(count: torch.Tensor, mean: torch.Tensor, squares: torch.Tensor,
                  value: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A group's (count, mean, sum of squared deviations) [P, 1] with one virtual reward ``value`` added."""
    virtual_mean = mean + (value - mean) / (count + 1)  # = (count * mean + value) / (count + 1)
    virtual_squares = squares + count * (mean - virtual_mean) ** 2 + (value - virtual_mean) ** 2
    return count + 1, virtual_mean, virtual_squares


AVSPO = Paper("Advantage Collapse in Group Relative Policy Optimization: Diagnosis and Mitigation", "2605.21125",
              2026)


@register("avspo", needs_group=True, order=18, color="slateblue", paper=AVSPO)
def avspo(rewards: torch.Tensor, *, low: float = 0.0, high: float = 1.0, eps: float = 1e-4) -> torch.Tensor:
    """AVSPO's virtual samples: each group's mean and std include two virtual rewards, ``low`` and ``high``.

    He et al. 2026, Advantage Collapse in Group Relative Policy Optimization: Diagnosis and Mitigation (arXiv
    2605.21125). A = (r - mean') / (std' + eps), mean' and std' (population) over the G scored rewards plus a
    virtual ``low`` and a virtual ``high``; the virtual samples are statistics only and carry no gradient. An
    all-correct group of binary rewards then gets positive advantages and an all-wrong one negative advantages
    (a Beta(1, 1)-style prior on the group's success rate), instead of 0.
    """
    count, mean, squares = _with_virtual(*_with_virtual(*_group_stats(rewards), low), high)
    return _divide(rewards - mean, torch.sqrt(squares / count), eps)


@register("maxrl", needs_group=True, zero_sum=True, order=11, color="navy",
          paper=Paper("Maximum Likelihood Reinforcement Learning", "2602.02710", 2026))
def maxrl(rewards: torch.Tensor) -> torch.Tensor:
    """MaxRL: A = (r - mean_g) / mean_g, and 0 for a group whose mean reward is 0.

    Tajwar et al. 2026, Maximum Likelihood Reinforcement Learning (arXiv 2602.02710): dividing by
    the success rate p makes the expected update the gradient of log p rather than of p, so rarely
    solved prompts weigh as much as often solved ones. All-wrong and all-correct groups still get 0.
    """
    _, mean, _ = _group_stats(rewards)
    safe_mean = torch.where(mean > 0, mean, torch.ones_like(mean))
    return torch.where(mean > 0, (rewards - mean) / safe_mean, torch.zeros_like(rewards))


@register("batch_std", needs_group=True, zero_sum=True, order=12, color="darkcyan",
          paper=Paper("Tricks or Traps? A Deep Dive into RL for LLM Reasoning", "2508.08221", 2025))
def batch_std(rewards: torch.Tensor, *, eps: float = 1e-4, std: str = "sample") -> torch.Tensor:
    """Lite PPO's advantage: A = (r - mean_g) / (std_batch + eps), group-mean centring, batch-level std scaling.

    Liu et al. 2025, Tricks or Traps? A Deep Dive into RL for LLM Reasoning (arXiv 2508.08221); TRL's
    ``scale_rewards="batch"``. The standard deviation is over every scorable reward of the batch (sample by
    default, as TRL's; ``std="population"`` divides by their count), so a group whose rewards are all equal
    still gets 0 while one mixed group is not blown up by its own small spread. A batch whose rewards are all
    equal gets 0.
    """
    if rewards.numel() == 0:  # no group, or groups of none: nothing to scale
        return rewards.clone()
    _, mean, _ = _group_stats(rewards)
    count, _, squares = _group_stats(rewards.reshape(1, -1))  # the whole batch as one group: [1, 1]
    spread = _std(count, squares, std, "batch_std")  # 0 for fewer than two scorable rewards
    return _divide(rewards - mean, spread.expand_as(rewards), eps)


@register("gpg", needs_group=True, zero_sum=True, order=13, color="darkorange",
          paper=Paper("GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning", "2504.02546",
                      2025))
def gpg(rewards: torch.Tensor, *, f_norm: float = 1.0) -> torch.Tensor:
    """GPG: A = alpha * (r - mean_g) / f_norm, with alpha = B / M over the whole batch.

    Chu et al. 2025, GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning
    (arXiv 2504.02546), as verl 0.9.1 computes it (``compute_gpg_outcome_advantage``): B is the number of
    scored completions in the batch, M the number of them with a non-zero reward (at least 1), so a batch with
    few successes has its group-centred advantages scaled up. Groups whose rewards are all equal still get 0.
    ``f_norm`` is a constant divisor (verl's default 1).
    """
    f_norm = float(f_norm)
    if not math.isfinite(f_norm) or f_norm == 0:
        raise ValueError(f"advantage estimator 'gpg': f_norm must be a finite non-zero number, got {f_norm!r}")
    if rewards.numel() == 0:
        return rewards.clone()
    _, mean, _ = _group_stats(rewards)
    scored = rewards[~torch.isnan(rewards)]
    alpha = scored.numel() / max(int((scored != 0).sum()), 1)
    return alpha * (rewards - mean) / f_norm


@register("opo", needs_group=True, order=14, color="olivedrab", needs_lengths=True,
          paper=Paper("On-Policy RL with Optimal Reward Baseline", "2505.23585", 2025))
def opo(rewards: torch.Tensor, *, lengths: torch.Tensor) -> torch.Tensor:
    """OPO's optimal reward baseline: A_i = r_i - sum_j l_j r_j / sum_j l_j, l the completions' token counts.

    Hao et al. 2025, On-Policy RL with Optimal Reward Baseline (arXiv 2505.23585), as verl 0.9.1 computes it
    (``compute_opo_outcome_advantage``): the baseline that minimises the gradient variance, with each
    completion's squared gradient norm taken as proportional to its length. With equal lengths it is ``dr_grpo``.
    The advantages sum to 0 weighted by length, not plainly (so the zero-sum flag is off). ``lengths`` [P, G]
    come from the caller (``compute_advantages(..., lengths=)``).
    """
    valid = ~torch.isnan(rewards)
    weights = torch.where(valid, lengths, torch.zeros_like(lengths))
    total = weights.sum(dim=1, keepdim=True)  # [P, 1]
    pivot = torch.where(valid, rewards, torch.full_like(rewards, -math.inf)).amax(dim=1, keepdim=True)
    pivot = torch.where(torch.isfinite(pivot), pivot, torch.zeros_like(pivot))  # a constant group: exactly 0
    shifted = torch.where(valid, rewards - pivot, torch.zeros_like(rewards))
    baseline = pivot + (weights * shifted).sum(dim=1, keepdim=True) / total.clamp(min=1e-300)
    return torch.where(total > 0, rewards - baseline, torch.zeros_like(rewards))
