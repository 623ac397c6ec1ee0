"""``starvation/*`` metrics for verl users, from the batch that verl's ``compute_advantage`` returns.

``starvation_metrics(data)`` reads a verl ``DataProto`` (or a plain mapping of its fields) after the
advantages are computed: the outcome reward of each response is the sum of ``token_level_rewards``
(what verl's estimators use), responses are grouped by ``non_tensor_batch["uid"]``, and the result of
``grpolab.diagnostics.starvation.degeneracy`` on that [P, G_max] matrix (NaN-padded when verl's groups
are ragged) is returned under ``starvation/``, ready for ``metrics.update(...)`` in a verl trainer.

Departures: a response counts as useful when its advantage (the first response token's value of
``advantages``) is non-zero, so ``useful_fraction`` reflects the estimator that verl actually ran; a
response with no response tokens has no advantage and counts as not useful. ``useful_fraction`` is a
share of the B responses (``degeneracy`` counts the P * G_max cells, padding included). G in ``d_iid``
is the largest group size of the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from grpolab.diagnostics.starvation import degeneracy
from grpolab.errors import UserError
from grpolab.integrations.verl_parity import group_by_index

__all__ = ["STARVATION_KEYS", "starvation_metrics"]

STARVATION_KEYS = ("all_correct", "all_wrong", "degenerate", "d_iid", "jensen_gap", "useful_fraction")


def _fields(data: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(tensor fields, non-tensor fields) of a DataProto, or of a mapping holding both kinds."""
    if hasattr(data, "batch") and hasattr(data, "non_tensor_batch"):
        return data.batch, data.non_tensor_batch
    if isinstance(data, Mapping):
        return data, data
    raise UserError(f"starvation_metrics needs a verl DataProto or a mapping of its fields, got {type(data).__name__}")


def _first_token_values(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-response advantage [B]: the value at the first response token (0 when there is none)."""
    mask = response_mask.detach().cpu().bool()  # [B, T]
    first = mask.int().argmax(dim=1)  # [B]
    values = advantages.detach().cpu().to(torch.float64)[torch.arange(mask.shape[0]), first]
    return torch.where(mask.any(dim=1), values, torch.zeros_like(values))


def starvation_metrics(data: Any, *, success_threshold: float = 0.5) -> dict[str, float]:
    """``starvation/{all_correct, all_wrong, degenerate, d_iid, jensen_gap, useful_fraction}`` of a verl batch.

    ``data`` needs ``token_level_rewards`` [B, T] and ``uid`` [B]; ``advantages`` [B, T] and
    ``response_mask`` [B, T] are used for ``useful_fraction`` when present.
    """
    tensors, others = _fields(data)
    for key, where in (("token_level_rewards", tensors), ("uid", others)):
        if key not in where:
            raise UserError(f"starvation_metrics: the batch has no {key!r}; call it after verl's compute_advantage")
    scores = tensors["token_level_rewards"].detach().cpu().to(torch.float64).sum(dim=-1)  # [B]
    rewards, rows, cols = group_by_index(scores, np.asarray(others["uid"]))  # [P, G_max]
    advantages = None
    if "advantages" in tensors and "response_mask" in tensors:
        per_response = _first_token_values(tensors["advantages"], tensors["response_mask"])  # [B]
        matrix = torch.full_like(rewards, float("nan"))  # [P, G_max]; padding is neither scorable nor useful
        matrix[torch.from_numpy(rows), torch.from_numpy(cols)] = per_response
        advantages = matrix.numpy()
    stats = degeneracy(rewards.numpy(), advantages=advantages, success_threshold=success_threshold)
    stats["useful_fraction"] *= rewards.numel() / scores.numel()  # a share of the B responses, not of P * G_max
    return {f"starvation/{key}": float(stats[key]) for key in STARVATION_KEYS}
