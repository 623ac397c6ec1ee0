"""The variance view's predicted SNR ratio: hand values, its interval, and a simulation under its assumptions."""

from __future__ import annotations

import numpy as np
import pytest

from grpolab.diagnostics.variance import (
    FIXED_BASELINES,
    mean_success_variance,
    sign_helps_interval,
    snr_ratio_fixed_vs_centred,
    snr_ratio_from_counts,
    snr_ratio_sign_vs_centred,
)


def test_hand_values():
    assert snr_ratio_sign_vs_centred(0.5, 2) == pytest.approx(2.0)
    assert snr_ratio_sign_vs_centred(0.5, 4) == pytest.approx(4 / 3)
    assert snr_ratio_sign_vs_centred(0.1, 4) == pytest.approx(4 * 0.09 / 0.75)
    assert np.allclose(snr_ratio_sign_vs_centred(np.array([0.0, 1.0]), 8), 0.0)


def test_interval_matches_the_quoted_bounds():
    low, high = sign_helps_interval(2)
    assert (round(low, 3), round(high, 3)) == (0.146, 0.854)
    assert sign_helps_interval(4) == pytest.approx((0.25, 0.75))
    for g in (2, 4, 8):
        low, high = sign_helps_interval(g)
        assert snr_ratio_sign_vs_centred(low, g) == pytest.approx(1.0)
        assert snr_ratio_sign_vs_centred((low + high) / 2, g) > 1 > snr_ratio_sign_vs_centred(low / 2, g)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="G >= 2"):
        snr_ratio_sign_vs_centred(0.5, 1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        snr_ratio_sign_vs_centred(1.5, 4)


def test_fixed_baselines_reduce_to_the_closed_forms():
    p = np.linspace(0.05, 0.95, 19)
    for g in (2, 4, 8):
        assert np.allclose(snr_ratio_fixed_vs_centred(p, g, FIXED_BASELINES["sign"]), snr_ratio_sign_vs_centred(p, g))
        assert np.allclose(snr_ratio_fixed_vs_centred(p, g, 0.0), (1 - p) / (1 - 1 / g))
        assert np.allclose(snr_ratio_fixed_vs_centred(p, g, 1.0), p / (1 - 1 / g))


def _simulated_snr2(p: float, group_size: int, estimator: str, rng: np.random.Generator) -> float:
    """SNR^2 (|mean|^2 / total variance) of one completion's gradient term A_i s_i, with scores s = z + m(r):
    z ~ N(0, I_d) unrelated to the reward and m(1) = (1 - p) v, m(0) = -p v (so E[s] = 0, E[r s] = p (1 - p) v)."""
    draws, dim = 400_000, 50
    rewards = (rng.random((draws, group_size)) < p).astype(float)
    if estimator in FIXED_BASELINES:
        weights = rewards[:, 0] - FIXED_BASELINES[estimator]
    else:
        weights = rewards[:, 0] - rewards.mean(axis=1)
    signal = np.zeros(dim)
    signal[0] = 0.3
    scores = rng.standard_normal((draws, dim)) + np.where(rewards[:, :1] == 1, 1 - p, -p) * signal
    terms = weights[:, None] * scores
    mean = terms.mean(axis=0)
    return float(mean @ mean / terms.var(axis=0).sum())


@pytest.mark.parametrize(("estimator", "p", "group_size"),
                         [("sign", 0.5, 2), ("sign", 0.2, 4), ("sign", 0.7, 4), ("reinforce", 0.2, 4), ("nsr", 0.7, 2)])
def test_simulation_agrees_with_the_formula(estimator, p, group_size):
    rng = np.random.default_rng(0)
    ratio = _simulated_snr2(p, group_size, estimator, rng) / _simulated_snr2(p, group_size, "centred", rng)
    predicted = snr_ratio_fixed_vs_centred(p, group_size, FIXED_BASELINES[estimator])
    assert ratio == pytest.approx(predicted, rel=0.1)


def _binomial(n: int, p: float) -> np.ndarray:
    """P(k successes of n) for k = 0..n, exactly (no sampling)."""
    from math import comb

    return np.array([comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)])


@pytest.mark.parametrize("n", [2, 3, 8])
def test_mean_success_variance_is_unbiased_by_enumeration(n: int) -> None:
    """E over every count pattern of two prompts (p = 0.1 and 0.7) equals the mean of p (1 - p) exactly."""
    rates = (0.1, 0.7)
    truth = np.mean([p * (1 - p) for p in rates])
    pmf = [_binomial(n, p) for p in rates]
    expected = sum(pmf[0][k0] * pmf[1][k1] * mean_success_variance(np.array([k0, k1]), n)
                   for k0 in range(n + 1) for k1 in range(n + 1))
    assert expected == pytest.approx(truth, rel=1e-12)
    plug_in = sum(pmf[0][k0] * pmf[1][k1] * np.mean([k / n * (1 - k / n) for k in (k0, k1)])
                  for k0 in range(n + 1) for k1 in range(n + 1))
    assert plug_in == pytest.approx(truth * (n - 1) / n, rel=1e-12)  # the plug-in is biased low


def test_snr_ratio_from_counts_uses_the_mean_of_p_1_minus_p() -> None:
    # half the prompts always solved, half never: pbar = 0.5 but every p_i (1 - p_i) = 0
    assert snr_ratio_from_counts(np.array([0, 0, 8, 8]), 8, 2) == 0.0
    assert snr_ratio_sign_vs_centred(0.5, 2) == pytest.approx(2.0)  # the pbar formula would say 2
    # every prompt at k = 4 of 8: E = 4 * 4 / (8 * 7) = 2/7; sign's ratio 4 E / (1 - 1/G)
    assert snr_ratio_from_counts(np.array([4, 4]), 8, 4) == pytest.approx(4 * (2 / 7) / 0.75)
    assert snr_ratio_from_counts(np.array([2, 6]), 8, 2, baseline=0.0) == pytest.approx(
        (2 * 6 / 56) / (0.5 * 0.5))  # reinforce: E / ((1 - 1/G) pbar)
    with pytest.raises(ValueError, match="n >= 2"):
        mean_success_variance(np.array([1]), 1)
