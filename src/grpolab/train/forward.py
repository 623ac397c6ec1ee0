"""The update's forward passes: the log-probs [b, T] of a step batch's completions under a model (with autograd
for the loss, without for the frozen log-probs of the sampling and reference policies), the policy's entropy under
the entropy bonus, and the sampling policy's per-token statistics (``policy_token_statistics``, the optimal token
baseline's inputs). Shapes: b rows of the ``StepBatch``, T completion tokens.

Each forward runs at the config's sampling ``temperature`` and, under ``dtype`` bfloat16, in autocast. The
``StepBatch`` stays on the host; the forwarded rows go to the model's device, and the results stay there
(``policy_token_statistics``' come back to the host, like the batch).

Departure from a plain forward, exact in its result: Llama-family models forward each prompt once with its rows'
completions packed behind it (``grpolab.engine.prefix_packing``); other models forward only the columns some row
uses (leading prompt padding and trailing completion padding shared by every row are cut, and come back as 0).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

from grpolab.advantages import TokenStatistics
from grpolab.config import TrainConfig
from grpolab.devices import compute_autocast, model_device
from grpolab.engine import prefix_packing
from grpolab.engine.rollout import token_logprobs, token_statistics
from grpolab.train.batch import StepBatch

__all__ = [
    "frozen_logprobs",
    "policy_logprobs",
    "policy_logprobs_and_entropy",
    "policy_token_statistics",
    "unpacked_logprobs",
]


def _autocast(config: TrainConfig, device: torch.device) -> contextlib.AbstractContextManager:
    return compute_autocast(config.dtype, device)


def policy_logprobs(model: torch.nn.Module, batch: StepBatch, rows: list[int], config: TrainConfig) -> torch.Tensor:
    """[len(rows), T] log-probs of the rows' completions, 0 where the completion mask is 0. Llama-family
    models forward each prompt once with its rows' completions packed behind it (``prefix_packing``).
    Otherwise only the columns some of these rows use are forwarded: leading prompt columns that are
    padding in every row and trailing completion columns past every row's end are cut (they change no
    valid position's logits) and the masked tail is returned as 0."""
    prompt_mask, completion_mask = batch.prompt_mask[rows], batch.completion_mask[rows]
    device = model_device(model)
    with _autocast(config, device):
        packed = prefix_packing.logprobs(
            model,
            batch.prompt_ids[rows],
            prompt_mask,
            batch.completion_ids[rows],
            completion_mask,
            temperature=config.temperature,
        )
    if packed is not None:
        return packed
    return unpacked_logprobs(model, batch, rows, config)[0]


def policy_logprobs_and_entropy(
    model: torch.nn.Module, batch: StepBatch, rows: list[int], config: TrainConfig
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``policy_logprobs`` and, under the entropy bonus (``entropy_coef`` > 0), the entropy [len(rows), T] of the
    policy at each completion token (with autograd, 0 past each row's end); the bonus needs the whole
    distribution, so those rows are forwarded without prefix packing."""
    if config.entropy_coef <= 0:
        return policy_logprobs(model, batch, rows, config), None
    return unpacked_logprobs(model, batch, rows, config, with_entropy=True)


def unpacked_logprobs(
    model: torch.nn.Module, batch: StepBatch, rows: list[int], config: TrainConfig, *, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``policy_logprobs`` without prefix packing, and the entropy [len(rows), T] under ``with_entropy`` (else
    None)."""
    return _unpacked_forward(model, batch, rows, config, functools.partial(token_logprobs, with_entropy=with_entropy))


def _unpacked_forward(
    model: torch.nn.Module,
    batch: StepBatch,
    rows: list[int],
    config: TrainConfig,
    forward: Callable[..., tuple[torch.Tensor, torch.Tensor | None]],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``forward(model, ids, mask, used, temperature=)`` (``token_logprobs`` or ``token_statistics``) on the rows'
    used columns: leading prompt columns that are padding in every row and trailing completion columns past every
    row's end are cut; its two [len(rows), used] results come back float32, 0-padded to the batch's T columns."""
    prompt_mask, completion_mask = batch.prompt_mask[rows], batch.completion_mask[rows]
    device = model_device(model)
    width = completion_mask.shape[1]
    start = min(int((prompt_mask.sum(dim=0) == 0).cumprod(dim=0).sum()), prompt_mask.shape[1] - 1)
    columns = completion_mask.any(dim=0).nonzero()
    used = int(columns.max()) + 1 if len(columns) else 1
    ids = torch.cat([batch.prompt_ids[rows, start:], batch.completion_ids[rows, :used]], dim=1).to(device)
    mask = torch.cat([prompt_mask[:, start:], completion_mask[:, :used]], dim=1).to(device)
    with _autocast(config, device):
        first, second = forward(model, ids, mask, used, temperature=config.temperature)
    pad = (0, width - used)
    return F.pad(first.float(), pad), None if second is None else F.pad(second.float(), pad)


@torch.no_grad()
def frozen_logprobs(
    model: torch.nn.Module, batch: StepBatch, chunks: list[list[int]], config: TrainConfig
) -> dict[tuple[int, ...], torch.Tensor]:
    """``policy_logprobs`` of each chunk of rows without autograd, keyed by the chunk's rows: the log-probs of a
    policy that the update holds fixed (the one that sampled, or the reference)."""
    return {tuple(rows): policy_logprobs(model, batch, rows, config) for rows in chunks}


@torch.no_grad()
def policy_token_statistics(model: torch.nn.Module, batch: StepBatch, config: TrainConfig) -> TokenStatistics:
    """The sampling policy's ``TokenStatistics`` of the batch (the optimal token baseline's inputs): every row
    forwarded once without autograd, ``micro_batch_size`` rows at a time and without prefix packing (it needs the
    whole distribution at each token), at the sampling temperature. On the host, like the batch."""
    logprobs, squares = [], []
    for start in range(0, batch.size, config.micro_batch_size):
        rows = list(range(start, min(start + config.micro_batch_size, batch.size)))
        part = _unpacked_forward(model, batch, rows, config, token_statistics)
        logprobs.append(part[0])
        squares.append(part[1])
    mask = batch.completion_mask.float()
    if not logprobs:  # an empty batch (dynamic sampling that found no informative group)
        return TokenStatistics(mask, torch.zeros_like(mask), torch.zeros_like(mask))
    drawn = torch.cat(logprobs).cpu().clamp(max=0.0)  # float32 rounding of logit - logsumexp can pass 0
    return TokenStatistics(mask, drawn * mask, torch.cat(squares).cpu().clamp(0.0, 1.0) * mask)
