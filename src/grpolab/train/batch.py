"""The batch one training step trains on: ``StepBatch``. Shapes: P groups, G completions each, B = P * G, T
completion tokens.

``collect_batch`` gives a ``ScoredBatch`` (problems, rollout, scores, per-token rewards); ``StepBatch.from_scored``
turns it into the ``StepBatch`` that dynamic sampling filters and joins, the advantages are computed on, and the
update (``grpolab.train.update``) trains on (without its degenerate groups under group masking:
``mask_degenerate``; without its low-variance groups under the reward-variance filter: ``variance_filter``).
Every field says in its metadata how it is indexed, so that selecting
groups and joining batches handle every field, the optional ones included. The batch stays on the host, where the
sampler returns it and the verifiers read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import torch

from grpolab.engine.collect import ScoredBatch
from grpolab.engine.rollout import Rollout
from grpolab.process_rewards import is_per_token
from grpolab.tasks import Problem

__all__ = ["StepBatch", "group_variances", "mask_degenerate", "top_variance_groups", "variance_filter"]


def _pad_to(tensor: torch.Tensor, width: int, *, left: bool, value: float = 0.0) -> torch.Tensor:
    missing = width - tensor.shape[1]
    if missing <= 0:
        return tensor
    pad = tensor.new_full((tensor.shape[0], missing), value)
    return torch.cat([pad, tensor] if left else [tensor, pad], dim=1)


def _per(axis: str, *, pad: float = 0.0) -> dict[str, Any]:
    """Field metadata of a ``StepBatch`` field indexed by ``axis``: "group" (one entry per problem), "row" (one
    per completion) or "left" / "right" ([B, width] tensors padded on that side with ``pad`` when joined)."""
    return {"axis": axis, "pad": pad}


@dataclass
class StepBatch:
    """The groups a step trains on (rows p*G .. p*G+G-1 belong to problem p).

    Every field says in its metadata how it is indexed (``_per``), so that selecting groups and joining
    batches handle every field, the optional ones included.

    Attributes:
        problems: the P problems.
        prompt_ids, prompt_mask: [B, Lp] left-padded prompts.
        completion_ids, completion_mask: [B, T] right-padded completions.
        rewards: [P, G] float64, NaN = unscorable.
        texts: B completion texts.
        truncated: [B] bool.
        entropy: [B, T] sampling entropy per token.
        sampler_logprobs: [B, T] the sampler's log-probability of each token, or None.
        token_rewards: [B, T] float64 per-token rewards (NaN: unrewarded) under --reward-granularity token,
            else None.
    """

    problems: list[Problem] = field(metadata=_per("group"))
    prompt_ids: torch.Tensor = field(metadata=_per("left"))
    prompt_mask: torch.Tensor = field(metadata=_per("left"))
    completion_ids: torch.Tensor = field(metadata=_per("right"))
    completion_mask: torch.Tensor = field(metadata=_per("right"))
    rewards: np.ndarray = field(metadata=_per("group"))
    texts: list[str] = field(metadata=_per("row"))
    truncated: torch.Tensor = field(metadata=_per("row"))
    entropy: torch.Tensor = field(metadata=_per("right"))
    sampler_logprobs: torch.Tensor | None = field(default=None, metadata=_per("right"))
    token_rewards: torch.Tensor | None = field(default=None, metadata=_per("right", pad=float("nan")))

    @classmethod
    def make(cls, problems: list[Problem], rollout: Rollout, rewards: np.ndarray,
             token_rewards: torch.Tensor | None = None) -> StepBatch:
        return cls(problems, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                   rollout.completion_mask, rewards, list(rollout.texts), rollout.truncated, rollout.entropy,
                   rollout.logprobs, token_rewards)

    @classmethod
    def from_scored(cls, scored: ScoredBatch) -> StepBatch:
        """The batch to train on from a scored rollout (``grpolab.engine.collect``)."""
        return cls.make(scored.problems, scored.rollout, scored.rewards, scored.token_rewards)

    @property
    def group_size(self) -> int:
        return self.rewards.shape[1]

    @property
    def num_groups(self) -> int:
        return len(self.problems)

    @property
    def size(self) -> int:
        return len(self.texts)

    @property
    def lengths(self) -> np.ndarray:
        """[P, G] completion lengths in tokens."""
        return self.completion_mask.sum(dim=1).numpy().reshape(self.rewards.shape)

    def select_groups(self, groups: list[int]) -> StepBatch:
        g = self.group_size
        rows = [p * g + i for p in groups for i in range(g)]
        return replace(self, **{f.name: _take(getattr(self, f.name), groups if f.metadata["axis"] == "group" else rows)
                                for f in fields(self)})

    def informative_groups(self) -> list[int]:
        """The groups whose scorable rewards are not all equal (the others are uniform)."""
        return [p for p, row in enumerate(self.rewards) if len(set(row[~np.isnan(row)].tolist())) > 1]

    def non_degenerate(self) -> StepBatch:
        """Only the groups whose scorable rewards are not all equal (DAPO's dynamic-sampling filter)."""
        return self.select_groups(self.informative_groups())

    def first(self, num_groups: int) -> StepBatch:
        return self.select_groups(list(range(min(num_groups, self.num_groups))))

    def concat(self, other: StepBatch) -> StepBatch:
        """This batch's groups followed by ``other``'s; padded fields are padded to the wider of the two. An
        optional field that only one of the two batches has is None in the result."""
        return replace(self, **{f.name: _join(getattr(self, f.name), getattr(other, f.name), f.metadata)
                                for f in fields(self)})

    def sampling_entropy(self) -> float:
        """The mean per-token entropy of the sampling distribution over the batch's completion tokens."""
        tokens = self.completion_mask.sum().clamp(min=1)
        return float((self.entropy * self.completion_mask).sum() / tokens)


def mask_degenerate(batch: StepBatch, advantages: torch.Tensor) -> tuple[StepBatch, torch.Tensor]:
    """Group masking (SkyRL's ``zero_variance_filter``, prime-rl's ``filter_zero_advantages``, TRL PR #7068's
    ``mask_zero_advantage_groups``): the batch and its advantages ([P, G], or [B, T] per token) without the
    degenerate groups, so that the update leaves them out of the loss's numerator, its denominator and the KL
    term. The advantages were computed on the whole batch (as those trainers do)."""
    return _keep_groups(batch, advantages, batch.informative_groups())


def variance_filter(batch: StepBatch, advantages: torch.Tensor, share: float) -> tuple[StepBatch, torch.Tensor]:
    """RAGEN-2's reward-variance filter (SNR-aware filtering, arXiv 2604.06268): the batch and its advantages
    ([P, G], or [B, T] per token) of only the groups that carry the top ``share`` of the batch's reward variance
    (``top_variance_groups``); the update leaves the others out as group masking does. The advantages were
    computed on the whole batch."""
    return _keep_groups(batch, advantages, top_variance_groups(batch.rewards, share))


def top_variance_groups(rewards: np.ndarray, share: float) -> list[int]:
    """The smallest set of groups whose reward variances sum to at least ``share`` (in (0, 1]) of the batch's
    total, taken from the largest variance down (ties in group order); in group order. A group's variance is the
    population variance of its scored rewards (0 for a degenerate group), so a batch whose groups are all
    degenerate keeps none. ``rewards``: [P, G], NaN = unscorable."""
    variances = group_variances(rewards)  # [P]
    order = np.argsort(-variances, kind="stable")
    cumulative = np.cumsum(variances[order])
    if cumulative.size == 0 or cumulative[-1] == 0:
        return []
    count = int(np.searchsorted(cumulative, share * cumulative[-1], side="left")) + 1
    return sorted(order[:count].tolist())


def group_variances(rewards: np.ndarray) -> np.ndarray:
    """[P] the population variance of each group's scored rewards in ``rewards[P, G]``; exactly 0 for a group
    whose scored rewards are all equal (or fewer than two)."""
    valid = ~np.isnan(rewards)
    count = valid.sum(axis=1)
    values = np.where(valid, rewards, 0.0)
    mean = values.sum(axis=1) / np.maximum(count, 1)
    variances = np.where(valid, (values - mean[:, None]) ** 2, 0.0).sum(axis=1) / np.maximum(count, 1)
    lowest = np.where(valid, rewards, np.inf).min(axis=1)
    highest = np.where(valid, rewards, -np.inf).max(axis=1)
    return np.where(highest > lowest, variances, 0.0)


def _keep_groups(batch: StepBatch, advantages: torch.Tensor, keep: list[int]) -> tuple[StepBatch, torch.Tensor]:
    """The batch and its advantages ([P, G], or [B, T] per token) of the groups ``keep`` only."""
    if len(keep) == batch.num_groups:
        return batch, advantages
    g = batch.group_size
    per_token = is_per_token(advantages, batch.completion_mask)
    index = [p * g + i for p in keep for i in range(g)] if per_token else keep
    return batch.select_groups(keep), advantages[index]


def _take(value: Any, index: list[int]) -> Any:
    """``value`` at positions ``index`` of its first axis (a list, an array or a tensor; None stays None)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [value[i] for i in index]
    return value[index]


def _join(a: Any, b: Any, metadata: Mapping[str, Any]) -> Any:
    """``a`` then ``b`` along the first axis; [B, width] tensors padded to the wider one (see ``_per``)."""
    if a is None or b is None:
        return None
    if isinstance(a, list):
        return a + b
    if isinstance(a, np.ndarray):
        return np.concatenate([a, b])
    if metadata["axis"] in ("left", "right"):
        width, left = max(a.shape[1], b.shape[1]), metadata["axis"] == "left"
        a, b = (_pad_to(t, width, left=left, value=metadata["pad"]) for t in (a, b))
    return torch.cat([a, b])
