"""Group masking (``mask_degenerate_groups``, ``grpolab.train.batch.mask_degenerate``) acts only on degenerate
groups: it changes nothing on a batch without them, equals dropping them by hand on a batch with them (loss
numerator and denominator), and with beta > 0 the KL term no longer moves them.

The model is ``test_update_policy``'s context model on its six rows, read as three groups of two.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.train.test_update_policy import COMPLETIONS, PROMPTS, BagOfTokens, _batch

from grpolab.advantages import compute_advantages
from grpolab.config import TrainConfig
from grpolab.train.batch import StepBatch, mask_degenerate
from grpolab.train.update import update_policy

pytestmark = pytest.mark.fast

G = 2
MAX_LENGTH = 5
MIXED = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
WITH_DEGENERATE = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])  # group 1 is all-correct
INFORMATIVE = [0, 2]


def _rows(groups: list[int]) -> list[int]:
    return [p * G + i for p in groups for i in range(G)]


def _with_rewards(rewards: np.ndarray, groups: list[int] | None = None) -> StepBatch:
    """The batch of ``groups`` (default: all), built from their rows alone (not by selecting from a batch)."""
    rows = _rows(groups if groups is not None else list(range(len(PROMPTS) // G)))
    batch = _batch([PROMPTS[r] for r in rows], [COMPLETIONS[r] for r in rows], group_size=G)
    batch.rewards = rewards if groups is None else rewards[groups]
    return batch


def _updated(batch: StepBatch, advantages: torch.Tensor, **overrides) -> tuple[dict[str, torch.Tensor], dict]:
    """The parameters after one SGD update (lr 1, no clipping) from the same start, and the metrics."""
    config = TrainConfig(**{"max_grad_norm": 0.0, "lr": 1.0, **overrides})
    model = BagOfTokens()
    optimizer = torch.optim.SGD(list(model.parameters()), lr=1.0)
    reference = BagOfTokens(seed=1) if config.beta > 0 else None
    metrics = update_policy(model, optimizer, batch, advantages, config,
                            lr=1.0, max_length=MAX_LENGTH,
                            reference=reference)
    return {name: p.detach().clone() for name, p in model.named_parameters()}, metrics


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], *, exact: bool) -> bool:
    if exact:
        return all(torch.equal(a[n], b[n]) for n in a)
    return all(torch.allclose(a[n], b[n], rtol=1e-5, atol=1e-6) for n in a)


@pytest.mark.parametrize("estimator", ["dr_grpo", "sign"])
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_masking_changes_nothing_without_degenerate_groups(estimator: str, aggregation: str) -> None:
    batch = _with_rewards(MIXED)
    advantages = compute_advantages(estimator, batch.rewards, lengths=batch.lengths)
    masked, masked_advantages = mask_degenerate(batch, advantages)
    assert masked.num_groups == batch.num_groups
    plain, _ = _updated(batch, advantages, loss_aggregation=aggregation)
    after, _ = _updated(masked, masked_advantages, loss_aggregation=aggregation)
    assert _equal(plain, after, exact=True)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_masking_equals_dropping_the_degenerate_groups_by_hand(aggregation: str) -> None:
    batch = _with_rewards(WITH_DEGENERATE)
    advantages = compute_advantages("sign", batch.rewards, lengths=batch.lengths)  # sign moves every group
    masked, masked_advantages = mask_degenerate(batch, advantages)
    assert masked.num_groups == 2 and torch.equal(masked_advantages, advantages[INFORMATIVE])
    by_hand = _with_rewards(WITH_DEGENERATE, INFORMATIVE)
    after, metrics = _updated(masked, masked_advantages, loss_aggregation=aggregation)
    expected, expected_metrics = _updated(by_hand, advantages[INFORMATIVE], loss_aggregation=aggregation)
    assert _equal(after, expected, exact=False)
    assert metrics["loss/train_tokens"] == expected_metrics["loss/train_tokens"]
    unmasked, _ = _updated(batch, advantages, loss_aggregation=aggregation)
    assert not _equal(after, unmasked, exact=False)  # the all-correct group's sign advantages moved the policy


def test_with_a_kl_term_masking_stops_the_kl_moving_degenerate_groups() -> None:
    batch = _with_rewards(WITH_DEGENERATE)
    advantages = compute_advantages("dr_grpo", batch.rewards, lengths=batch.lengths)
    assert torch.all(advantages[1] == 0)  # the degenerate group carries no policy gradient, only the KL's
    start = {name: p.detach().clone() for name, p in BagOfTokens().named_parameters()}
    unmasked, _ = _updated(batch, advantages, beta=0.5)
    masked, masked_advantages = mask_degenerate(batch, advantages)
    after, _ = _updated(masked, masked_advantages, beta=0.5)
    by_hand, _ = _updated(_with_rewards(WITH_DEGENERATE, INFORMATIVE), advantages[INFORMATIVE], beta=0.5)
    assert _equal(after, by_hand, exact=False)
    assert not _equal(after, unmasked, exact=False)
    # a batch of degenerate groups alone: unmasked, the KL moves the policy; masked, nothing is trained
    alone = _with_rewards(WITH_DEGENERATE, [1])
    moved, _ = _updated(alone, advantages[[1]], beta=0.5)
    dropped, dropped_advantages = mask_degenerate(alone, advantages[[1]])
    kept, metrics = _updated(dropped, dropped_advantages, beta=0.5)
    assert dropped.num_groups == 0 and metrics["loss/trained_sequences"] == 0
    assert not _equal(moved, start, exact=False) and _equal(kept, start, exact=True)


def test_masking_per_token_advantages_selects_the_rows_of_the_kept_groups() -> None:
    batch = _with_rewards(WITH_DEGENERATE)
    batch.token_rewards = torch.zeros(batch.size, batch.completion_ids.shape[1], dtype=torch.float64)
    advantages = torch.arange(batch.size * batch.completion_ids.shape[1], dtype=torch.float32).reshape(batch.size, -1)
    masked, masked_advantages = mask_degenerate(batch, advantages)
    assert masked.num_groups == 2 and torch.equal(masked_advantages, advantages[_rows(INFORMATIVE)])
