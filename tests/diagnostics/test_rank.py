"""Spectrum: exact SVD agreement, Gram and sketch paths, constructed low-rank spectra, edge cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpolab.diagnostics import gram_matrix, spectrum, spectrum_metrics, spectrum_per_group
from grpolab.diagnostics import rank as spectrum_module


def reference_metrics(matrix: np.ndarray) -> dict[str, float]:
    """Effective rank (Roy & Vetterli) and stable rank from numpy's SVD, written out longhand."""
    s = np.linalg.svd(matrix, compute_uv=False)
    p = s / s.sum()
    entropy = -sum(x * np.log(x) for x in p if x > 0)
    return {"s": s, "effective_rank": float(np.exp(entropy)), "stable_rank": float((s**2).sum() / s[0] ** 2)}


def low_rank(rng: np.random.Generator, rows: int, columns: int, singular: list[float]) -> np.ndarray:
    """U diag(singular) V^T with orthonormal U [rows, r], V [columns, r]."""
    u = np.linalg.qr(rng.standard_normal((rows, len(singular))))[0]
    v = np.linalg.qr(rng.standard_normal((columns, len(singular))))[0]
    return (u * np.asarray(singular)) @ v.T


@pytest.mark.parametrize(("rows", "columns"), [(5, 7), (40, 300), (300, 40), (64, 64)])
@pytest.mark.parametrize("method", ["svd", "gram"])
def test_matches_numpy_svd(rows: int, columns: int, method: str) -> None:
    matrix = np.random.default_rng(rows * columns).standard_normal((rows, columns))
    got = spectrum(matrix, method=method)
    ref = reference_metrics(matrix)
    np.testing.assert_allclose(got["singular_values"], ref["s"], rtol=1e-8)
    assert got["effective_rank"] == pytest.approx(ref["effective_rank"], rel=1e-8)
    assert got["stable_rank"] == pytest.approx(ref["stable_rank"], rel=1e-8)
    assert got["method"] == method and got["captured_energy"] == pytest.approx(1.0)


def test_float32_gram_is_close_and_handles_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spectrum_module, "_CHUNK_ENTRIES", 500)  # many column chunks
    monkeypatch.setattr(spectrum_module, "_BLOCK_ROWS", 7)  # several uneven row blocks
    rng = np.random.default_rng(5)
    matrix = low_rank(rng, 30, 2000, [10.0, 5.0, 2.0, 1.0]) + 1e-3 * rng.standard_normal((30, 2000))
    exact = spectrum(matrix, method="svd")
    got = spectrum(torch.tensor(matrix, dtype=torch.float32), method="gram")
    np.testing.assert_allclose(got["singular_values"][:4], exact["singular_values"][:4], rtol=1e-4)
    assert got["effective_rank"] == pytest.approx(exact["effective_rank"], rel=0.02)
    np.testing.assert_allclose(
        gram_matrix(torch.tensor(matrix)).numpy(), matrix @ matrix.T, rtol=1e-10, atol=1e-9
    )


def test_sketch_matches_exact_on_near_low_rank() -> None:
    rng = np.random.default_rng(6)
    singular = [50.0, 30.0, 10.0, 5.0, 3.0, 2.0, 1.0, 0.5]
    matrix = low_rank(rng, 400, 3000, singular) + 1e-9 * rng.standard_normal((400, 3000))  # tail negligible
    exact = spectrum(matrix, method="svd")
    sketch = spectrum(matrix, method="sketch", sketch_dim=32, seed=1)
    assert sketch["singular_values"].shape == (32,)
    np.testing.assert_allclose(sketch["singular_values"][:8], exact["singular_values"][:8], rtol=0.01)
    assert sketch["effective_rank"] == pytest.approx(exact["effective_rank"], rel=0.03)
    assert sketch["stable_rank"] == pytest.approx(exact["stable_rank"], rel=0.01)
    assert sketch["energy90"] == exact["energy90"] and sketch["energy99"] == exact["energy99"]
    assert sketch["captured_energy"] > 0.999


def test_sketch_is_seeded() -> None:
    matrix = np.random.default_rng(7).standard_normal((50, 400))
    a = spectrum(matrix, method="sketch", sketch_dim=10, seed=3)["singular_values"]
    b = spectrum(matrix, method="sketch", sketch_dim=10, seed=3)["singular_values"]
    np.testing.assert_array_equal(a, b)


def test_energy_counts_on_constructed_spectrum() -> None:
    # energies 81, 9, 9, 1 -> cumulative shares 0.81, 0.90, 0.99, 1.0
    matrix = low_rank(np.random.default_rng(8), 20, 50, [9.0, 3.0, 3.0, 1.0])
    got = spectrum(matrix)
    assert got["energy90"] == 2 and got["energy99"] == 3
    assert got["stable_rank"] == pytest.approx(100 / 81)
    np.testing.assert_allclose(got["singular_values"][:4], [9, 3, 3, 1], rtol=1e-10)
    # equal singular values: effective rank = the rank
    assert spectrum(low_rank(np.random.default_rng(9), 20, 50, [2.0, 2.0]))[
        "effective_rank"
    ] == pytest.approx(2.0)


def test_gram_sets_noise_floor_to_zero() -> None:
    matrix = low_rank(np.random.default_rng(10), 64, 5000, [3.0, 1.0]).astype(np.float32)
    got = spectrum(matrix, method="gram")
    assert np.count_nonzero(got["singular_values"]) == 2
    assert got["effective_rank"] == pytest.approx(
        np.exp(-(0.75 * np.log(0.75) + 0.25 * np.log(0.25))), rel=1e-4
    )


def test_zero_and_empty_matrices() -> None:
    for method in ("svd", "gram", "sketch"):
        got = spectrum(np.zeros((4, 6)), method=method)
        assert got["effective_rank"] == 0.0 and got["stable_rank"] == 0.0
        assert got["energy90"] == 0 and not np.any(np.isnan(got["singular_values"]))
    assert spectrum_metrics(np.array([]))["effective_rank"] == 0.0
    assert spectrum(np.zeros((0, 3)))["effective_rank"] == 0.0


def test_auto_method_choice_and_errors() -> None:
    assert spectrum(np.ones((3, 3)))["method"] == "svd"
    assert spectrum_module._choose_method(1024, 1_000_000) == "gram"
    assert spectrum_module._choose_method(10_000, 1_000_000) == "sketch"
    with pytest.raises(ValueError, match="2-D"):
        spectrum(np.ones(3))
    with pytest.raises(ValueError, match="method"):
        spectrum(np.ones((2, 2)), method="qr")


def test_per_group() -> None:
    rng = np.random.default_rng(11)
    matrix = rng.standard_normal((12, 30))
    ids = np.repeat([0, 1, 2], 4)
    got = spectrum_per_group(matrix, ids)
    assert sorted(got["groups"]) == [0, 1, 2]
    np.testing.assert_allclose(
        got["groups"][1]["singular_values"], np.linalg.svd(matrix[4:8], compute_uv=False), rtol=1e-10
    )
    assert got["batch"]["rows"] == 12
    with pytest.raises(ValueError, match="one label per row"):
        spectrum_per_group(matrix, ids[:5])


def test_group_centred_gradients_have_low_rank() -> None:
    # rank-2 structure: each completion's gradient = advantage * (shared direction) + small per-prompt term
    rng = np.random.default_rng(12)
    advantages = rng.choice([-1.0, 1.0], size=(16, 1))
    direction, other = rng.standard_normal((2, 500))
    matrix = advantages * direction + 0.5 * rng.standard_normal((16, 1)) * other
    got = spectrum(matrix)
    assert got["energy99"] <= 2 and got["effective_rank"] < 2.0
