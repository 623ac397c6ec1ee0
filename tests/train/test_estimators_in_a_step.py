"""AVSPO's virtual samples (``avspo``) and a mix of two estimators (``mix-A-B-L``) in training: a step with them
trains differently from a step with the estimator they change, and a mix logs each part's share of the advantages.

The short runs are ``tests/test_remedies.py``'s (embedded model, G = 2, the first step's groups mixed and the later
ones all wrong); the update is ``test_update_policy``'s context model, where one SGD step's parameter change is
linear in the advantages.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tests.test_remedies import _metrics
from tests.train.test_group_masking import WITH_DEGENERATE, _equal, _updated, _with_rewards
from tests.train.test_update_policy import BagOfTokens

from grpolab.advantages import compute_advantages

STARVED = range(1, 4)  # the rows of the steps whose groups are all wrong


def test_avspo_trains_on_the_all_wrong_groups_that_starve_grpo(tmp_path: Path) -> None:
    grpo = _metrics(tmp_path / "grpo", advantage="grpo")
    avspo = _metrics(tmp_path / "avspo", advantage="avspo")
    for step in STARVED:
        assert grpo[step]["loss/trained_sequences"] == 0 and grpo[step]["starvation/useful_fraction"] == 0
        assert avspo[step]["loss/trained_sequences"] > 0 and avspo[step]["starvation/useful_fraction"] == 1


def test_a_mix_logs_each_parts_share_and_trains_where_its_group_centred_part_starves(tmp_path: Path) -> None:
    rows = _metrics(tmp_path / "mix", advantage="mix-sign-dr_grpo-0.5")
    # step 1, groups [1, 0] or [0, 1]: |0.5 * sign| = 0.5 and |0.5 * dr_grpo| = 0.25 for every completion
    assert (rows[0]["loss/mix_first"], rows[0]["loss/mix_second"]) == (0.5, 0.25)
    assert rows[0]["loss/mix_first_share"] == pytest.approx(2 / 3, rel=1e-12)
    for step in STARVED:  # all wrong: sign's -1 is all there is
        assert (rows[step]["loss/mix_first"], rows[step]["loss/mix_second"], rows[step]["loss/mix_first_share"]) == (
            0.5,
            0.0,
            1.0,
        )
        assert rows[step]["loss/trained_sequences"] > 0
    plain = _metrics(tmp_path / "dr_grpo", advantage="dr_grpo")
    assert all(plain[step]["loss/trained_sequences"] == 0 for step in STARVED)
    assert not any(key.startswith("loss/mix_") for row in plain for key in row)


@pytest.mark.parametrize("weight", [0.25, 0.5])
def test_a_mixed_update_is_the_weighted_sum_of_its_parts_updates(weight: float) -> None:
    """One SGD step from the same start: the parameter change is linear in the advantages, so the mix's change is
    weight * sign's + (1 - weight) * dr_grpo's, and differs from each (the all-correct group moves only with sign)."""
    batch = _with_rewards(WITH_DEGENERATE)
    start = {key: value.detach().clone() for key, value in BagOfTokens().named_parameters()}  # _updated's start

    def change(name: str) -> dict:
        after, _ = _updated(batch, compute_advantages(name, batch.rewards, lengths=batch.lengths))
        return {key: after[key] - start[key] for key in after}

    mixed, sign, dr_grpo = change(f"mix-sign-dr_grpo-{weight}"), change("sign"), change("dr_grpo")
    assert _equal(mixed, {key: weight * sign[key] + (1 - weight) * dr_grpo[key] for key in mixed}, exact=False)
    assert not _equal(mixed, sign, exact=False) and not _equal(mixed, dr_grpo, exact=False)


def test_avspo_moves_the_all_correct_group_that_grpo_leaves_alone() -> None:
    batch = _with_rewards(WITH_DEGENERATE)
    grpo, avspo = compute_advantages("grpo", batch.rewards), compute_advantages("avspo", batch.rewards)
    assert (avspo.numpy()[1] > 0).all() and np.array_equal(grpo.numpy()[1], [0.0, 0.0])
    with_avspo, _ = _updated(batch, avspo)
    with_avspo_less_the_group, _ = _updated(batch, avspo * torch.tensor([[1.0], [0.0], [1.0]]))
    assert not _equal(with_avspo, with_avspo_less_the_group, exact=False)  # the all-correct group's share moved it
    with_grpo, _ = _updated(batch, grpo)
    assert not _equal(with_avspo, with_grpo, exact=False)
