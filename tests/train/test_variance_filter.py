"""The reward-variance filter (``variance_filter``, ``grpolab.train.batch.variance_filter``): which groups carry the
top share p of a batch's reward variance (hand cases), that the update then equals dropping the others by hand and
differs from the unfiltered one, and that p outside (0, 1] is refused in one line.

The update's model is ``test_update_policy``'s context model on its six rows, read as three groups of two.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.train.test_group_masking import _equal, _updated, _with_rewards

from grpolab.advantages import compute_advantages
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.train.batch import group_variances, top_variance_groups, variance_filter

NAN = float("nan")
# variances 0.25, 0.01, 0.25 (population, G = 2): total 0.51
SPREAD = np.array([[1.0, 0.0], [0.6, 0.4], [0.0, 1.0]])


def test_group_variances_are_population_variances_and_exactly_zero_when_degenerate() -> None:
    rewards = np.array(
        [[1.0, 0.0, 0.0, 0.0], [0.1, 0.1, 0.1, 0.1], [1.0, NAN, 0.0, NAN], [NAN] * 4, [0.3, NAN, NAN, NAN]]
    )
    np.testing.assert_allclose(group_variances(rewards), [3 / 16, 0.0, 0.25, 0.0, 0.0], rtol=1e-12)
    assert group_variances(rewards)[1] == 0.0  # 0.1 is inexact in binary; its group is still exactly degenerate


@pytest.mark.parametrize(
    ("share", "kept"),
    [
        (0.9, [0, 2]),  # 0.25 + 0.25 = 0.50 >= 0.459; the 0.01 group is dropped
        (0.49, [0]),  # 0.25 >= 0.2499: one group (the first of the tie)
        (0.5, [0, 2]),  # 0.25 < 0.255: a second group is needed
        (1.0, [0, 1, 2]),  # the whole variance: every group with any
    ],
)
def test_the_smallest_set_reaching_the_share_is_kept(share: float, kept: list[int]) -> None:
    assert top_variance_groups(SPREAD, share) == kept


def test_degenerate_groups_are_never_kept_and_an_all_degenerate_batch_keeps_none() -> None:
    with_degenerate = np.array([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [NAN, NAN]])
    assert top_variance_groups(with_degenerate, 1.0) == [1]
    assert top_variance_groups(np.array([[1.0, 1.0], [0.0, 0.0]]), 1.0) == []
    assert top_variance_groups(np.zeros((0, 2)), 0.9) == []


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_the_filtered_update_equals_dropping_the_other_groups_by_hand(aggregation: str) -> None:
    batch = _with_rewards(SPREAD)
    advantages = compute_advantages("dr_grpo", batch.rewards, lengths=batch.lengths)
    filtered, kept = variance_filter(batch, advantages, 0.9)
    assert filtered.num_groups == 2 and torch.equal(kept, advantages[[0, 2]])
    after, _ = _updated(filtered, kept, loss_aggregation=aggregation)
    by_hand, _ = _updated(_with_rewards(SPREAD, [0, 2]), advantages[[0, 2]], loss_aggregation=aggregation)
    assert _equal(after, by_hand, exact=False)
    unfiltered, _ = _updated(batch, advantages, loss_aggregation=aggregation)
    assert not _equal(after, unfiltered, exact=False)  # the low-variance group's advantages moved the policy


def test_the_filter_keeps_every_group_at_share_one_without_degenerate_groups() -> None:
    batch = _with_rewards(SPREAD)
    advantages = compute_advantages("dr_grpo", batch.rewards, lengths=batch.lengths)
    filtered, kept = variance_filter(batch, advantages, 1.0)
    assert filtered is batch and kept is advantages


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5, NAN])
def test_a_share_outside_zero_one_is_refused_in_one_line(share: float) -> None:
    with pytest.raises(UserError, match=r"^variance_filter_p must be in \(0, 1\]") as error:
        TrainConfig(variance_filter=True, variance_filter_p=share)
    assert "\n" not in str(error.value)
