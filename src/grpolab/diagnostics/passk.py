"""pass@k: the unbiased estimator of Chen et al. (2021), vectorised over prompts.

For one prompt with ``n`` samples of which ``c`` are correct, the probability that a random k-subset
(drawn without replacement) holds at least one correct sample is

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i),

the product form of openai/human-eval ``estimate_pass_at_k``: it never forms a binomial coefficient, so it
is stable for any n. When ``n - c < k`` the product contains the factor ``1 - k / k = 0`` and pass@k = 1.

Departures from human-eval: prompts are grouped by their ``n`` and each group is served from one
cumulative-product table ``f_n[c] = prod_{i = n - c + 1}^{n} (1 - k / i)`` (c = 0..n), so 10^6 prompts cost
one ``bincount`` plus O(n) work per distinct n and k. When the distinct n values are too many for tables
(their sum exceeds ``_TABLE_BUDGET``), the same quantity is computed with log-gamma functions. ``k > n`` is
an error here (human-eval silently needs n >= k too).

Shapes: n, c [P] (or scalars); k a positive int.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import gammaln

from grpolab.diagnostics._arrays import as_int_vector
from grpolab.errors import UserError

_TABLE_BUDGET = 5_000_000  # total table length (sum of distinct n) before switching to log-gamma


def _product_table(n: int, k: int) -> np.ndarray:
    """f[c] = prod_{i=n-c+1}^{n} (1 - k / i) for c = 0..n; shape [n + 1]. Exactly 0 where n - c < k."""
    i = np.arange(n, 0, -1, dtype=np.float64)  # n, n-1, ..., 1
    return np.concatenate(([1.0], np.cumprod(1.0 - k / i)))


def _validate(n: np.ndarray, c: np.ndarray, k: int) -> None:
    if k < 1:
        raise UserError(f"pass@k needs k >= 1, got k={k}")
    if np.any(n < 1):
        raise UserError("pass@k needs n >= 1 samples for every prompt")
    if np.any((c < 0) | (c > n)):
        raise UserError("pass@k needs 0 <= c <= n (correct samples cannot exceed samples)")
    if np.any(k > n):
        raise UserError(
            f"pass@k needs k <= n for every prompt: k={k} but the smallest n is {int(n.min())}; "
            "draw more samples per prompt or lower k"
        )


def _pass_at_k_lgamma(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Same quantity through log C(n - c, k) - log C(n, k); used when n takes too many values for tables."""
    out = np.ones(n.shape, dtype=np.float64)
    ok = n - c >= k
    nn, cc = n[ok].astype(np.float64), c[ok].astype(np.float64)
    log_ratio = gammaln(nn - k + 1) - gammaln(nn - cc - k + 1) - gammaln(nn + 1) + gammaln(nn - cc + 1)
    out[ok] = -np.expm1(log_ratio)
    return out


def pass_at_k(n: Any, c: Any, k: int) -> float | np.ndarray:
    """Unbiased pass@k per prompt. n, c: [P] arrays or scalars (broadcast). Returns [P] (float for scalars).

    Raises ``ValueError`` (``UserError``) when k > n for any prompt, k < 1, or c is outside 0..n.
    """
    scalar = np.ndim(n) == 0 and np.ndim(c) == 0
    n_arr, c_arr = np.broadcast_arrays(as_int_vector(n, "n"), as_int_vector(c, "c"))
    k = int(k)
    _validate(n_arr, c_arr, k)
    return _finish(_pass_at_k_values(n_arr, c_arr, k), scalar)


def _pass_at_k_values(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """pass@k for validated n, c [P]: one product table per distinct n (log-gamma when too many)."""
    if n.min() == n.max():  # the common case: one n for all prompts, no sort needed
        return 1.0 - _product_table(int(n[0]), k)[c]
    distinct, inverse = np.unique(n, return_inverse=True)
    if distinct.sum() > _TABLE_BUDGET:
        return _pass_at_k_lgamma(n, c, k)
    out = np.empty(n.shape, dtype=np.float64)
    for index, n_value in enumerate(distinct):
        members = inverse == index
        out[members] = 1.0 - _product_table(int(n_value), k)[c[members]]
    return out


def _finish(out: np.ndarray, scalar: bool) -> float | np.ndarray:
    return float(out[0]) if scalar else out


def _count_histograms(n: np.ndarray, c: np.ndarray) -> dict[int, np.ndarray]:
    """For each distinct n, the number of prompts with c = 0..n correct: {n: counts[n + 1]}."""
    if n.min() == n.max():
        n_value = int(n[0])
        return {n_value: np.bincount(c, minlength=n_value + 1)}
    width = int(n.max()) + 1
    keys, counts = np.unique(n * width + c, return_counts=True)
    histograms: dict[int, np.ndarray] = {}
    for key, count in zip(keys, counts, strict=True):
        n_value, c_value = divmod(int(key), width)
        histograms.setdefault(n_value, np.zeros(n_value + 1, dtype=np.int64))[c_value] = count
    return histograms


def pass_at_k_curve(n: Any, c: Any, ks: Any = None) -> dict[int, float]:
    """Mean pass@k over prompts for each k. n, c: [P] (or scalar n). ks defaults to 1..min(n).

    Returns {k: mean_p pass@k(n_p, c_p)}; k values above min(n) raise ``ValueError``.
    """
    n_arr, c_arr = np.broadcast_arrays(as_int_vector(n, "n"), as_int_vector(c, "c"))
    if n_arr.size == 0:
        raise UserError("pass_at_k_curve needs at least one prompt")
    ks_list = list(range(1, int(n_arr.min()) + 1)) if ks is None else [int(k) for k in np.atleast_1d(ks)]
    if not ks_list:
        raise UserError("pass_at_k_curve needs at least one k")
    _validate(n_arr, c_arr, min(ks_list))
    _validate(n_arr, c_arr, max(ks_list))
    histograms = _count_histograms(n_arr, c_arr)
    curve: dict[int, float] = {}
    for k in ks_list:
        total = sum(float(counts @ (1.0 - _product_table(n, k))) for n, counts in histograms.items())
        curve[k] = total / n_arr.size
    return curve
