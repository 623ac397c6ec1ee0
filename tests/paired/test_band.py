"""The paired pass@k difference, its simultaneous band over k, and the seed-level interval."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from grpolab.diagnostics.passk import pass_at_k_curve
from grpolab.errors import UserError
from grpolab.paired.band import paired_band, per_prompt_pass_at_k, seed_differences

SIMULATIONS = 200
LEVEL = 0.95


def _same_policy_dataset(rng: np.random.Generator, prompts: int = 150, n: int = 8):
    """A and B sample the same per-prompt success p_i (Beta(0.6, 0.6): many easy and hard prompts)."""
    p = rng.beta(0.6, 0.6, prompts)
    full = np.full(prompts, n)
    return full, rng.binomial(n, p), full, rng.binomial(n, p)


def _binomial_acceptance(trials: int, rate: float, tail: float = 0.001) -> tuple[float, float]:
    """The share of ``trials`` covered that a true coverage ``rate`` gives with probability 1 - 2 tail."""
    low, high = scipy_stats.binom.ppf([tail, 1 - tail], trials, rate)
    return low / trials, high / trials


def test_the_difference_is_the_difference_of_the_mean_curves():
    n_a, c_a = np.array([4, 4, 6, 5]), np.array([0, 2, 6, 1])
    n_b, c_b = np.array([4, 5, 4, 4]), np.array([1, 1, 3, 4])
    band = paired_band(n_a, c_a, n_b, c_b, resamples=200)
    assert band.ks == [1, 2, 3, 4]  # k up to the smallest n of either side
    curve_a, curve_b = pass_at_k_curve(n_a, c_a, band.ks), pass_at_k_curve(n_b, c_b, band.ks)
    for j, k in enumerate(band.ks):
        assert band.difference[j] == pytest.approx(curve_a[k] - curve_b[k], abs=1e-12)


def test_per_prompt_pass_at_k_by_hand():
    # n = 4, c = 1: pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1/2, pass@3 = 3/4, pass@4 = 1
    assert per_prompt_pass_at_k([4], [1], [1, 2, 3, 4])[0] == pytest.approx([0.25, 0.5, 0.75, 1.0], abs=1e-12)


def test_the_band_is_never_narrower_than_a_pointwise_interval_and_wider_somewhere():
    band = paired_band(*_same_policy_dataset(np.random.default_rng(3)), resamples=1000, seed=1)
    assert np.all(band.critical >= band.pointwise_critical)
    assert np.all(band.band_high - band.band_low >= band.pointwise_high - band.pointwise_low)
    assert np.any(band.critical > band.pointwise_critical + 0.05)  # a band over 8 k costs width


def test_deterministic_given_the_seed_and_different_with_another():
    data = _same_policy_dataset(np.random.default_rng(5))
    first, again, other = (paired_band(*data, resamples=500, seed=s) for s in (7, 7, 8))
    assert np.array_equal(first.band_low, again.band_low) and first.critical == again.critical
    assert first.critical != other.critical


def test_the_band_covers_a_zero_difference_about_95_percent_of_the_time():
    """A and B share every prompt's p, so the true difference is 0 at every k; the band must cover the whole zero
    vector in about 95% of datasets, and pointwise intervals (all k at once) noticeably less often."""
    rng = np.random.default_rng(2026)
    band_covers, pointwise_covers = 0, 0
    for index in range(SIMULATIONS):
        band = paired_band(*_same_policy_dataset(rng), resamples=1000, seed=index)
        band_covers += bool(np.all((band.band_low <= 0) & (band.band_high >= 0)))
        pointwise_covers += bool(np.all((band.pointwise_low <= 0) & (band.pointwise_high >= 0)))
    low, high = _binomial_acceptance(SIMULATIONS, LEVEL)
    assert low <= band_covers / SIMULATIONS <= high
    assert pointwise_covers < band_covers


def test_a_large_true_difference_is_detected_at_every_k():
    rng = np.random.default_rng(11)
    prompts, n = 200, 8
    p = rng.beta(1.0, 3.0, prompts)
    better = np.minimum(1.0, p + 0.3)
    full = np.full(prompts, n)
    band = paired_band(full, rng.binomial(n, better), full, rng.binomial(n, p), seed=0)
    assert band.excludes_zero() == band.ks
    assert np.all(band.band_low > 0)


def test_unequal_n_per_prompt_is_allowed_and_limits_k():
    band = paired_band([8, 8, 16], [2, 8, 3], [4, 6, 16], [0, 6, 9], resamples=200)
    assert band.ks == [1, 2, 3, 4]


def test_a_k_without_spread_over_prompts_has_a_point_band():
    # every prompt solved by A and never by B at k = n... d_ik = 1 at k = 4 for all prompts
    band = paired_band([4, 4, 4], [4, 4, 4], [4, 4, 4], [0, 0, 0], resamples=200)
    assert np.all(band.se == 0) and np.all(band.band_low == band.difference)
    assert band.excludes_zero() == []  # was [1, 2, 3, 4]: three prompts carry an exact sign-flip p of 0.25 at best
    many = paired_band([4] * 6, [4] * 6, [4] * 6, [0] * 6, resamples=200)
    assert many.excludes_zero() == [1, 2, 3, 4]  # six: 2 / 2^6 = 0.031 < 0.05


@pytest.mark.parametrize(("args", "message"), [
    (([4, 4], [1, 2], [4], [1]), "same prompts"),
    (([4], [1], [4], [1]), "at least 2 prompts"),
    (([4, 4], [5, 2], [4, 4], [1, 1]), "side A"),
    (([4, 4], [1.5, 2], [4, 4], [1, 1]), "whole numbers"),
])
def test_bad_input_is_refused(args, message):
    with pytest.raises(UserError, match=message):
        paired_band(*args)


def test_seed_differences_match_the_paired_t_interval_by_hand():
    a = np.array([[0.5, 0.7], [0.6, 0.8], [0.4, 0.75]])
    b = np.array([[0.45, 0.7], [0.5, 0.7], [0.42, 0.7]])
    result = seed_differences(a, b, [0, 1, 2])
    d = (a - b)[:, 0]  # 0.05, 0.10, -0.02
    half = scipy_stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    assert result.difference[0] == pytest.approx(d.mean(), abs=1e-12)
    assert result.low[0] == pytest.approx(d.mean() - half, abs=1e-12)
    assert result.p[0] == pytest.approx(scipy_stats.ttest_rel(a[:, 0], b[:, 0]).pvalue, rel=1e-9)
    assert np.all(result.p_holm >= result.p)
    small, large = sorted(result.p)
    holm = {small: min(1.0, 2 * small), large: max(min(1.0, 2 * small), large)}  # Holm over the 2 values of k
    assert result.p_holm == pytest.approx([holm[p] for p in result.p], rel=1e-12)


def test_seed_differences_floor_p_and_give_no_interval_without_spread():
    """Three seeds that each differ by exactly +0.05 at k = 1: no exact test of 3 pairs gives p below 2 / 2^3, and
    an interval of width 0 would read as certainty (the report's paired rows do the same)."""
    a = np.array([[0.55, 0.9], [0.65, 0.8], [0.45, 0.95]])
    b = a - np.array([[0.05, 0.2], [0.05, 0.1], [0.05, 0.0]])
    result = seed_differences(a, b, [0, 1, 2])
    assert result.p[0] == pytest.approx(0.25, abs=1e-12) and np.isnan(result.low[0]) and np.isnan(result.high[0])
    assert result.difference[0] == pytest.approx(0.05, abs=1e-12)
    d = (a - b)[:, 1]  # 0.2, 0.1, 0.0: spread, so its own t interval and p (above the floor)
    assert result.p[1] == pytest.approx(max(0.25, scipy_stats.ttest_rel(a[:, 1], b[:, 1]).pvalue), rel=1e-9)
    assert result.low[1] < d.mean() < result.high[1]
    written = result.to_dict()
    assert written["low"][0] is None and written["high"][0] is None and written["p"][0] == pytest.approx(0.25)
    assert "floored" in written["method"]


def test_seed_differences_need_two_seeds():
    with pytest.raises(UserError, match="at least 2 seeds"):
        seed_differences([[0.5]], [[0.4]], [0])
