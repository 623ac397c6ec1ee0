"""pass@k: product form against brute-force enumeration of k-subsets; curves; errors; speed path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from grpolab.diagnostics import pass_at_k, pass_at_k_curve
from grpolab.diagnostics import passk as passk_module

pytestmark = pytest.mark.fast


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of all k-subsets of n samples (c correct) that contain at least one correct sample."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_matches_enumeration_for_every_c_and_k(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_hand_computed() -> None:
    # n=10, c=3, k=2: 1 - C(7,2)/C(10,2) = 1 - 21/45 = 8/15
    assert pass_at_k(10, 3, 2) == pytest.approx(8 / 15)
    # k=1 is the plain success rate c/n
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # n - c < k: every k-subset holds a correct sample
    assert pass_at_k(4, 2, 3) == 1.0
    assert pass_at_k(4, 0, 4) == 0.0


def test_vectorised_equals_loop_with_mixed_n() -> None:
    rng = np.random.default_rng(1)
    n = rng.integers(3, 12, size=300)
    c = rng.integers(0, n + 1)
    values = pass_at_k(n, c, 3)
    assert isinstance(values, np.ndarray) and values.shape == (300,)
    expected = [brute_force_pass_at_k(int(ni), int(ci), 3) for ni, ci in zip(n, c, strict=True)]
    np.testing.assert_allclose(values, expected, atol=1e-12)


def test_lgamma_fallback_equals_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    n = rng.integers(5, 200, size=500)
    c = rng.integers(0, n + 1)
    tables = pass_at_k(n, c, 5)
    monkeypatch.setattr(passk_module, "_TABLE_BUDGET", 0)
    np.testing.assert_allclose(pass_at_k(n, c, 5), tables, rtol=1e-9, atol=1e-12)


def test_large_n_is_stable() -> None:
    # C(n, k) would overflow floats; the product form does not
    value = pass_at_k(100_000, 10, 500)
    assert 0.0 < value < 1.0
    assert value == pytest.approx(1 - np.prod(1 - 500 / np.arange(100_000 - 10 + 1, 100_001)))


def test_k_greater_than_n_is_an_error() -> None:
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(np.array([8, 3]), np.array([1, 1]), 4)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k_curve([8, 8], [1, 2], ks=[9])
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)  # c > n
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 0)


def test_curve_is_mean_of_per_prompt_values() -> None:
    rng = np.random.default_rng(3)
    n = np.where(rng.random(400) < 0.5, 8, 6)
    c = rng.integers(0, n + 1)
    curve = pass_at_k_curve(n, c)
    assert list(curve) == [1, 2, 3, 4, 5, 6]
    for k, value in curve.items():
        assert value == pytest.approx(float(np.mean(pass_at_k(n, c, k))))
    values = list(curve.values())
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(values))  # pass@k grows with k


def test_curve_scalar_n_and_explicit_ks() -> None:
    curve = pass_at_k_curve(4, [0, 1, 4], ks=[1, 4])
    # k=1: (0 + 1/4 + 1) / 3; k=4: (0 + 1 + 1) / 3
    assert curve == {1: pytest.approx(1.25 / 3), 4: pytest.approx(2 / 3)}
