"""Advantage estimators for outcome (binary) rewards: one registry, one signature.

Every estimator maps ``rewards[P, G]`` (P prompts, G completions each) to ``advantages[P, G]``::

    fn(rewards: Tensor[P, G], *, <keyword hyper-parameters>) -> Tensor[P, G]

Under an outcome-only reward every token of a completion gets its completion's advantage (the credit
assignment of the GRPO-foundations paper), so a per-completion advantage is all the trainer needs.

Input rules (enforced once, in ``compute_advantages``, for every estimator):

* NaN marks an unscorable completion: it gets advantage 0 and is left out of its group's statistics.
* +-inf, a rank other than 2, G < 2 for an estimator that needs a group, or non-binary rewards for an
  estimator defined only for binary rewards raise a ``ValueError`` that names the estimator, the
  problem and the allowed input. No estimator returns NaN.

Departures from the papers:

* ``grpo`` divides by the *sample* (Bessel-corrected) standard deviation by default, as DeepSeekMath's
  reference code and TRL do, so that grpolab's advantages equal TRL's exactly; ``std="population"``
  gives the biased version. With G = 2 and one success the two differ by sqrt(2).
* Statistics over a group with unscorable members use only its scorable members; the papers assume
  every completion is scored.
* ``ngrpo`` implements only NGRPO's advantage calibration (the virtual maximum-reward sample); its
  asymmetric clipping belongs to the loss (``epsilon_low`` / ``epsilon_high`` in ``grpolab.losses``).
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Estimator", "available", "compute_advantages", "display_colors", "display_order", "entry_for", "get",
           "info", "parse_spec", "register"]

EstimatorFn = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator and what it accepts.

    Attributes:
        name: registry name, as the papers spell it.
        fn: ``fn(rewards[P, G], **hyperparameters) -> advantages[P, G]``; rewards arrive validated,
            as float64, with NaN for unscorable completions.
        needs_group: the estimator uses group statistics, so G >= 2 is required.
        binary_only: the estimator is defined only for rewards in {0, 1}.
        zero_sum: the advantages of a fully scored group always sum to 0 (group-centred estimators);
            these starve on groups whose rewards are all equal.
        order: display order in reports and tables (the papers' order; lower first).
        color: the estimator's colour in every figure (a matplotlib colour).
    """

    name: str
    fn: EstimatorFn
    needs_group: bool
    binary_only: bool
    zero_sum: bool
    order: int = 100
    color: str | None = None


_REGISTRY: dict[str, Estimator] = {}


def register(
    name: str, *, needs_group: bool = False, binary_only: bool = False, zero_sum: bool = False,
    order: int = 100, color: str | None = None,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator that registers ``fn`` under ``name``; a name can be registered only once. ``order`` and
    ``color`` are display metadata (reports, figures); estimators without a colour get a spare one."""

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        if name in _REGISTRY:
            raise ValueError(f"advantage estimator {name!r} is already registered; pick another name")
        _REGISTRY[name] = Estimator(name, fn, needs_group, binary_only, zero_sum, order, color)
        return fn

    return decorator


# Colours for estimators the registry gives none (and for ``+variants``), in this order: tab10 backwards,
# so that they differ from the registered estimators' own colours first.
_SPARE_COLORS = ("tab:cyan", "tab:olive", "tab:gray", "tab:pink", "tab:brown", "tab:purple", "tab:red",
                 "tab:green", "tab:orange", "tab:blue")


def entry_for(name: str) -> Estimator | None:
    """The entry of an estimator spelled ``name`` or ``name+variant``; None if unregistered."""
    return _REGISTRY.get(name.split("+", 1)[0])


def display_order(names: Iterable[str]) -> list[str]:
    """The distinct ``names`` in the registry's display order, each followed by its ``+`` variants; unknown
    names last. Every table and figure orders estimators this way."""
    def key(name: str) -> tuple[int, str]:
        entry = entry_for(name)
        return (entry.order if entry is not None else 10_000), name

    return sorted(set(names), key=key)


def display_colors(names: Iterable[str]) -> dict[str, str]:
    """Each plain registered estimator's own colour; ``+variants`` and unregistered names get spare colours
    in display order. Every figure colours estimators this way (matplotlib colour names)."""
    spare = itertools.cycle(_SPARE_COLORS)
    colors: dict[str, str] = {}
    for name in display_order(names):
        entry = entry_for(name)
        colors[name] = entry.color if entry is not None and entry.color and "+" not in name else next(spare)
    return colors


# A comparison may name an estimator with this suffix (``dr_grpo+dynamic``): the same estimator with DAPO's
# dynamic sampling switched on in the trainer.
DYNAMIC_SUFFIX = "+dynamic"


def parse_spec(spec: str) -> tuple[str, bool]:
    """``'dr_grpo+dynamic'`` -> (``'dr_grpo'``, True); ``ValueError`` listing the known names if unknown."""
    name, dynamic = (spec[: -len(DYNAMIC_SUFFIX)], True) if spec.endswith(DYNAMIC_SUFFIX) else (spec, False)
    if name not in _REGISTRY:
        raise ValueError(f"unknown estimator {spec!r}; choose from {', '.join(available())} "
                         f"(append {DYNAMIC_SUFFIX} for dynamic sampling)")
    return name, dynamic


def available() -> list[str]:
    """Names of all registered estimators, sorted."""
    return sorted(_REGISTRY)


def info(name: str) -> Estimator:
    """The registry entry of ``name`` (``ValueError`` listing the known names if it is unknown)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown advantage estimator {name!r}; choose one of {', '.join(available())}")
    return _REGISTRY[name]


def get(name: str) -> EstimatorFn:
    """A callable ``fn(rewards, **hyperparameters)`` that validates its input like ``compute_advantages``."""
    info(name)
    return lambda rewards, **hyperparameters: compute_advantages(name, rewards, **hyperparameters)


def compute_advantages(name: str, rewards: Any, **hyperparameters: Any) -> torch.Tensor:
    """Advantages[P, G] of estimator ``name`` for ``rewards[P, G]``.

    Args:
        name: a registered estimator (see ``available()``).
        rewards: [P, G] torch tensor, numpy array or nested list; NaN (or None in a list) = unscorable.
        **hyperparameters: the estimator's keyword hyper-parameters (e.g. ``k`` for ``passk``).

    Returns:
        A float tensor of the same shape (the input's floating dtype, else float32); finite everywhere,
        0 where the reward was NaN.
    """
    estimator = info(name)
    values, out_dtype, device = _as_float64(rewards, name)
    _validate(values, estimator)
    try:
        advantages = estimator.fn(values, **hyperparameters)
    except TypeError as error:
        raise ValueError(
            f"advantage estimator {name!r}: bad hyper-parameters {hyperparameters}: {error}"
        ) from None
    advantages = torch.where(torch.isnan(values), torch.zeros_like(advantages), advantages)
    result = advantages.to(dtype=out_dtype, device=device)
    if not torch.isfinite(result).all():  # also catches finite float64 values that overflow a float32 output
        raise ValueError(f"advantage estimator {name!r} produced non-finite {out_dtype} advantages for rewards "
                         f"{values}; use rewards of moderate size (binary rewards are 0 and 1)")
    return result


def _as_float64(rewards: Any, name: str) -> tuple[torch.Tensor, torch.dtype, torch.device]:
    if isinstance(rewards, torch.Tensor):
        dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
        return rewards.detach().to(torch.float64), dtype, rewards.device
    try:
        array = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"advantage estimator {name!r}: rewards must be numbers in a [P, G] array ({error})"
        ) from None
    source_dtype = getattr(rewards, "dtype", None)
    is_float = isinstance(source_dtype, np.dtype) and np.issubdtype(source_dtype, np.floating)
    dtype = torch.from_numpy(np.empty(0, dtype=source_dtype)).dtype if is_float else torch.float32
    return torch.from_numpy(array), dtype, torch.device("cpu")


def _validate(rewards: torch.Tensor, estimator: Estimator) -> None:
    name = estimator.name
    if rewards.dim() != 2:
        raise ValueError(
            f"advantage estimator {name!r}: rewards must have shape [P, G] (prompts x group), "
            f"got {rewards.dim()} dimension(s) with shape {tuple(rewards.shape)}"
        )
    if torch.isinf(rewards).any():
        raise ValueError(
            f"advantage estimator {name!r}: rewards contain +-inf; use finite rewards, or NaN to mark "
            "an unscorable completion"
        )
    if estimator.needs_group and rewards.shape[1] < 2:
        raise ValueError(
            f"advantage estimator {name!r} needs groups of G >= 2 completions per prompt, got G = "
            f"{rewards.shape[1]}; raise the group size or use a fixed-reference estimator such as 'sign'"
        )
    scored = rewards[~torch.isnan(rewards)]
    if estimator.binary_only and not ((scored == 0) | (scored == 1)).all():
        bad = scored[(scored != 0) & (scored != 1)][:3].tolist()
        raise ValueError(
            f"advantage estimator {name!r} is defined only for binary rewards in {{0, 1}} (or NaN), "
            f"got values such as {bad}"
        )


# ---------------------------------------------------------------------------- group statistics


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


def _std(count: torch.Tensor, squares: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "sample":
        return torch.sqrt(squares / (count - 1).clamp(min=1))
    if kind == "population":
        return torch.sqrt(squares / count.clamp(min=1))
    raise ValueError(f"advantage estimator 'grpo': std must be 'sample' or 'population', got {kind!r}")


def _divide(numerator: torch.Tensor, spread: torch.Tensor, eps: float) -> torch.Tensor:
    """numerator / (spread + eps), and 0 where the spread is 0 (so eps = 0 never gives 0 / 0)."""
    safe = torch.where(spread > 0, spread, torch.ones_like(spread))
    return torch.where(spread > 0, numerator / (safe + eps), torch.zeros_like(numerator))


# ---------------------------------------------------------------------------- estimators


@register("grpo", needs_group=True, zero_sum=True, order=2, color="tab:green")
def grpo(rewards: torch.Tensor, *, eps: float = 1e-4, std: str = "sample") -> torch.Tensor:
    """GRPO: A = (r - mean_g) / (std_g + eps).

    Shao et al. 2024, DeepSeekMath (arXiv 2402.03300). ``std="sample"`` (default) is the
    Bessel-corrected standard deviation that DeepSeekMath's code and TRL use (``torch.std``), kept so
    that advantages match TRL's; ``std="population"`` divides by G instead of G - 1. Groups whose
    rewards are all equal get 0: the starving case.
    """
    count, mean, squares = _group_stats(rewards)
    return _divide(rewards - mean, _std(count, squares, std), eps)


@register("dr_grpo", needs_group=True, zero_sum=True, order=1, color="tab:orange")
def dr_grpo(rewards: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO: A = r - mean_g, no division by the standard deviation.

    Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective (arXiv 2503.20783).
    """
    _, mean, _ = _group_stats(rewards)
    return rewards - mean


@register("rloo", needs_group=True, zero_sum=True, order=3, color="tab:red")
def rloo(rewards: torch.Tensor) -> torch.Tensor:
    """RLOO: A_i = r_i - mean of the other G - 1 rewards = G / (G - 1) * (r_i - mean_g).

    Ahmadian et al. 2024, Back to Basics: Revisiting REINFORCE Style Optimization (arXiv 2402.14740).
    A group with fewer than two scorable completions gets 0 (there is no leave-one-out baseline).
    """
    count, mean, _ = _group_stats(rewards)
    scale = torch.where(count > 1, count / (count - 1).clamp(min=1), torch.zeros_like(count))
    return scale * (rewards - mean)


@register("sign", binary_only=True, order=0, color="tab:blue")
def sign(rewards: torch.Tensor) -> torch.Tensor:
    """Sign (fixed-reference) advantage: A = 2r - 1, i.e. +1 for a correct completion, -1 for a wrong one.

    Gradient starvation in binary-reward GRPO (arXiv 2605.07689). Never zero, so no group starves;
    in expectation it performs "pass@G failure descent" (gradient ascent on pass@G).
    """
    return 2.0 * rewards - 1.0


@register("fixed_baseline", order=7, color="tab:olive")
def fixed_baseline(rewards: torch.Tensor, *, baseline: float = 0.5) -> torch.Tensor:
    """Fixed baseline: A = r - b with a constant b (default 0.5; ``sign`` is 2 x this at b = 0.5).

    The REINFORCE baseline of Williams 1992 with a constant instead of a learned or group value; the
    fixed-reference family of arXiv 2605.07689.
    """
    return rewards - float(baseline)


@register("reinforce", order=4, color="tab:purple")
def reinforce(rewards: torch.Tensor) -> torch.Tensor:
    """Positive-sample reinforcement (PSR): A = r, so only rewarded completions are reinforced.

    Zhu et al. 2025, The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning
    (arXiv 2506.01347); plain REINFORCE without a baseline (Williams 1992).
    """
    return rewards.clone()


@register("nsr", order=5, color="tab:brown")
def nsr(rewards: torch.Tensor) -> torch.Tensor:
    """Negative-sample reinforcement (NSR): A = r - 1, so only unrewarded completions are pushed down.

    Zhu et al. 2025 (arXiv 2506.01347).
    """
    return rewards - 1.0


@register("w_reinforce", binary_only=True, order=6, color="tab:pink")
def w_reinforce(rewards: torch.Tensor, *, lam: float = 0.1) -> torch.Tensor:
    """Weighted REINFORCE: A = lambda for a correct completion and -1 for a wrong one (default lambda 0.1).

    Zhu et al. 2025 (arXiv 2506.01347): the PSR term down-weighted by lambda added to NSR.
    """
    return float(lam) * rewards - (1.0 - rewards)


@register("reinforce_pp", needs_group=True, zero_sum=True, order=8, color="tab:cyan")
def reinforce_pp(rewards: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """REINFORCE++ baseline: A = r - mean_g, then whitened over the whole batch.

    Hu et al. 2025, REINFORCE++ (arXiv 2501.03262), the "REINFORCE++-baseline" variant: the group mean
    is subtracted, then the batch mean and batch standard deviation (population) of the centred values
    normalise them. Departure: grpolab whitens per completion, not per token (equal under outcome
    rewards when all completions have the same length).
    """
    _, mean, _ = _group_stats(rewards)
    centred = rewards - mean
    scored = centred[~torch.isnan(centred)]
    if scored.numel() == 0:
        return torch.zeros_like(rewards)
    batch_mean = scored.mean()
    batch_std = scored.std(unbiased=False)
    return _divide(centred - batch_mean, batch_std, eps)


@register("batch_std", needs_group=True, zero_sum=True, order=12, color="darkcyan")
def batch_std(rewards: torch.Tensor, *, eps: float = 1e-4, std: str = "sample") -> torch.Tensor:
    """Lite PPO's advantage: A = (r - mean_g) / (std_batch + eps), group-mean centring, batch-level std scaling.

    Liu et al. 2025, Tricks or Traps? A Deep Dive into RL for LLM Reasoning (arXiv 2508.08221); TRL's
    ``scale_rewards="batch"``. The standard deviation is over every scorable reward of the batch (sample by
    default, as TRL's; ``std="population"`` divides by their count), so a group whose rewards are all equal
    still gets 0 while one mixed group is not blown up by its own small spread. A batch whose rewards are all
    equal gets 0.
    """
    if std not in ("sample", "population"):
        raise ValueError(f"advantage estimator 'batch_std': std must be 'sample' or 'population', got {std!r}")
    _, mean, _ = _group_stats(rewards)
    scored = rewards[~torch.isnan(rewards)]  # every scorable reward of the batch
    if scored.numel() < 2:
        return torch.zeros_like(rewards)
    count, _, squares = _group_stats(scored.reshape(1, -1))
    spread = _std(count, squares, std).reshape(())
    return _divide(rewards - mean, spread.expand_as(rewards), eps)


def _log_comb(n: torch.Tensor, k: int) -> torch.Tensor:
    """log C(n, k) for integer-valued n >= k >= 0 (elementwise)."""
    return torch.lgamma(n + 1) - math.lgamma(k + 1) - torch.lgamma(n - k + 1)


def _comb_ratio(top: torch.Tensor, bottom: torch.Tensor, k: int) -> torch.Tensor:
    """C(top, k) / C(bottom, k), 0 where top < k."""
    ratio = torch.exp(_log_comb(top.clamp(min=k), k) - _log_comb(bottom, k))
    return torch.where(top >= k, ratio, torch.zeros_like(ratio))


@register("passk", needs_group=True, binary_only=True, zero_sum=True, order=9, color="tab:gray")
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


@register("ngrpo", needs_group=True, order=10, color="gold")
def ngrpo(rewards: torch.Tensor, *, max_reward: float = 1.0, eps: float = 1e-4) -> torch.Tensor:
    """NGRPO advantage calibration: group statistics include one virtual sample with the maximum reward.

    Nan et al. 2025, NGRPO: Negative-enhanced Group Relative Policy Optimization (arXiv 2509.18851).
    A = (r - mean') / (std' + eps), with mean' and std' (population) over the G scored rewards plus a
    virtual ``max_reward``. An all-wrong group then gets negative advantages instead of 0; an
    all-correct group still gets 0.
    """
    count, mean, squares = _group_stats(rewards)
    virtual_mean = mean + (max_reward - mean) / (count + 1)  # = (count * mean + max_reward) / (count + 1)
    virtual_squares = squares + count * (mean - virtual_mean) ** 2 + (max_reward - virtual_mean) ** 2
    virtual_std = torch.sqrt(virtual_squares / (count + 1))
    return _divide(rewards - virtual_mean, virtual_std, eps)


@register("maxrl", needs_group=True, zero_sum=True, order=11, color="navy")
def maxrl(rewards: torch.Tensor) -> torch.Tensor:
    """MaxRL: A = (r - mean_g) / mean_g, and 0 for a group whose mean reward is 0.

    Tajwar et al. 2026, Maximum Likelihood Reinforcement Learning (arXiv 2602.02710): dividing by
    the success rate p makes the expected update the gradient of log p rather than of p, so rarely
    solved prompts weigh as much as often solved ones. All-wrong and all-correct groups still get 0.
    """
    _, mean, _ = _group_stats(rewards)
    safe_mean = torch.where(mean > 0, mean, torch.ones_like(mean))
    return torch.where(mean > 0, (rewards - mean) / safe_mean, torch.zeros_like(rewards))
