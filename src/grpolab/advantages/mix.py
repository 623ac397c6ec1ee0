"""Composed advantages: ``mix-A-B-L`` is L * A + (1 - L) * B, two registered estimators weighed by L in [0, 1]
(L weighs the first).

The spelling is one word of estimator names, ``-`` and a number (``mix-sign-dr_grpo-0.5``), so that it passes
unchanged through the comma-separated ``--estimators`` list, an arm's ``+remedy`` suffixes
(``mix-sign-dr_grpo-0.5+mask``) and the run folders named after an arm; no built-in estimator's name holds a
``-``, so the parts cannot be misread. Importing this module registers the spelling
(``registry.register_composition``), and the registry resolves it to an ``Estimator`` wherever a name is looked up
(``--advantage``, ``--estimators``, ``compute_advantages``), so nothing else lists the mixes.

Refused in one line (a ``ValueError`` naming the spelling and the fix): a part that is not registered, a part that
is itself a mix (no nesting), a wrong number of parts, L not a number in [0, 1], and a part with per-token
advantages (``optimal_token_baseline``: its [P * G, T] cannot be added to a [P, G]).

Each part runs at its registry defaults: a mix takes no ``--advantage-kwargs``. The flags combine as the sum does:
G >= 2 if a part needs it, binary-only if a part is, completion lengths if a part needs them, zero-sum where every
part with a non-zero weight is, and the reward granularities both parts have. ``part_metrics`` gives each part's
share of a step's advantages, which grpolab's engine logs (``loss/mix_*``).

No paper defines it: it interpolates between two estimators (a fixed-reference one such as ``sign`` and a
group-centred one such as ``dr_grpo``) so that a comparison can ask how much of each an update wants.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from grpolab.advantages.registry import _REGISTRY, Estimator, EstimatorFn, compute_advantages, register_composition

__all__ = ["PREFIX", "Mix", "entry", "is_mix", "parse", "part_metrics"]

PREFIX = "mix-"
_EXAMPLE = "mix-FIRST-SECOND-LAMBDA, e.g. mix-sign-dr_grpo-0.5 for 0.5 * sign + 0.5 * dr_grpo"


@dataclass(frozen=True)
class Mix:
    """A parsed ``mix-FIRST-SECOND-LAMBDA``: the advantage ``weight * first + (1 - weight) * second``."""

    first: str
    second: str
    weight: float


def is_mix(name: str) -> bool:
    """Whether ``name`` is spelled as a mix (it may still be malformed: ``parse`` says)."""
    return name.startswith(PREFIX)


def parse(name: str, registered: Mapping[str, Estimator]) -> Mix:
    """The mix ``name`` spells; ``ValueError`` in one line for a malformed one (``registered``: the estimators)."""
    parts = name[len(PREFIX) :].split("-")
    if "mix" in parts:
        raise ValueError(
            f"estimator {name!r}: a mix cannot hold another mix; spell one mix of two registered estimators, {_EXAMPLE}"
        )
    if len(parts) != 3:
        raise ValueError(f"estimator {name!r} is not a mix of two estimators; spell it {_EXAMPLE}")
    first, second, text = parts
    unknown = [part for part in (first, second) if part not in registered]
    if unknown:
        raise ValueError(
            f"estimator {name!r}: unknown part {unknown[0]!r}; choose the parts from {', '.join(sorted(registered))}"
        )
    try:
        weight = float(text)
    except ValueError:
        weight = math.nan
    if not 0.0 <= weight <= 1.0:
        raise ValueError(
            f"estimator {name!r}: lambda must be a number in [0, 1] (the first part's weight), got {text!r}"
        )
    return Mix(first, second, weight)


def entry(name: str, registered: Mapping[str, Estimator]) -> Estimator:
    """The registry ``Estimator`` of the mix ``name``, its flags combined from its parts' entries."""
    mix = parse(name, registered)
    first, second = registered[mix.first], registered[mix.second]
    for part in (first, second):
        if part.needs_token_statistics:
            raise ValueError(
                f"estimator {name!r}: {part.name!r} gives each token its own advantage, which cannot be "
                "added to one advantage per completion; mix estimators of one advantage per completion"
            )
    zero_sum = (first.zero_sum or mix.weight == 0) and (second.zero_sum or mix.weight == 1)
    return replace(
        first,
        name=name,
        fn=_composed(first, second, mix.weight),
        needs_group=first.needs_group or second.needs_group,
        binary_only=first.binary_only or second.binary_only,
        zero_sum=zero_sum,
        order=100,
        color=None,
        paper=None,
        granularities=tuple(g for g in first.granularities if g in second.granularities),
        needs_lengths=first.needs_lengths or second.needs_lengths,
    )


def _composed(first: Estimator, second: Estimator, weight: float) -> EstimatorFn:
    def fn(rewards: torch.Tensor, *, lengths: torch.Tensor | None = None, **hyperparameters: Any) -> torch.Tensor:
        if hyperparameters:
            raise ValueError(
                f"a mix takes no hyper-parameters (its parts run at their registry defaults), got "
                f"{', '.join(sorted(hyperparameters))}"
            )
        return weight * _part(first, rewards, lengths) + (1 - weight) * _part(second, rewards, lengths)

    return fn


def _part(part: Estimator, rewards: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    return part.fn(rewards, lengths=lengths) if part.needs_lengths else part.fn(rewards)


def part_metrics(name: str, rewards: np.ndarray, lengths: np.ndarray) -> dict[str, float]:
    """Each part's share of the advantages of a mix ``name`` on ``rewards[P, G]`` (``lengths[P, G]``: tokens per
    completion): ``loss/mix_first`` = mean |L * A_first| and ``loss/mix_second`` = mean
    |(1 - L) * A_second| over the scored completions, and ``loss/mix_first_share``, the first's share of
    their sum (left out when both are 0). {} when ``name`` is not a mix, or nothing was scored."""
    scored = ~np.isnan(rewards)
    if not is_mix(name) or not scored.any():
        return {}
    mix = parse(name, _REGISTRY)
    first, second = (
        float(np.abs(weight * compute_advantages(part, rewards, lengths=lengths).numpy())[scored].mean())
        for part, weight in ((mix.first, mix.weight), (mix.second, 1 - mix.weight))
    )
    shares = {"loss/mix_first_share": first / (first + second)} if first + second > 0 else {}
    return {"loss/mix_first": first, "loss/mix_second": second, **shares}


register_composition(PREFIX, entry)
