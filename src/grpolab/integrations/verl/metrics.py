"""``starvation/*`` metrics for verl users, from the batch that verl's ``compute_advantage`` returns.

``starvation_metrics(data)`` reads a verl ``DataProto`` (or a plain mapping of its fields) after the
advantages are computed: the outcome reward of each response is the sum of ``token_level_rewards``
(what verl's estimators use), responses are grouped by ``non_tensor_batch["uid"]``, and the [P, G_max]
rewards, advantages (each response's value at its first response token) and response lengths go to
``grpolab.diagnostics.starvation_metrics``, the one definition that grpolab's trainer and the TRL adapter
log. The result is ready for ``metrics.update(...)`` in a verl trainer. verl's tensors live on the GPU: each
crosses to the host through ``grpolab.devices.to_host`` as it is read.

Departures: verl's groups can be ragged, so they are NaN-padded to the largest group (G in ``d_iid`` is
that size); ``useful_fraction`` and ``scorable_fraction`` are shares of the B responses, not of the
P * G_max cells that ``diagnostics`` counts. A response with no response tokens counts as not useful.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from grpolab import diagnostics
from grpolab.devices import to_host
from grpolab.errors import UserError
from grpolab.integrations.verl.parity import group_by_index

__all__ = ["starvation_metrics"]


def _fields(data: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(tensor fields, non-tensor fields) of a DataProto, or of a mapping holding both kinds."""
    if hasattr(data, "batch") and hasattr(data, "non_tensor_batch"):
        return data.batch, data.non_tensor_batch
    if isinstance(data, Mapping):
        return data, data
    raise UserError(f"starvation_metrics needs a verl DataProto or a mapping of its fields, got {type(data).__name__}")


def _first_token_values(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-response advantage [B]: the value at the first response token (0 when there is none)."""
    mask = to_host(response_mask).bool()  # [B, T]
    first = mask.int().argmax(dim=1)  # [B]
    values = to_host(advantages).to(torch.float64)[torch.arange(mask.shape[0]), first]
    return torch.where(mask.any(dim=1), values, torch.zeros_like(values))


def _scatter(values: torch.Tensor, shape: torch.Size, rows: np.ndarray, cols: np.ndarray, fill: float) -> np.ndarray:
    """Per-response values [B] placed into a [P, G_max] array, ``fill`` in the padding."""
    matrix = torch.full(shape, fill, dtype=torch.float64)  # [P, G_max]
    matrix[torch.from_numpy(rows), torch.from_numpy(cols)] = values.to(torch.float64)
    return matrix.numpy()


def starvation_metrics(
    data: Any, *, window: diagnostics.SuccessWindow | None = None, success_threshold: float = 0.5
) -> dict[str, float]:
    """The ``starvation/*`` metrics (``diagnostics.STARVATION_KEYS``) of one verl batch.

    ``data`` needs ``token_level_rewards`` [B, T] and ``uid`` [B]; ``advantages`` and ``response_mask``
    [B, T], when present, give ``degenerate`` as trained, ``useful_fraction`` and ``useful_token_fraction``.
    ``window``: a ``diagnostics.SuccessWindow`` kept across steps, so that pbar of ``d_iid`` spans at least
    its ``min_groups`` groups; this batch's success rates are added to it here. None: this batch alone.
    """
    tensors, others = _fields(data)
    for key, where in (("token_level_rewards", tensors), ("uid", others)):
        if key not in where:
            raise UserError(f"starvation_metrics: the batch has no {key!r}; call it after verl's compute_advantage")
    scores = to_host(tensors["token_level_rewards"]).to(torch.float64).sum(dim=-1)  # [B]
    rewards, rows, cols = group_by_index(scores, np.asarray(to_host(others["uid"])))  # [P, G_max], NaN padded
    advantages = lengths = None
    if "advantages" in tensors and "response_mask" in tensors:
        mask = tensors["response_mask"]
        per_response = _first_token_values(tensors["advantages"], mask)  # [B]
        advantages = _scatter(per_response, rewards.shape, rows, cols, float("nan"))  # [P, G_max]
        lengths = _scatter(to_host(mask).sum(dim=-1), rewards.shape, rows, cols, 0.0)  # [P, G_max]
    if window is not None:
        window.add(diagnostics.success_rates(rewards.numpy(), success_threshold=success_threshold))
    metrics = diagnostics.starvation_metrics(
        rewards.numpy(), advantages, lengths=lengths, window=window, success_threshold=success_threshold
    )
    cells_per_response = rewards.numel() / scores.numel()  # > 1 only when groups are ragged
    for key in ("starvation/useful_fraction", "starvation/scorable_fraction"):
        metrics[key] *= cells_per_response
    return metrics
