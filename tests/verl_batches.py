"""verl-like batches for the verl adapter tests: binary outcome rewards, ragged shuffled groups."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

# group sizes of the "ragged" batch: equal groups, unequal ones and groups of one response
RAGGED_SIZES = (4, 4, 3, 1, 5, 2, 1, 4, 6, 1)


def make_batch(sizes: tuple[int, ...], length: int = 6, seed: int = 0) -> dict[str, Any]:
    """token_level_rewards [B, T] (outcome reward on the last response token), response_mask [B, T], uid [B].

    The first group is all correct and the second all wrong (when there are two groups or more); rows
    are shuffled so that a group's responses are not adjacent.
    """
    gen = torch.Generator().manual_seed(seed)
    batch = sum(sizes)
    lengths = torch.randint(1, length + 1, (batch,), generator=gen)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).float()  # [B, T]
    outcome = torch.randint(0, 2, (batch,), generator=gen).float()
    if len(sizes) >= 2:
        outcome[: sizes[0]] = 1.0
        outcome[sizes[0] : sizes[0] + sizes[1]] = 0.0
    token_level_rewards = torch.zeros(batch, length)
    token_level_rewards[torch.arange(batch), lengths - 1] = outcome
    uids = np.array([f"uid-{g}" for g, size in enumerate(sizes) for _ in range(size)], dtype=object)
    perm = torch.randperm(batch, generator=gen)
    return {"token_level_rewards": token_level_rewards[perm], "response_mask": mask[perm], "index": uids[perm]}
