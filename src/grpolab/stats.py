"""Statistics for multi-seed comparisons: small pure functions over shape-documented numpy arrays.

Modelled on google-research/rliable ``metrics.py``: every function takes per-run scores, ``values[n_runs]``
(one number per seed, e.g. final accuracy), and is deterministic given ``random_state``. Conventions:

* Two-sided tests throughout; a p-value is never NaN for valid input (see each function for the
  zero-variance cases, where scipy returns NaN and we return a limit instead).
* Fewer than the needed runs (1 for a bootstrap, 2 per side for a t-test) raise ``UserError``, except
  ``bootstrap_ci`` with one run, which returns the degenerate interval (x, x, x): one seed says nothing about
  spread, and a report should show it as such rather than crash.
* Multiple comparisons: Holm's step-down correction, applied within each test family.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from scipy import stats as scipy_stats
from scipy.special import gammaln

from grpolab.errors import UserError

_EXACT_TIE_TOLERANCE = 1e-12  # relative slack when comparing permuted statistics with the observed one


def _as_runs(values: Any, name: str, minimum: int = 1) -> np.ndarray:
    """Per-run values as float64 [n_runs]; finite, at least ``minimum`` of them."""
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size < minimum:
        raise UserError(f"{name} needs at least {minimum} run(s), got {array.size}")
    if not np.all(np.isfinite(array)):
        raise UserError(f"{name} holds NaN or infinite values; drop the failed runs first")
    return array


def bootstrap_ci(
    values: Any, *, confidence: float = 0.95, n_resamples: int = 10_000, random_state: int = 0
) -> tuple[float, float, float]:
    """Percentile-bootstrap CI of the mean of values [n_runs] -> (mean, low, high).

    Resamples the runs with replacement ``n_resamples`` times; low / high are the (1 - confidence) / 2 and
    (1 + confidence) / 2 percentiles of the resampled means. One run gives (x, x, x).
    """
    runs = _as_runs(values, "bootstrap_ci")
    if not 0.0 < confidence < 1.0:
        raise UserError(f"confidence must lie in (0, 1), got {confidence}")
    mean = float(runs.mean())
    if runs.size == 1:
        return mean, mean, mean
    rng = np.random.default_rng(random_state)
    means = np.empty(int(n_resamples))
    chunk = max(1, 2_000_000 // runs.size)  # bound the [chunk, n_runs] index matrix
    for start in range(0, means.size, chunk):
        stop = min(start + chunk, means.size)
        means[start:stop] = runs[rng.integers(0, runs.size, size=(stop - start, runs.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return mean, float(low), float(high)


def welch_t_test(a: Any, b: Any) -> tuple[float, float, float]:
    """Welch's unequal-variance t-test, two-sided: a [n_a], b [n_b] (each >= 2 runs) -> (t, dof, p).

    Same numbers as ``scipy.stats.ttest_ind(a, b, equal_var=False)``. Where scipy gives NaN because both
    samples have zero variance: equal means -> (0.0, n_a + n_b - 2, 1.0); different means -> (+-inf,
    n_a + n_b - 2, 0.0), since any difference is then infinitely many standard errors.
    """
    x, y = _as_runs(a, "welch_t_test a", 2), _as_runs(b, "welch_t_test b", 2)
    var_x, var_y = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size  # squared standard errors
    difference = float(x.mean() - y.mean())
    standard_error2 = var_x + var_y
    if standard_error2 == 0.0:
        dof = float(x.size + y.size - 2)
        if difference == 0.0:
            return 0.0, dof, 1.0
        return math.copysign(math.inf, difference), dof, 0.0
    t = difference / math.sqrt(standard_error2)
    dof = standard_error2**2 / (var_x**2 / (x.size - 1) + var_y**2 / (y.size - 1))
    p = 2.0 * float(scipy_stats.t.sf(abs(t), dof))
    return float(t), float(dof), min(p, 1.0)


def _split_differences(pooled: np.ndarray, a_indices: np.ndarray, n_a: int) -> np.ndarray:
    """|mean(a) - mean(b)| for each split; a_indices [S, n_a] index the pooled sample [N]."""
    sums_a = pooled[a_indices].sum(axis=1)
    n_b = pooled.size - n_a
    return np.abs(sums_a / n_a - (pooled.sum() - sums_a) / n_b)


def permutation_test(a: Any, b: Any, *, n_resamples: int = 10_000, random_state: int = 0) -> float:
    """Two-sided permutation test of the difference of means: a [n_a], b [n_b] -> p.

    Statistic |mean(a) - mean(b)|. When the number of splits C(n_a + n_b, n_a) is at most ``n_resamples``
    every split is enumerated and p = #{splits with statistic >= observed} / #splits (exact; 252 splits for
    5 vs 5). Otherwise ``n_resamples`` random splits give p = (1 + #{>= observed}) / (1 + n_resamples)
    (Phipson & Smyth 2010: never 0). Ties use a relative tolerance of 1e-12.
    """
    x, y = _as_runs(a, "permutation_test a"), _as_runs(b, "permutation_test b")
    pooled = np.concatenate([x, y])
    observed = abs(x.mean() - y.mean())
    threshold = observed - _EXACT_TIE_TOLERANCE * max(1.0, float(np.abs(pooled).max()))
    if math.comb(pooled.size, x.size) <= n_resamples:
        splits = np.array(list(itertools.combinations(range(pooled.size), x.size)), dtype=np.int64)
        return float(np.mean(_split_differences(pooled, splits, x.size) >= threshold))
    rng = np.random.default_rng(random_state)
    hits, chunk = 0, max(1, 1_000_000 // pooled.size)
    for start in range(0, int(n_resamples), chunk):
        rows = min(chunk, int(n_resamples) - start)
        order = rng.permuted(np.tile(np.arange(pooled.size), (rows, 1)), axis=1)[:, : x.size]
        hits += int(np.count_nonzero(_split_differences(pooled, order, x.size) >= threshold))
    return (1 + hits) / (1 + int(n_resamples))


def mann_whitney(a: Any, b: Any) -> float:
    """Two-sided Mann-Whitney U test p-value (scipy, method="auto"): a [n_a], b [n_b].

    When every value is identical scipy's normal approximation divides by zero; we return 1.0.
    """
    x, y = _as_runs(a, "mann_whitney a"), _as_runs(b, "mann_whitney b")
    pooled = np.concatenate([x, y])
    if np.all(pooled == pooled[0]):
        return 1.0
    return float(scipy_stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)


def holm_correction(p_values: Any) -> np.ndarray:
    """Holm's step-down adjusted p-values [m] for raw p-values [m], in the input order.

    Sorted ascending p_(1) <= ... <= p_(m): adjusted_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)), so the
    result is monotone in the raw p-values and capped at 1.
    """
    p = np.asarray(p_values, dtype=np.float64).ravel()
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise UserError("p-values must lie in [0, 1]")
    order = np.argsort(p, kind="stable")
    multipliers = p.size - np.arange(p.size)  # m, m - 1, ..., 1
    stepped = np.maximum.accumulate(np.minimum(1.0, multipliers * p[order]))
    adjusted = np.empty_like(p)
    adjusted[order] = stepped
    return adjusted


def cohens_d(a: Any, b: Any) -> float:
    """(mean(a) - mean(b)) / pooled SD, pooled SD = sqrt(((n_a-1) s_a^2 + (n_b-1) s_b^2) / (n_a+n_b-2)).

    Zero pooled SD: 0.0 for equal means, +-inf otherwise. Needs n_a + n_b >= 3.
    """
    x, y = _as_runs(a, "cohens_d a"), _as_runs(b, "cohens_d b")
    dof = x.size + y.size - 2
    if dof < 1:
        raise UserError("cohens_d needs at least 3 runs in total")
    pooled_var = (((x - x.mean()) ** 2).sum() + ((y - y.mean()) ** 2).sum()) / dof
    difference = float(x.mean() - y.mean())
    if pooled_var == 0.0:
        return 0.0 if difference == 0.0 else math.copysign(math.inf, difference)
    return difference / math.sqrt(pooled_var)


def hedges_g(a: Any, b: Any) -> float:
    """Cohen's d times the exact small-sample correction J(df) = Gamma(df/2) / (sqrt(df/2) Gamma((df-1)/2)).

    df = n_a + n_b - 2; J ~ 1 - 3 / (4 df - 1). With df = 1 the correction is undefined and d is returned.
    """
    d = cohens_d(a, b)
    dof = np.asarray(a).size + np.asarray(b).size - 2
    if dof < 2 or not math.isfinite(d):
        return d
    correction = math.exp(gammaln(dof / 2) - gammaln((dof - 1) / 2)) / math.sqrt(dof / 2)
    return d * correction


def _compare_pair(x: np.ndarray, y: np.ndarray, n_resamples: int, random_state: int) -> dict[str, float]:
    t, dof, p = welch_t_test(x, y)
    return {
        "n_a": int(x.size),
        "n_b": int(y.size),
        "mean_a": float(x.mean()),
        "mean_b": float(y.mean()),
        "mean_difference": float(x.mean() - y.mean()),
        "welch_t": t,
        "welch_dof": dof,
        "welch_p": p,
        "permutation_p": permutation_test(x, y, n_resamples=n_resamples, random_state=random_state),
        "mann_whitney_p": mann_whitney(x, y),
        "cohens_d": cohens_d(x, y),
        "hedges_g": hedges_g(x, y),
    }


def pairwise_comparisons(
    groups: dict[str, Any], *, n_resamples: int = 10_000, random_state: int = 0
) -> list[dict[str, Any]]:
    """All pairs of named groups {name: values[n_runs]}, in insertion order (a before b).

    Each row: name_a, name_b, n_a, n_b, mean_a, mean_b, mean_difference (a - b), welch_t, welch_dof,
    welch_p, permutation_p, mann_whitney_p, cohens_d, hedges_g, and the Holm-adjusted ``*_p_holm`` for
    each test family, adjusted over all pairs. Every group needs >= 2 runs (Welch).
    """
    if len(groups) < 2:
        raise UserError(f"pairwise_comparisons needs at least two groups, got {len(groups)}")
    arrays = {name: _as_runs(values, f"group {name!r}", 2) for name, values in groups.items()}
    rows = [
        {"name_a": a, "name_b": b, **_compare_pair(arrays[a], arrays[b], n_resamples, random_state)}
        for a, b in itertools.combinations(arrays, 2)
    ]
    for family in ("welch_p", "permutation_p", "mann_whitney_p"):
        adjusted = holm_correction([row[family] for row in rows])
        for row, value in zip(rows, adjusted, strict=True):
            row[f"{family}_holm"] = float(value)
    return rows
