"""verl adapter: every grpolab estimator as a verl advantage estimator named ``grpolab_<name>``.

verl (``verl/trainer/ppo/core_algos.py``) keeps advantage estimators in a registry filled by
``register_adv_est(name)`` and calls them as::

    fn(token_level_rewards[B, T], response_mask[B, T], index[B], config=..., **other) -> (advantages[B, T],
                                                                                        returns[B, T])

where ``index`` holds the prompt uid of each response (B = P * G rows, a group's rows not necessarily
adjacent). This module adapts that call to grpolab's one signature ``fn(rewards[P, G], **hp) ->
advantages[P, G]``: the outcome reward of a response is the sum of its token-level rewards (as verl's own
``grpo`` does), responses are grouped by ``index``, and each response's advantage is broadcast to its
response tokens (``advantage * response_mask``). ``returns`` equals ``advantages``, as for verl's
outcome estimators.

Use: ``grpolab.integrations.verl.register_all()`` in the process that computes advantages, or load
``grpolab.integrations.verl_plugin`` through verl's plugin hooks (see docs/integrations.md), then set
``algorithm.adv_estimator=grpolab_sign``. Hyper-parameters come from ``register_all(advantage_kwargs=)``,
overridden by ``algorithm.grpolab_kwargs`` in verl's config when present.

Departures from verl's estimators:

* Groups of unequal size (e.g. after verl filtered some responses) are padded to the largest group with
  NaN, which grpolab's registry treats as "unscorable": the padding gets no advantage and is left out of
  the group statistics.
* Without ``index`` an estimator that needs groups raises; verl's ``grpo`` would instead give a group
  of one response mean 0 and std 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch

from grpolab import advantages as advantage_registry

__all__ = ["PREFIX", "group_by_index", "make_adv_estimator", "outcome_advantages", "register_all"]

PREFIX = "grpolab_"
VerlEstimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def group_by_index(scores: torch.Tensor, index: Any) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Scatter per-response scores [B] into rewards [P, G_max] (NaN padded) by the group ids ``index`` [B].

    Returns (rewards [P, G_max] float64, row [B], column [B]): response b sits at rewards[row[b], col[b]].
    """
    ids = np.asarray(index)
    if ids.shape != (scores.shape[0],):
        raise ValueError(f"index must have one group id per response: shape {ids.shape} vs {scores.shape[0]}")
    _, rows = np.unique(ids, return_inverse=True)
    rows = rows.reshape(-1)
    counts = np.bincount(rows)
    order = np.argsort(rows, kind="stable")
    starts = np.cumsum(counts) - counts
    cols = np.empty_like(rows)
    cols[order] = np.arange(len(rows)) - np.repeat(starts, counts)
    rewards = torch.full((len(counts), int(counts.max())), float("nan"), dtype=torch.float64)  # [P, G_max]
    rewards[torch.from_numpy(rows), torch.from_numpy(cols)] = scores.detach().to("cpu", torch.float64)
    return rewards, rows, cols


def outcome_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    **hyperparameters: Any,
) -> torch.Tensor:
    """Token-level advantages [B, T] of grpolab estimator ``name`` for verl's batch."""
    scores = token_level_rewards.sum(dim=-1)  # [B] outcome reward, as in verl's grpo
    if index is None:
        if advantage_registry.info(name).needs_group:
            raise ValueError(f"grpolab_{name} needs groups: verl passed no `uid` index for the responses")
        index = np.arange(scores.shape[0])
    rewards, rows, cols = group_by_index(scores, index)  # [P, G_max]
    advantages = advantage_registry.compute_advantages(name, rewards, **hyperparameters)  # [P, G_max]
    per_response = advantages[torch.from_numpy(rows), torch.from_numpy(cols)]  # [B]
    per_response = per_response.to(token_level_rewards.device, token_level_rewards.dtype)
    return per_response.unsqueeze(-1) * response_mask


def _config_kwargs(config: Any) -> dict[str, Any]:
    """``grpolab_kwargs`` of verl's algorithm config (AlgoConfig or DictConfig), if it has any."""
    getter = getattr(config, "get", None)
    value = getter("grpolab_kwargs", None) if callable(getter) else None
    return dict(value) if value else {}


def make_adv_estimator(name: str, **hyperparameters: Any) -> VerlEstimator:
    """A verl-style estimator for grpolab estimator ``name`` (hyper-parameters fixed here or in config)."""
    advantage_registry.info(name)

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        **_unused: Any,  # verl passes optional extras (reward_baselines, ...) that outcome estimators ignore
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hp = {**hyperparameters, **_config_kwargs(config)}
        with torch.no_grad():
            advantages = outcome_advantages(name, token_level_rewards, response_mask, index, **hp)
        return advantages, advantages

    estimator.__name__ = f"{PREFIX}{name}"
    estimator.__doc__ = f"grpolab estimator {name!r} adapted to verl's advantage interface."
    estimator.grpolab_spec = (name, tuple(sorted(hyperparameters.items())))  # type: ignore[attr-defined]
    return estimator


def _verl_registry() -> tuple[Callable[[str], Callable], Callable[[str], Any]]:
    try:
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn, register_adv_est
    except ImportError as error:
        raise ImportError(
            "grpolab.integrations.verl needs verl (pip install verl); or pass register_adv_est= explicitly"
        ) from error
    return register_adv_est, get_adv_estimator_fn


def register_all(
    names: Iterable[str] | None = None,
    *,
    advantage_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    register_adv_est: Callable[[str], Callable] | None = None,
    get_adv_estimator_fn: Callable[[str], Any] | None = None,
) -> list[str]:
    """Register grpolab estimators with verl as ``grpolab_<name>``; return the registered names.

    Args:
        names: grpolab estimator names (default: all of ``grpolab.advantages.available()``).
        advantage_kwargs: per-estimator hyper-parameters, e.g. ``{"passk": {"k": 4}}``.
        register_adv_est, get_adv_estimator_fn: verl's registry functions (default: imported from verl).

    Calling it again with the same hyper-parameters is a no-op; verl rejects a different function
    under a name that is already taken.
    """
    if register_adv_est is None:
        register_adv_est, get_adv_estimator_fn = _verl_registry()
    kwargs = advantage_kwargs or {}
    registered = []
    for name in names if names is not None else advantage_registry.available():
        estimator = make_adv_estimator(name, **kwargs.get(name, {}))
        if not _already_registered(get_adv_estimator_fn, estimator):
            register_adv_est(estimator.__name__)(estimator)
        registered.append(estimator.__name__)
    return registered


def _already_registered(get_adv_estimator_fn: Callable[[str], Any] | None, estimator: VerlEstimator) -> bool:
    if get_adv_estimator_fn is None:
        return False
    try:
        existing = get_adv_estimator_fn(estimator.__name__)
    except (ValueError, KeyError):
        return False
    return getattr(existing, "grpolab_spec", None) == estimator.grpolab_spec  # type: ignore[attr-defined]
