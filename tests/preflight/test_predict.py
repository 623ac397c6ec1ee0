"""``grpolab.preflight.predict``: the degenerate share predicted from per-prompt counts against fresh groups of a
simulated population, hand-computed tables, the recommendation rules and the band."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from grpolab.diagnostics import degeneracy_per_prompt
from grpolab.diagnostics.variance import snr_ratio_from_counts
from grpolab.errors import UserError
from grpolab.preflight import analyse, predict
from grpolab.preflight.page import summary_lines

pytestmark = pytest.mark.fast


def _population(prompts: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Pass rates p [P] from a bimodal Beta(0.5, 0.5) (where the Jensen gap is large) and counts k [P] ~ Bin(n, p)."""
    rng = np.random.default_rng(seed)
    rates = rng.beta(0.5, 0.5, size=prompts)
    return rates, rng.binomial(n, rates)


def _fresh_groups(rates: np.ndarray, group_size: int, groups_each: int, seed: int) -> dict[str, float]:
    """Measured shares of all-wrong and all-right groups over ``groups_each`` fresh G-groups of every prompt."""
    rng = np.random.default_rng(seed)
    right = rng.binomial(group_size, np.repeat(rates, groups_each))  # successes of each fresh group
    return {"all_wrong": float(np.mean(right == 0)), "all_right": float(np.mean(right == group_size))}


@pytest.mark.parametrize(("n", "group_size"), [(8, 2), (8, 4), (16, 8), (4, 4)])
def test_the_share_predicted_from_counts_is_the_share_fresh_groups_show(n: int, group_size: int) -> None:
    """Both the prediction (the mean of [C(k,G) + C(n-k,G)] / C(n,G) over P prompts) and the measurement (M fresh
    groups per prompt) are unbiased for E_i[p_i^G + (1 - p_i)^G] given the p_i. Each averages terms in [0, 1],
    whose variance is at most 1/4, so their difference has a standard deviation of at most
    sqrt(1/(4P) + 1/(4PM)); by the CLT at P = 20,000, 4 of those bound it with probability > 0.9999.
    The plug-in (k/n)^G + (1 - k/n)^G and the i.i.d. prediction both miss by more, so the test can fail."""
    prompts, groups_each = 20_000, 8
    rates, counts = _population(prompts, n, seed=n * 100 + group_size)
    row = predict.group_table(counts, n, (group_size,)).iloc[0]
    measured = _fresh_groups(rates, group_size, groups_each, seed=7)
    tolerance = 4 * math.sqrt(1 / (4 * prompts) + 1 / (4 * prompts * groups_each))
    assert abs(row["degenerate"] - (measured["all_wrong"] + measured["all_right"])) < tolerance
    assert abs(row["all_wrong"] - measured["all_wrong"]) < tolerance
    assert abs(row["all_right"] - measured["all_right"]) < tolerance
    plug_in = float(np.mean((counts / n) ** group_size + (1 - counts / n) ** group_size))
    if group_size > 1 and group_size < n:
        assert plug_in - (measured["all_wrong"] + measured["all_right"]) > tolerance
    assert row["degenerate"] - row["d_iid"] > 10 * tolerance  # the Jensen gap of a bimodal pool
    assert row["jensen_gap"] == pytest.approx(row["degenerate"] - row["d_iid"])


def test_a_hand_computed_table() -> None:
    """Every prompt 4 of 8: at G = 2, [C(4,2) + C(4,2)] / C(8,2) = 12/28 = 3/7, each part 3/14; 1,000 completions
    make 500 groups, 4/7 of them informative; pbar = 1/2 gives the i.i.d. 1/2; G = 16 > n has no estimate."""
    table = predict.group_table(np.full(5, 4), 8).set_index("group_size")
    assert table.loc[2, "degenerate"] == pytest.approx(3 / 7)
    assert table.loc[2, "all_wrong"] == pytest.approx(3 / 14) and table.loc[2, "all_right"] == pytest.approx(3 / 14)
    assert table.loc[2, "d_iid"] == pytest.approx(0.5)
    assert table.loc[2, "informative_per_1000"] == pytest.approx(500 * 4 / 7)
    assert table.loc[8, "degenerate"] == pytest.approx(2 / math.comb(8, 8) * 0)  # k = 4 < 8: no uniform 8-group
    assert np.isnan(table.loc[16, "degenerate"]) and table.loc[16, "d_iid"] == pytest.approx(2 * 0.5**16)
    assert table.loc[4, "snr_sign"] == pytest.approx(snr_ratio_from_counts(np.full(5, 4), 8, 4, 0.5))
    # E[p(1-p)] unbiased: 4 * 4 / (8 * 7) = 2/7; sign's ratio 4 E[p(1-p)] / (1 - 1/G)
    assert table.loc[4, "snr_sign"] == pytest.approx(4 * (2 / 7) / (3 / 4))


def test_the_recommended_group_size_is_the_smallest_with_at_most_half_degenerate() -> None:
    """n = 4. At G = 2 a prompt with k = 2 is uniform with chance [C(2,2) + C(2,2)] / C(4,2) = 1/3, k = 1 or 3
    with 3/6 = 1/2, k = 0 with 1; at G = 4 only k = 0 or 4 is."""
    middling = predict.group_table(np.array([1, 3, 2, 2, 1, 3]), 4)
    assert middling.iloc[0]["degenerate"] == pytest.approx((4 * 0.5 + 2 / 3) / 6)
    assert predict.recommend_group_size(middling) == 2
    one_dead = predict.group_table(np.array([0, 2, 2]), 4)  # G = 2: (1 + 1/3 + 1/3) / 3 = 0.56; G = 4: 1/3
    assert one_dead.iloc[0]["degenerate"] == pytest.approx(5 / 9)
    assert predict.recommend_group_size(one_dead) == 4
    hard = predict.group_table(np.array([0, 0, 0, 0, 1, 4, 4]), 4)  # 6/7 uniform at G = 4: none reaches 1/2
    assert predict.recommend_group_size(hard) == 4  # the largest G that n = 4 allows, not 8 or 16


def test_the_band_is_where_a_group_is_informative_half_as_often_as_at_one_half() -> None:
    low, high = predict.band_for(2)
    assert low == pytest.approx((1 - math.sqrt(0.5)) / 2) and high == pytest.approx(1 - low)  # 2p(1-p) = 1/4
    for group_size in (4, 8, 16):
        low, high = predict.band_for(group_size)
        informative = 1 - low**group_size - (1 - low) ** group_size
        assert informative == pytest.approx((1 - 2.0 ** (1 - group_size)) / 2)
        assert low < predict.band_for(2)[0]  # larger groups tolerate more extreme pass rates


def test_a_band_holding_no_prompt_names_the_range() -> None:
    with pytest.raises(UserError, match=r"range from 0\.250 to 0\.750") as caught:
        predict.in_band(np.array([1, 2, 3]), 4, (0.8, 0.9))
    assert "\n" not in str(caught.value)
    with pytest.raises(UserError, match="LOW,HIGH"):
        predict.check_band((0.9, 0.1))
    assert predict.in_band(np.array([0, 1, 2, 4]), 4, (0.25, 0.5)).tolist() == [False, True, True, False]


def test_fewer_than_two_samples_are_refused() -> None:
    with pytest.raises(UserError, match="at least 2 samples"):
        predict.group_table(np.array([0, 1]), 1)


def test_the_control_is_a_seeded_draw_from_the_whole_pool() -> None:
    first, again, other = (predict.control_indices(50, 10, seed) for seed in (3, 3, 4))
    assert first.tolist() == again.tolist() and first.tolist() != other.tolist()
    assert len(set(first.tolist())) == 10 and first.min() >= 0 and first.max() < 50


def test_analyse_measures_the_band_on_samples_held_out_from_choosing_it() -> None:
    counts = np.array([0, 0, 0, 8, 8, 4, 3, 5, 2, 6])
    result = analyse(counts, 8, band=(0.2, 0.8))
    assert result.band_size == ((counts >= 2) & (counts <= 6)).sum() == 5
    assert result.group_size == 8 and math.isnan(result.band_degenerate)  # G > n / 2: no held-out half holds G
    assert "--eval-samples 16" in summary_lines(result)[2]
    counts = np.array([0, 0, 16, 8, 3, 13, 6, 10, 2, 14])
    result = analyse(counts, 16, band=(0.2, 0.8), seed=3)
    assert result.band_degenerate == predict.held_out_band_degenerate(counts, 16, (0.2, 0.8), result.group_size,
                                                                      seed=3)
    assert "held out from choosing the band" in summary_lines(result)[2]


@pytest.mark.parametrize(("n", "group_size"), [(16, 4), (16, 8), (8, 4)])
def test_the_held_out_band_share_is_near_the_truth_where_the_same_counts_understate_it(n: int,
                                                                                       group_size: int) -> None:
    """4,000 prompts, p ~ Beta(0.5, 0.5): the band's true share is the mean of p^G + (1 - p)^G over its prompts.
    The counts that chose the band say it is far lower (a prompt is in it because its k is neither 0 nor n); the
    held-out estimate is the share of a band chosen on n / 2 samples (simulated directly here), nearer the truth."""
    rng = np.random.default_rng(1)
    rates = rng.beta(0.5, 0.5, 4000)
    counts = rng.binomial(n, rates)
    band = predict.band_for(group_size)
    inside = predict.band_mask(counts, n, band)
    truth = np.mean(rates[inside] ** group_size + (1 - rates[inside]) ** group_size)
    same_counts = degeneracy_per_prompt(counts[inside], n, group_size).mean()
    held_out = predict.held_out_band_degenerate(counts, n, band, group_size, seed=0)
    halves = [predict.band_mask(rng.binomial(n // 2, rates), n // 2, band) for _ in range(20)]
    half_truth = np.mean([np.mean(rates[m] ** group_size + (1 - rates[m]) ** group_size) for m in halves])
    assert truth - same_counts > 0.05
    assert abs(held_out - truth) < truth - same_counts
    assert held_out == pytest.approx(half_truth, abs=0.02)  # about 4 standard errors of a 1,000-prompt band's mean


def test_the_bands_docs_planning_quotes_are_the_codes() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "planning.md").read_text()
    quoted = re.findall(r"\[(0\.\d{3}), (0\.\d{3})\] at G = (\d+)", text)
    assert {int(g) for _, _, g in quoted} == {2, 4, 8}
    for low, high, group_size in quoted:
        band = predict.band_for(int(group_size))
        assert (f"{band[0]:.3f}", f"{band[1]:.3f}") == (low, high), group_size
