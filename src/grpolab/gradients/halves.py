"""The half-batch gradient cosine: a direct measurement of how much of a batch's policy gradient is signal.

Split a rollout batch's P prompt groups into two halves, the first floor(P/2) groups in batch order and the rest,
and take each half's policy gradient h_1, h_2 = sum_i A_i g_i over its completions
(``grpolab.gradients.rows.summed_policy_gradient``). A group is never split: its completions share a baseline
(the group mean of ``dr_grpo``), so they are not independent of one another, while distinct prompts are. The two
halves are then independent estimates of the same expected gradient g, each with noise of total variance
tr(Sigma) / (P/2), where Sigma is the covariance of one group's gradient, so for large P

    E[cos(h_1, h_2)] ~= |g|^2 / (|g|^2 + tr(Sigma) / (P/2)) = (P/2) / (P/2 + B_noise),

with B_noise = tr(Sigma) / |g|^2 the gradient noise scale of McCandlish et al. 2018 ("An Empirical Model of
Large-Batch Training", arXiv 1812.06162), in prompt groups. They estimate B_noise from gradient norms at two batch
sizes; the cosine of two independent halves is the same quantity in a form that needs no second batch size. The
full batch's signal-to-noise ratio follows: SNR^2 = P |g|^2 / tr(Sigma) ~= 2 c / (1 - c) for the cosine c, and
c near 0 (or below) means the batch gradient is mostly noise. This is the measured counterpart of the SNR^2 ratio
that ``grpolab.diagnostics.variance`` predicts between estimators (docs/when-sign-helps.md).

Departures: like the rest of ``grpolab.gradients``, the gradients are of summed token log-probabilities at the
sampling policy (ratio 1, so clipping has no effect), which is the direction of the first update of a step under
the default ``token_mean`` aggregation (one normaliser for the whole batch) but not under a per-sequence one
(``seq_mean_token_mean``); the cosine is of the raw gradient, before gradient clipping and before Adam rescales
each coordinate. The halves are by batch order, which is the sampler's random order of prompts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from grpolab.errors import UserError
from grpolab.gradients.rows import CompletionBatch, as_batch, summed_policy_gradient
from grpolab.process_rewards import is_per_token

__all__ = ["half_batch_cosine", "half_rows"]


@dataclass
class _Rows:
    """The four [B, *] tensors of a batch, restricted to some of its completions."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor


def half_rows(num_groups: int, group_size: int) -> tuple[slice, slice]:
    """The completion rows of the two halves of a batch of ``num_groups`` groups of ``group_size`` (row-major,
    B = P * G): the first P // 2 groups and the rest, each a whole number of groups."""
    if num_groups < 2:
        raise UserError(f"the half-batch cosine needs at least 2 prompt groups, got {num_groups}; "
                        "use --prompts-per-step 2 or more")
    cut = (num_groups // 2) * group_size
    return slice(0, cut), slice(cut, num_groups * group_size)


def _subset(batch: CompletionBatch, rows: slice) -> _Rows:
    return _Rows(batch.prompt_ids[rows], batch.prompt_mask[rows], batch.completion_ids[rows],
                 batch.completion_mask[rows])


def _flat(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(-1).double() for g in grads.values()])


def half_batch_cosine(
    model: torch.nn.Module, batch: CompletionBatch, advantages: torch.Tensor, *, group_size: int | None = None,
    params: str | Sequence[str] | None = None, temperature: float = 1.0,
) -> float:
    """cos(h_1, h_2) between the policy gradients of the two halves of the batch's prompt groups (``half_rows``).

    ``advantages``: [P, G], or per-token [B, T] (then ``group_size`` or ``batch.group_size`` gives G). NaN when
    either half's gradient is exactly 0 (every group of that half has zero advantages). Two batched
    forward/backward passes; parameter ``.grad`` fields are not touched.
    """
    batch = as_batch(batch)
    advantages = torch.as_tensor(advantages).detach().float().cpu()
    size = batch.completion_ids.shape[0]
    per_token = is_per_token(advantages, batch.completion_mask)
    if per_token:
        group_size = group_size or getattr(batch, "group_size", None)
        if not group_size:
            raise UserError("per-token advantages [B, T] do not show the groups: pass group_size=")
    else:
        group_size = advantages.shape[1]
    if size % group_size:
        raise UserError(f"a batch of {size} completions is not whole groups of {group_size}")
    flat = advantages if per_token else advantages.reshape(size)  # one entry (or row of T) per completion
    gradients = []
    for rows in half_rows(size // group_size, group_size):
        weights = flat[rows] if per_token else flat[rows].reshape(-1, group_size)  # [B/2, T] or [P/2, G]
        gradients.append(_flat(summed_policy_gradient(model, _subset(batch, rows), weights, params=params,
                                                      temperature=temperature)))
    first, second = gradients
    norms = float(first.norm()) * float(second.norm())
    return float(first @ second) / norms if norms > 0 else math.nan
