"""Which estimators are the same update under Adam: by exhaustive binary reward patterns, from the registry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpolab import advantages
from grpolab.report.same_update import binary_patterns, same_update_ratio

pytestmark = pytest.mark.fast


def test_binary_patterns_are_every_group_once() -> None:
    patterns = binary_patterns(3)
    assert patterns.shape == (8, 3)
    assert {tuple(row) for row in patterns.tolist()} == {(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)}


def test_grpo_is_dr_grpo_rescaled_only_at_g_2_and_3() -> None:
    # G = 2: every mixed group has one success, sample std sqrt(1/2): grpo = dr_grpo / (sqrt(1/2) + 1e-4)
    assert same_update_ratio("grpo", "dr_grpo", 2) == pytest.approx(1 / (np.sqrt(0.5) + 1e-4))
    # G = 3: one or two successes give the same std, sqrt(1/3)
    assert same_update_ratio("grpo", "dr_grpo", 3) == pytest.approx(1 / (np.sqrt(1 / 3) + 1e-4))
    # G = 4: two successes (std 0.577) and one (std 0.5) give different ratios
    assert same_update_ratio("grpo", "dr_grpo", 4) is None


@pytest.mark.parametrize("size", [2, 4, 8])
def test_rloo_is_dr_grpo_times_g_over_g_minus_1_at_every_g(size: int) -> None:
    assert same_update_ratio("rloo", "dr_grpo", size) == pytest.approx(size / (size - 1))
    assert same_update_ratio("dr_grpo", "rloo", size) == pytest.approx((size - 1) / size)


def test_sign_is_not_a_group_centred_estimator_rescaled() -> None:
    for other in ("dr_grpo", "grpo", "rloo"):
        assert same_update_ratio("sign", other, 2) is None  # sign is -1 on an all-wrong group, they are 0
    assert same_update_ratio("sign", "fixed_baseline", 4) == pytest.approx(2.0)  # 2r - 1 = 2 (r - 1/2)


def test_a_negative_multiple_is_not_the_same_update() -> None:
    name = "test_negated_dr_grpo"
    advantages.register(name, needs_group=True)(lambda rewards: -(rewards - rewards.mean(dim=1, keepdim=True)))
    try:
        assert same_update_ratio(name, "dr_grpo", 2) is None
    finally:
        advantages._REGISTRY.pop(name)


def test_batch_normalised_estimators_are_not_claimed() -> None:
    """reinforce_pp whitens over the whole batch, so its scale depends on the other groups of a step."""
    assert same_update_ratio("reinforce_pp", "dr_grpo", 2) is None
    name = "test_batch_scaled_dr_grpo"  # dr_grpo divided by the batch's mean absolute advantage
    advantages.register(name, needs_group=True)(
        lambda rewards: (centred := rewards - rewards.mean(dim=1, keepdim=True)) / centred.abs().mean().clamp(min=1e-9)
    )
    try:
        assert same_update_ratio(name, "dr_grpo", 4) is None
    finally:
        advantages._REGISTRY.pop(name)


def test_suffixes_and_unknown_names() -> None:
    assert same_update_ratio("rloo+dynamic", "dr_grpo+dynamic", 2) == pytest.approx(2.0)
    assert same_update_ratio("rloo+dynamic", "dr_grpo", 2) is None  # dynamic sampling trains other groups
    assert same_update_ratio("no_such_estimator", "dr_grpo", 2) is None
    assert same_update_ratio("rloo", "dr_grpo", 64) is None  # too many patterns to check: nothing claimed
    assert torch.equal(advantages.compute_advantages("dr_grpo", [[1.0, 1.0]]), torch.zeros(1, 2))  # degenerate
