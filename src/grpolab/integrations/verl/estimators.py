"""Every grpolab estimator as a verl advantage estimator named ``grpolab_<name>``.

verl (``verl/trainer/ppo/core_algos.py``) keeps advantage estimators in ``ADV_ESTIMATOR_REGISTRY``, filled
by ``register_adv_est(name)``, and ``ray_trainer.compute_advantage`` calls them as::

    fn(token_level_rewards[B, T], response_mask[B, T], index[B], config=..., **other) -> (advantages[B, T],
                                                                                        returns[B, T])

where ``index`` holds the prompt uid of each response (B responses, a group's rows not necessarily
adjacent, groups not necessarily of equal size). This module adapts that call to grpolab's one signature
``fn(rewards[P, G], **hp) -> advantages[P, G]``: the outcome reward of a response is the sum of its
token-level rewards (as verl's own ``grpo`` does), responses are grouped by ``index`` (padded to the
largest group with NaN, which grpolab's registry treats as "not in the group"), and each response's
advantage is broadcast to its response tokens. ``returns`` equals ``advantages``, as for verl's outcome
estimators.

Conventions. By default (``conventions="verl"``) an estimator with a verl counterpart follows verl's
conventions, so that switching ``algorithm.adv_estimator`` from ``grpo`` to ``grpolab_grpo`` changes
nothing (see ``grpolab.integrations.verl.parity``):

* ``grpolab_grpo`` = verl ``grpo``: epsilon 1e-6 (grpolab's own trainer uses 1e-4), and
  ``algorithm.norm_adv_by_std_in_grpo=False`` turns it into ``dr_grpo``, as in verl;
* ``grpolab_dr_grpo`` = verl ``grpo`` with ``norm_adv_by_std_in_grpo=False``; ``grpolab_rloo`` = verl
  ``rloo``; ``grpolab_reinforce_pp`` = verl ``reinforce_plus_plus_baseline`` (token-level whitening);
  ``grpolab_grpo_passk``, ``grpolab_opo`` and ``grpolab_gpg`` = verl's ``grpo_passk`` (which reads
  ``norm_adv_by_std_in_grpo`` too), ``opo`` and ``gpg``;
* a prompt with a single response gets verl's group mean 0 and std 1, i.e. about its raw reward (``grpo_passk``
  refuses it, as verl does).

``conventions="grpolab"`` (``register_all(conventions=)`` or ``+algorithm.grpolab_conventions=grpolab``)
opts into grpolab's own definitions instead: eps 1e-4, a single response gets advantage 0, and a batch in
which every prompt has one response is refused by estimators that need groups. Estimators without a verl
counterpart (``sign``, ``passk``, ``pkpo``, ``maxrl``, ...) are grpolab's under both conventions. grpolab's
``passk`` (arXiv 2508.10751) and ``pkpo`` (arXiv 2505.15201) are different estimators from verl's ``grpo_passk``
(arXiv 2503.19595, best response only), so they are not compared with it. ``opo`` gets each response's length
as ``response_mask.sum(-1)``, as verl's does, under both conventions. grpolab's ``optimal_token_baseline`` is verl's
(``tests/integrations/test_verl_real.py`` matches them to 1e-6), so it has no ``grpolab_`` twin: verl computes it
from its actor's per-token statistics.

Use: ``import verl`` registers every name through the ``verl.plugins`` entry point once grpolab is
installed (``grpolab.integrations.verl.plugin``); then set ``algorithm.adv_estimator=grpolab_sign``.
Hyper-parameters come from ``register_all(advantage_kwargs=)``, overridden by ``algorithm.grpolab_kwargs``
in verl's config.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch

from grpolab import advantages as advantage_registry
from grpolab.devices import to_host
from grpolab.errors import UserError
from grpolab.integrations.verl import parity as verl_parity
from grpolab.integrations.verl.parity import group_by_index

__all__ = [
    "CONVENTIONS",
    "PREFIX",
    "VERL_COUNTERPARTS",
    "adaptable",
    "group_by_index",
    "make_adv_estimator",
    "outcome_advantages",
    "register_all",
]

PREFIX = "grpolab_"
CONVENTIONS = ("verl", "grpolab")
VERL_COUNTERPARTS = verl_parity.VERL_COUNTERPARTS
VerlEstimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _registry_scores(name: str, scores: torch.Tensor, index: Any, hyperparameters: Mapping[str, Any],
                     lengths: torch.Tensor) -> torch.Tensor:
    """grpolab's own per-response advantages [B] float64 (singleton groups as the registry defines them)."""
    rewards, rows, cols = group_by_index(scores, index)  # [P, G_max]
    if advantage_registry.info(name).needs_group and rewards.shape[1] < 2:
        raise UserError(
            f"grpolab_{name} needs at least two responses per prompt, but every prompt in this batch has one: "
            "set actor_rollout_ref.rollout.n >= 2 (or use verl conventions, where one response keeps its reward)"
        )
    grouped_lengths, _, _ = group_by_index(lengths, index)  # [P, G_max]; only estimators that need them read them
    advantages = advantage_registry.compute_advantages(name, rewards, lengths=grouped_lengths,
                                                       **hyperparameters)  # [P, G_max]
    return advantages[torch.from_numpy(rows), torch.from_numpy(cols)]


def outcome_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    *,
    conventions: str = "verl",
    norm_adv_by_std: bool = True,
    **hyperparameters: Any,
) -> torch.Tensor:
    """Token-level advantages [B, T] of grpolab estimator ``name`` for verl's batch.

    ``conventions`` and ``norm_adv_by_std`` (verl's ``algorithm.norm_adv_by_std_in_grpo``) are explained
    in the module docstring; the latter only matters for ``grpo`` under verl conventions.
    """
    _check_conventions(conventions)
    # verl's tensors are on the GPU: they cross to the host here, once, and the result goes back to their device
    scores = to_host(token_level_rewards.detach().sum(dim=-1)).to(torch.float64)  # [B] outcome reward, as verl's grpo
    mask = to_host(response_mask).to(torch.float64)  # [B, T]
    index = to_host(index)  # verl's uids are a numpy array; a tensor of ids crosses too
    if index is None:
        if advantage_registry.info(name).needs_group:
            raise UserError(f"grpolab_{name} needs groups: verl passed no `uid` index for the responses")
        index = np.arange(scores.shape[0])
    if conventions == "verl" and name in VERL_COUNTERPARTS:
        advantages = verl_parity.counterpart_advantages(
            name, scores, mask, index, norm_adv_by_std=norm_adv_by_std, **hyperparameters
        )
    else:
        advantages = _registry_scores(name, scores, index, hyperparameters, mask.sum(dim=-1)).unsqueeze(-1) * mask
    return advantages.to(token_level_rewards.device, token_level_rewards.dtype)


def _check_conventions(conventions: Any) -> None:
    if conventions not in CONVENTIONS:
        raise UserError(f"grpolab conventions must be one of {', '.join(CONVENTIONS)}; got {conventions!r}")


def _config_value(config: Any, key: str, default: Any) -> Any:
    """``config[key]`` of verl's algorithm config (DictConfig, AlgoConfig or dict), else ``default``."""
    getter = getattr(config, "get", None)
    value = getter(key, None) if callable(getter) else None
    return default if value is None else value


def make_adv_estimator(name: str, *, conventions: str = "verl", **hyperparameters: Any) -> VerlEstimator:
    """A verl-style estimator for grpolab estimator ``name`` (hyper-parameters fixed here or in config)."""
    if advantage_registry.info(name).needs_token_statistics:
        raise UserError(f"grpolab's {name!r} has no grpolab_ twin in verl: verl computes it itself, from its actor's "
                        f"per-token statistics; set algorithm.adv_estimator={name} with "
                        "actor.calculate_sum_pi_squared=True")
    _check_conventions(conventions)

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        **_unused: Any,  # verl passes optional extras (reward_baselines, ...) that outcome estimators ignore
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hp = {**hyperparameters, **dict(_config_value(config, "grpolab_kwargs", {}))}
        with torch.no_grad():
            advantages = outcome_advantages(
                name,
                token_level_rewards,
                response_mask,
                index,
                conventions=_config_value(config, "grpolab_conventions", conventions),
                norm_adv_by_std=bool(_config_value(config, "norm_adv_by_std_in_grpo", True)),
                **hp,
            )
        return advantages, advantages

    estimator.__name__ = f"{PREFIX}{name}"
    estimator.__doc__ = f"grpolab estimator {name!r} adapted to verl's advantage interface."
    spec = (name, conventions, tuple(sorted(hyperparameters.items())))
    estimator.grpolab_spec = spec  # type: ignore[attr-defined]
    return estimator


def _verl_core_algos() -> Any:
    try:
        from verl.trainer.ppo import core_algos
    except ModuleNotFoundError as error:
        if error.name != "verl":
            raise  # verl is there but cannot import: its own error says more than ours would
        raise UserError(
            "grpolab.integrations.verl needs verl 0.9: build its environment with `make setup-verl` "
            "(see docs/integrations.md)"
        ) from error
    return core_algos


def adaptable() -> list[str]:
    """The grpolab estimators that get a ``grpolab_`` twin in verl: every registered one but those with a per-token
    baseline (``optimal_token_baseline``), which verl computes itself."""
    return [name for name in advantage_registry.available()
            if not advantage_registry.info(name).needs_token_statistics]


def register_all(
    names: Iterable[str] | None = None,
    *,
    advantage_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    conventions: str = "verl",
) -> list[str]:
    """Register grpolab estimators with verl as ``grpolab_<name>``; return the registered names.

    Args:
        names: grpolab estimator names (default: ``adaptable()``).
        advantage_kwargs: per-estimator hyper-parameters, e.g. ``{"passk": {"k": 4}}``.
        conventions: "verl" (default: verl's epsilon and single-response rule, see the module docstring)
            or "grpolab".

    A name that grpolab registered before (e.g. through the entry point at ``import verl``) is replaced
    by the new settings. A name that something else registered in verl is refused with a ``UserError``.
    """
    core_algos = _verl_core_algos()
    table = core_algos.ADV_ESTIMATOR_REGISTRY
    kwargs = advantage_kwargs or {}
    registered = []
    for name in names if names is not None else adaptable():
        estimator = make_adv_estimator(name, conventions=conventions, **kwargs.get(name, {}))
        key = estimator.__name__
        existing = table.get(key)
        if existing is None:
            core_algos.register_adv_est(key)(estimator)
        elif hasattr(existing, "grpolab_spec"):
            table[key] = estimator  # grpolab's own earlier registration: new settings replace it
        else:
            raise UserError(
                f"verl already has an advantage estimator named {key!r} that grpolab did not register "
                f"({getattr(existing, '__module__', '?')}); remove it or pass names= without {name!r}"
            )
        registered.append(key)
    return registered
