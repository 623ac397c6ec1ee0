"""verl's conventions for the grpolab estimators that have a verl counterpart (used by the verl adapter).

verl 0.9.1 (``verl/trainer/ppo/core_algos.py``) and grpolab's registry define the same estimators with
different edge cases. Under verl conventions the adapter computes, for scores r [B] grouped by uid:

* ``grpo``: (r - mean_g) / (std_g + 1e-6), std_g the sample standard deviation (verl's ``epsilon``
  default; grpolab's own default is 1e-4). With ``norm_adv_by_std=False`` it is ``dr_grpo``, as verl's
  ``norm_adv_by_std_in_grpo=False`` makes verl's ``grpo``.
* ``dr_grpo``: r - mean_g.  ``rloo``: G / (G - 1) * (r - mean_g).
* ``reinforce_pp`` (verl ``reinforce_plus_plus_baseline``): r - mean_g broadcast to the response tokens,
  then whitened over all response tokens of the batch (token-weighted mean, Bessel-corrected variance,
  ``rsqrt(var + 1e-8)``); grpolab's own version whitens once per response.
* ``grpo_passk`` (verl ``grpo_passk``): the registry's estimator is verl's (epsilon 1e-6); here
  ``norm_adv_by_std=False`` turns its std division off, as verl's flag does, and a group of one response is
  refused, as verl refuses it (grpolab's registry gives it 0).
* ``opo`` (verl ``opo``): the registry's, with the lengths verl uses, ``response_mask.sum(-1)``.
* ``gpg`` (verl ``gpg``): the registry's; verl's ``f_norm`` is 1 (``compute_advantage`` passes none).
* A group with one response has mean 0 and std 1 (verl's rule), so its advantage is r / (1 + 1e-6) for
  ``grpo``, alpha r / f_norm for ``gpg`` and r for the others (``opo``: baseline 0); grpolab's registry gives
  such a response 0.

Groups of two or more responses go through grpolab's registry (float64), so the values agree with verl's
float32 arithmetic to about 1e-7. Shapes: scores [B], response_mask [B, T], index [B].
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from grpolab import advantages as advantage_registry
from grpolab.devices import to_host
from grpolab.errors import UserError

__all__ = ["VERL_COUNTERPARTS", "VERL_EPSILON", "counterpart_advantages", "group_by_index", "whiten_tokens"]

VERL_EPSILON = 1e-6  # verl's default ``epsilon`` for grpo
WHITEN_EPSILON = 1e-8  # verl_F.masked_whiten: rsqrt(var + 1e-8); masked_mean divides by count + 1e-8

# grpolab estimator -> the verl estimator (and setting) it equals under verl conventions
VERL_COUNTERPARTS = {
    "grpo": "grpo",
    "dr_grpo": "grpo with algorithm.norm_adv_by_std_in_grpo=False",
    "rloo": "rloo",
    "reinforce_pp": "reinforce_plus_plus_baseline",
    "grpo_passk": "grpo_passk",
    "opo": "opo",
    "gpg": "gpg",
}


def group_by_index(scores: torch.Tensor, index: Any) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Scatter per-response scores [B] into rewards [P, G_max] (NaN padded) by the group ids ``index`` [B].

    Returns (rewards [P, G_max] float64, row [B], column [B]): response b sits at rewards[row[b], col[b]].
    """
    ids = np.asarray(to_host(index))
    if ids.shape != (scores.shape[0],):
        raise UserError(f"index must have one group id per response: shape {ids.shape} vs {scores.shape[0]}")
    _, rows = np.unique(ids, return_inverse=True)
    rows = rows.reshape(-1)
    counts = np.bincount(rows)
    order = np.argsort(rows, kind="stable")
    starts = np.cumsum(counts) - counts
    cols = np.empty_like(rows)
    cols[order] = np.arange(len(rows)) - np.repeat(starts, counts)
    rewards = torch.full((len(counts), int(counts.max())), float("nan"), dtype=torch.float64)  # [P, G_max]
    rewards[torch.from_numpy(rows), torch.from_numpy(cols)] = to_host(scores).to(torch.float64)
    return rewards, rows, cols


def _grouped(name: str, scores: torch.Tensor, index: Any, hyperparameters: dict[str, Any],
             lengths: torch.Tensor) -> torch.Tensor:
    """Per-response advantages [B] float64: the registry for groups of >= 2, verl's rule for singletons."""
    rewards, rows, cols = group_by_index(scores, index)  # [P, G_max]
    counts = (~torch.isnan(rewards)).sum(dim=1)  # [P]
    single = (counts == 1)[torch.from_numpy(rows)]  # [B]
    if name == "grpo_passk" and single.any():
        raise UserError("grpolab_grpo_passk needs at least two responses per prompt, as verl's grpo_passk does: "
                        "set actor_rollout_ref.rollout.n >= 2")
    result = torch.zeros_like(scores)
    if rewards.shape[1] >= 2:
        grouped_lengths, _, _ = group_by_index(lengths, index)  # [P, G_max]; only opo reads them
        advantages = advantage_registry.compute_advantages(name, rewards, lengths=grouped_lengths,
                                                           **hyperparameters)  # [P, G_max]
        result = advantages[torch.from_numpy(rows), torch.from_numpy(cols)].clone()
    result[single] = scores[single] * _single_scale(name, scores, hyperparameters)
    return result


def _single_scale(name: str, scores: torch.Tensor, hyperparameters: dict[str, Any]) -> float:
    """verl's advantage of a response alone in its group, over its reward: group mean 0 and std 1."""
    if name == "grpo":
        return 1.0 / (1.0 + hyperparameters["eps"])  # (r - 0) / (1 + eps)
    if name == "gpg":  # alpha (r - 0) / f_norm, alpha = B / (number of non-zero rewards)
        alpha = scores.numel() / max(int((scores != 0).sum()), 1)
        return alpha / float(hyperparameters.get("f_norm", 1.0))
    return 1.0


def whiten_tokens(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-response values [B] broadcast to tokens [B, T] and whitened over the masked tokens of the batch."""
    tokens = values.unsqueeze(-1) * response_mask  # [B, T]
    count = response_mask.sum()
    if count < 2:
        raise UserError("reinforce_pp whitens over response tokens and needs at least two of them in the batch")
    mean = (tokens * response_mask).sum() / (count + WHITEN_EPSILON)
    variance = ((tokens - mean) ** 2 * response_mask).sum() / (count + WHITEN_EPSILON) * count / (count - 1)
    return (tokens - mean) * torch.rsqrt(variance + WHITEN_EPSILON) * response_mask


def counterpart_advantages(
    name: str,
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    *,
    norm_adv_by_std: bool = True,
    **hyperparameters: Any,
) -> torch.Tensor:
    """Token-level advantages [B, T] float64 of ``name`` (a key of ``VERL_COUNTERPARTS``), as verl gives them."""
    lengths = response_mask.sum(dim=-1)  # [B] tokens per response, what verl's opo weighs by
    if name not in VERL_COUNTERPARTS:
        raise UserError(f"grpolab_{name} has no verl counterpart; choose one of {', '.join(VERL_COUNTERPARTS)}")
    hp = dict(hyperparameters)
    if name == "grpo" and not norm_adv_by_std:
        name = "dr_grpo"  # verl's grpo without the std division; its epsilon no longer applies
        hp = {key: value for key, value in hp.items() if key not in ("eps", "std")}
    if name == "grpo":
        hp.setdefault("eps", VERL_EPSILON)
    if name == "grpo_passk":
        hp.setdefault("norm_by_std", norm_adv_by_std)
    if name == "reinforce_pp":
        if hp:
            raise UserError(
                f"grpolab_reinforce_pp under verl conventions takes no hyper-parameters (got {sorted(hp)}); "
                "set algorithm.grpolab_conventions=grpolab to use grpolab's eps"
            )
        centred = _grouped("dr_grpo", scores, index, {}, lengths)
        return whiten_tokens(centred, response_mask)
    return _grouped(name, scores, np.asarray(index), hp, lengths).unsqueeze(-1) * response_mask
