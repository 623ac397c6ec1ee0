"""The advantages of one training step's batch (``grpolab.train.batch.StepBatch``): the config's estimator on its
outcome or per-token rewards, the policy's per-token statistics an estimator with a per-token baseline needs, and
the per-completion view the logs and the starvation metrics read. Shapes: P groups, G completions each,
B = P * G, T completion tokens.

DAPO's overlong reward shaping (``overlong_buffer``, docs/losses.md) enters here, on the outcome rewards before
the estimator (``grpolab.overlong``).
"""

from __future__ import annotations

import numpy as np
import torch

from grpolab import advantages as advantage_registry
from grpolab.advantages import TokenStatistics, compute_advantages
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.overlong import shape_rewards
from grpolab.process_rewards import completion_advantages, is_per_token, token_advantages
from grpolab.train.batch import StepBatch
from grpolab.train.forward import policy_token_statistics

__all__ = ["completion_view", "estimator_statistics", "step_advantages"]


def step_advantages(
    batch: StepBatch, config: TrainConfig, *, max_length: int | None = None, statistics: TokenStatistics | None = None
) -> torch.Tensor:
    """The advantages of a batch under the config's estimator: [P, G] of the outcome rewards, or [B, T] of the
    per-token rewards (``--reward-granularity token``) or of an estimator with a per-token baseline (``statistics``:
    ``estimator_statistics``). With ``overlong_buffer`` the outcome rewards first get DAPO's overlong penalty
    against the token cap ``max_length`` (``grpolab.overlong``). Raises a ``UserError`` when the estimator refuses
    the rewards or the advantages overflow float32 (the loss's dtype)."""
    try:
        if batch.token_rewards is not None:
            advantages = token_advantages(
                config.advantage,
                batch.token_rewards,
                batch.completion_mask,
                batch.group_size,
                **config.advantage_kwargs,
            )
        else:
            advantages = compute_advantages(
                config.advantage,
                _outcome_rewards(batch, config, max_length),
                lengths=batch.lengths,
                token_statistics=statistics,
                **config.advantage_kwargs,
            )
        if not torch.isfinite(advantages.float()).all():
            raise ValueError(f"advantages up to {advantages.abs().max().item():.3g} overflow float32")
    except ValueError as error:
        raise UserError(str(error)) from None
    return advantages


def _outcome_rewards(batch: StepBatch, config: TrainConfig, max_length: int | None) -> np.ndarray:
    """The rewards [P, G] the estimator sees: the batch's, with DAPO's overlong penalty under ``overlong_buffer``."""
    if config.overlong_buffer is None:
        return batch.rewards
    if max_length is None:
        raise ValueError("overlong_buffer needs the completion length cap (max_length)")
    return shape_rewards(
        batch.rewards,
        batch.lengths,
        max_length=max_length,
        buffer=config.overlong_buffer,
        penalty=config.overlong_penalty,
    )


def estimator_statistics(model: torch.nn.Module, batch: StepBatch, config: TrainConfig) -> TokenStatistics | None:
    """The policy's per-token statistics of the batch (``grpolab.train.forward.policy_token_statistics``) where the
    config's estimator has a per-token baseline (``optimal_token_baseline``), else None: ``step_advantages``'
    ``statistics``."""
    if not advantage_registry.info(config.advantage).needs_token_statistics:
        return None
    return policy_token_statistics(model, batch, config)


def completion_view(batch: StepBatch, advantages: torch.Tensor) -> torch.Tensor:
    """Per-completion advantages [P, G] for logs and starvation metrics: the outcome advantages themselves, or
    per token the mean over each completion's tokens (``process_rewards.completion_advantages``)."""
    if not is_per_token(advantages, batch.completion_mask):
        return advantages
    return completion_advantages(advantages, batch.completion_mask, batch.rewards.shape)
