"""Degeneracy, Jensen gap, unbiased count estimator, histograms and sparsity against plain loops."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpolab.diagnostics import (
    STARVATION_KEYS,
    SuccessWindow,
    degeneracy,
    degenerate_groups,
    expected_degeneracy,
    expected_degeneracy_from_counts,
    gradient_sparsity,
    group_counts,
    iid_degeneracy,
    sparsity,
    starvation_metrics,
    success_histogram,
    success_rates,
    windowed_p_means,
    zero_advantage_fraction,
)

pytestmark = pytest.mark.fast


def loop_degeneracy(rewards: list[list[float]], threshold: float = 0.5) -> dict[str, float]:
    """Plain-Python reference for the documented rules (NaN skipped; empty groups are degenerate)."""
    all_correct = all_wrong = empty = 0
    rates, useful = [], 0
    for row in rewards:
        scored = [r for r in row if not math.isnan(r)]
        successes = sum(r >= threshold for r in scored)
        if not scored:
            empty += 1
            continue
        all_correct += successes == len(scored)
        all_wrong += successes == 0
        rates.append(successes / len(scored))
        mean = sum(scored) / len(scored)
        useful += sum(r - mean != 0 for r in scored)
    P, G = len(rewards), len(rewards[0])
    degenerate = (all_correct + all_wrong + empty) / P
    p_mean = sum(rates) / len(rates) if rates else 0.0
    d_iid = p_mean**G + (1 - p_mean) ** G
    return {
        "all_correct": all_correct / P,
        "all_wrong": all_wrong / P,
        "unscorable_groups": empty / P,
        "degenerate": degenerate,
        "p_mean": p_mean,
        "d_iid": d_iid,
        "jensen_gap": degenerate - d_iid,
        "useful_fraction": useful / (P * G),
    }


def random_rewards(rng: np.random.Generator, P: int, G: int, nan_share: float, binary: bool) -> np.ndarray:
    p = rng.beta(0.4, 0.4, size=(P, 1))
    rewards = (rng.random((P, G)) < p).astype(float) if binary else rng.random((P, G)).round(1)
    rewards[rng.random((P, G)) < nan_share] = np.nan
    return rewards


@pytest.mark.parametrize(
    ("P", "G", "nan_share", "binary"),
    [(50, 2, 0.0, True), (200, 4, 0.0, True), (100, 8, 0.2, True), (60, 3, 0.5, True), (80, 4, 0.1, False)],
)
def test_degeneracy_matches_loop(P: int, G: int, nan_share: float, binary: bool) -> None:
    rewards = random_rewards(np.random.default_rng(P + G), P, G, nan_share, binary)
    got = degeneracy(rewards)
    expected = loop_degeneracy(rewards.tolist())
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key
    assert got["groups"] == P


def test_input_types_agree() -> None:
    rewards = random_rewards(np.random.default_rng(0), 30, 4, 0.1, True)
    from_numpy = degeneracy(rewards)
    from_torch = degeneracy(torch.tensor(rewards, dtype=torch.float32))
    from_list = degeneracy(rewards.tolist())
    for key, value in from_numpy.items():
        assert from_torch[key] == pytest.approx(value, nan_ok=True)
        assert from_list[key] == pytest.approx(value, nan_ok=True)


def test_hand_computed_batch() -> None:
    # groups: all right, all wrong, mixed 2/4, one scorable (wrong) member, nothing scorable
    nan = float("nan")
    rewards = [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [0, nan, nan, nan], [nan, nan, nan, nan]]
    got = degeneracy(rewards)
    assert got["all_correct"] == pytest.approx(1 / 5)
    assert got["all_wrong"] == pytest.approx(2 / 5)  # the single-member group is uniform
    assert got["unscorable_groups"] == pytest.approx(1 / 5)
    assert got["degenerate"] == pytest.approx(4 / 5)
    assert got["p_mean"] == pytest.approx((1 + 0 + 0.5 + 0) / 4)  # over the 4 scorable groups
    assert got["d_iid"] == pytest.approx(0.375**4 + 0.625**4)
    assert got["useful_fraction"] == pytest.approx(4 / 20)  # only the mixed group's 4 completions
    assert got["expected_degeneracy"] == pytest.approx(2 / 3)  # over the 3 fully scorable groups
    assert got["scorable_fraction"] == pytest.approx(13 / 20)


def test_useful_fraction_from_given_advantages() -> None:
    rewards = [[1.0, 0.0], [1.0, 1.0]]
    advantages = [[1.0, -1.0], [0.5, 0.5]]  # e.g. the sign estimator keeps the second group alive
    assert degeneracy(rewards)["useful_fraction"] == pytest.approx(0.5)
    assert degeneracy(rewards, advantages=advantages)["useful_fraction"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shape"):
        degeneracy(rewards, advantages=[[1.0, 0.0]])


def test_threshold_for_non_binary_rewards() -> None:
    rewards = [[0.2, 0.4], [0.6, 0.9]]
    got = degeneracy(rewards, success_threshold=0.5)
    assert got["all_wrong"] == 0.5 and got["all_correct"] == 0.5
    assert got["useful_fraction"] == 1.0  # raw rewards still differ inside each group
    n, c = group_counts(rewards, success_threshold=0.3)
    assert n.tolist() == [2, 2] and c.tolist() == [1, 2]


def test_jensen_gap_on_bimodal_prompts() -> None:
    # half the prompts never solved, half always: D_real = 1, D_iid = 2 * 0.5^G
    rewards = np.array([[0.0] * 4] * 10 + [[1.0] * 4] * 10)
    got = degeneracy(rewards)
    assert got["degenerate"] == 1.0
    assert got["d_iid"] == pytest.approx(2 * 0.5**4)
    assert got["jensen_gap"] == pytest.approx(1 - 2 * 0.5**4)


@settings(max_examples=60, deadline=None)
@given(
    rates=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30),
    G=st.integers(1, 16),
)
def test_jensen_inequality(rates: list[float], G: int) -> None:
    p_bar = float(np.mean(rates))
    assert expected_degeneracy(rates, G) >= p_bar**G + (1 - p_bar) ** G - 1e-12


@settings(max_examples=60, deadline=None)
@given(p=st.floats(0.0, 1.0), n=st.integers(1, 14), data=st.data())
def test_count_estimator_is_unbiased(p: float, n: int, data: st.DataObject) -> None:
    G = data.draw(st.integers(1, n))
    # exact expectation over c ~ Binomial(n, p)
    mean = sum(
        math.comb(n, c) * p**c * (1 - p) ** (n - c) * expected_degeneracy_from_counts([c], [n], G)
        for c in range(n + 1)
    )
    assert mean == pytest.approx(p**G + (1 - p) ** G, abs=1e-10)


def test_count_estimator_hand_values_and_errors() -> None:
    # c=2 of n=4, G=2: (C(2,2) + C(2,2)) / C(4,2) = 2/6
    assert expected_degeneracy_from_counts(2, 4, 2) == pytest.approx(1 / 3)
    # mixed n, G=2: prompt 1 gives 1/3 as above; prompt 2 (c=3, n=5): (C(3,2) + C(2,2)) / C(5,2) = 4/10
    assert expected_degeneracy_from_counts([2, 3], [4, 5], 2) == pytest.approx((1 / 3 + 4 / 10) / 2)
    with pytest.raises(ValueError, match="n >= G"):
        expected_degeneracy_from_counts([1], [3], 4)
    with pytest.raises(ValueError):
        expected_degeneracy([0.5, 1.5], 4)


def test_success_histogram() -> None:
    exact = success_histogram([0, 0, 4, 2], [4, 4, 4, 4])
    assert exact["exact"] and exact["counts"].tolist() == [2, 0, 1, 0, 1]
    np.testing.assert_allclose(exact["rates"], [0, 0.25, 0.5, 0.75, 1])
    binned = success_histogram([0, 3, 8, 1], [4, 4, 8, 0], bins=4)  # the n=0 prompt is skipped
    assert not binned["exact"] and binned["counts"].tolist() == [1, 0, 0, 2]
    assert binned["fractions"].sum() == pytest.approx(1.0)


def test_zero_advantage_fraction_and_tokens() -> None:
    advantages = [[0.0, 1.0], [float("nan"), -1.0]]
    lengths = [[10, 30], [20, 40]]
    got = zero_advantage_fraction(advantages, lengths)
    assert got["completions"] == pytest.approx(0.5)
    assert got["tokens"] == pytest.approx((10 + 20) / 100)
    assert sparsity is zero_advantage_fraction


def test_gradient_sparsity() -> None:
    grads = [torch.tensor([0.0, 1e-9, 0.5]), None, np.array([[0.0, 2.0]])]
    assert gradient_sparsity(grads) == pytest.approx(2 / 5)
    assert gradient_sparsity(grads, threshold=1e-6) == pytest.approx(3 / 5)
    assert gradient_sparsity(torch.tensor([1.0, 0.1, 2.0]), threshold=0.1, relative=True) == pytest.approx(
        1 / 3
    )
    assert gradient_sparsity([]) == 0.0


def test_large_batch_is_fast() -> None:
    rewards = (np.random.default_rng(0).random((200_000, 8)) < 0.3).astype(np.float64)
    got = degeneracy(rewards)
    assert got["degenerate"] == pytest.approx(got["expected_degeneracy"])  # n == G: estimator = indicator


def test_success_window_keeps_the_newest_whole_steps_with_enough_groups() -> None:
    window = SuccessWindow(min_groups=4)
    window.add([1.0, 0.0, 1.0])  # 3 groups: not full, all kept
    assert (window.groups, window.full, window.p_mean) == (3, False, pytest.approx(2 / 3))
    window.add([0.0, 0.0])  # 5 groups; dropping the first step would leave 2 < 4
    assert window.groups == 5 and window.p_mean == pytest.approx(2 / 5)
    window.add([0.5, 0.5])  # 7: the first step (3) goes, 4 remain
    assert window.groups == 4 and window.p_mean == pytest.approx(1 / 4)
    restored = SuccessWindow(min_groups=4)
    restored.load_state(json.loads(json.dumps(window.state())))  # as through a checkpoint's state.json
    restored.add([0.1, 0.3])
    window.add([0.1, 0.3])
    assert (restored.groups, restored.p_mean) == (window.groups, window.p_mean)
    with pytest.raises(ValueError, match="min_groups"):
        SuccessWindow(0)


def test_windowed_p_means_back_fill_and_short_runs() -> None:
    steps = [[1.0], [0.0], [1.0], [1.0], [0.0]]
    # window of 2 groups: step 1 takes the first full window (steps 1-2), then trailing pairs
    assert windowed_p_means(steps, 2).tolist() == pytest.approx([0.5, 0.5, 0.5, 1.0, 0.5])
    # a run shorter than the window: every step gets the whole-run mean
    assert windowed_p_means(steps, 64).tolist() == pytest.approx([0.6] * 5)


def test_d_iid_does_not_depend_on_prompts_per_step() -> None:
    rng = np.random.default_rng(3)
    rewards = random_rewards(rng, 128, 4, 0.0, True)  # [128, 4], bimodal prompts
    pooled = iid_degeneracy(float(rewards.mean(axis=1).mean()), 4)
    for per_step in (1, 4, 64):
        window = SuccessWindow(min_groups=128)
        for start in range(0, 128, per_step):
            batch = rewards[start : start + per_step]
            window.add(success_rates(batch))
            metrics = starvation_metrics(batch, window=window)
        assert metrics["starvation/d_iid"] == pytest.approx(pooled), per_step
        assert metrics["starvation/window_groups"] == 128
    # without a window, one prompt per batch: D_iid of each prompt's own rate, far above the pooled value
    per_batch = np.mean([starvation_metrics(rewards[i : i + 1])["starvation/d_iid"] for i in range(128)])
    assert per_batch > pooled + 0.2


def test_starvation_metrics_keys_and_degenerate_from_advantages() -> None:
    rewards = [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]]
    grpo = [[0.0, 0.0], [0.7, -0.7], [0.0, 0.0]]
    sign = [[1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]]
    by_rewards = starvation_metrics(rewards)
    assert set(by_rewards) == {f"starvation/{key}" for key in STARVATION_KEYS}
    assert by_rewards["starvation/degenerate"] == by_rewards["starvation/uniform"] == pytest.approx(2 / 3)
    assert starvation_metrics(rewards, grpo)["starvation/degenerate"] == pytest.approx(2 / 3)
    with_sign = starvation_metrics(rewards, sign, lengths=[[1, 2], [3, 4], [5, 5]])
    assert with_sign["starvation/degenerate"] == 0.0 and with_sign["starvation/uniform"] == pytest.approx(2 / 3)
    assert with_sign["starvation/useful_token_fraction"] == 1.0
    assert starvation_metrics([[0.3, 0.3], [0.2, 0.9]])["starvation/degenerate"] == 0.5  # equal, non-binary
    assert degenerate_groups(rewards, [[1e-7, -1e-7], [0.5, -0.5], [np.nan, 0.0]]).tolist() == [True, False, True]


def test_outcome_shares_count_each_kind_of_group() -> None:
    from grpolab.diagnostics import outcome_shares

    # groups: all right (2/2), all wrong (0/3), mixed (1/4), nothing scorable (0/0)
    shares = outcome_shares([2, 3, 4, 0], [2, 0, 1, 0])
    assert shares == {"groups": 4.0, "all_correct": 0.25, "all_wrong": 0.25, "unscorable_groups": 0.25,
                      "uniform": 0.75, "p_mean": (1.0 + 0.0 + 0.25) / 3}
