"""Statistics for multi-seed comparisons: small pure functions over shape-documented numpy arrays.

Modelled on google-research/rliable ``metrics.py``: every function takes per-run scores, ``values[n_runs]``
(one number per seed, e.g. final accuracy), and is deterministic given ``random_state``. The interval and
summary functions also take stacks ``values[..., n_runs]`` and work along the last axis, so that their
coverage can be checked on thousands of simulated sweeps at once. Conventions:

* Two-sided tests and intervals throughout; a p-value is never NaN for valid input (see each function for
  the zero-variance cases, where scipy returns NaN and we return a limit instead).
* Intervals for the small seed counts of a sweep (n = 3 to 10 per arm) are t intervals: Student's for one
  mean (``t_interval``) and Welch's for a difference of means (``welch_interval``, Welch 1947). The
  percentile bootstrap (``bootstrap_ci``, kept for single-sample summaries elsewhere) covers far less
  than it claims at n = 5: see docs/report-statistics.md for the coverage measured by tests/test_stats.py.
* rliable's summaries (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice", arXiv
  2108.13264): the interquartile mean (``iqm``) and the probability of improvement P(X > Y)
  (``probability_of_improvement``). Departure from rliable: its interval for P(X > Y) is a stratified
  percentile bootstrap; ours is Newcombe's (2006) score-type interval (his method 5), closed form and
  checked by simulation at n = 5 (tests/test_stats.py), because with 5 runs per arm a bootstrap of P(X > Y)
  collapses to the point whenever the two arms do not overlap.
* Fewer than the needed runs (1 for a bootstrap, 2 per side for a t-test) raise ``UserError``, except
  ``bootstrap_ci`` and ``t_interval`` with one run, which return no spread: one seed says nothing about it,
  and a report should show it as such rather than crash.
* Paired by seed: where two arms ran the same seeds (a sweep's estimators share seeds 0..N-1, so each seed's
  start policy and evaluation prompts are shared), ``paired_t_test`` / ``paired_interval`` test the mean of
  the per-seed differences (Student 1908; ``scipy.stats.ttest_rel``). Unpaired arms fall back to Welch.
* No p below what the seeds can carry: a paired t p under ``sign_flip_floor(n)`` = 2 / 2^n, the smallest p an
  exact permutation test of n pairs gives (``sign_flip_test``), is raised to it (nearly constant differences; 0
  when they are exactly constant), and so is the paired TOST p; differences with zero spread get no interval (NaN),
  never one of zero width.
* Absence is tested, not read off a p-value: ``equivalence_test`` is Schuirmann's (1987) two one-sided tests
  (TOST) that the difference lies inside (-margin, +margin), paired or Welch like the difference test.
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

    At small n it covers less than it claims (about 81% for a 95% interval at n = 5; docs/report-statistics.md):
    the report uses ``t_interval`` instead.
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


def _as_stack(values: Any, name: str, minimum: int) -> np.ndarray:
    """Runs as float64 [..., n_runs] (the last axis is the runs); finite, at least ``minimum`` runs."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 0 or array.shape[-1] < minimum:
        raise UserError(f"{name} needs at least {minimum} run(s), got {0 if array.ndim == 0 else array.shape[-1]}")
    if not np.all(np.isfinite(array)):
        raise UserError(f"{name} holds NaN or infinite values; drop the failed runs first")
    return array


def _scalar(value: np.ndarray) -> Any:
    """A 0-d result as a Python float; stacked results stay arrays."""
    return float(value) if np.ndim(value) == 0 else value


def _two_sided_quantile(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise UserError(f"confidence must lie in (0, 1), got {confidence}")
    return (1.0 + confidence) / 2


def t_interval(values: Any, *, confidence: float = 0.95) -> tuple[Any, Any, Any]:
    """Student-t CI of the mean of values [..., n_runs] -> (mean, low, high), each of shape [...].

    mean -+ t_{n-1, (1 + confidence) / 2} * s / sqrt(n). One run gives (x, NaN, NaN): no spread to speak of.
    All runs equal gives (x, x, x).
    """
    runs = _as_stack(values, "t_interval", 1)
    quantile = _two_sided_quantile(confidence)
    n = runs.shape[-1]
    mean = runs.mean(axis=-1)
    if n == 1:
        nan = np.full_like(mean, np.nan)
        return _scalar(mean), _scalar(nan), _scalar(nan)
    half = scipy_stats.t.ppf(quantile, n - 1) * runs.std(axis=-1, ddof=1) / math.sqrt(n)
    return _scalar(mean), _scalar(mean - half), _scalar(mean + half)


def welch_interval(a: Any, b: Any, *, confidence: float = 0.95) -> tuple[Any, Any, Any]:
    """Welch CI of mean(a) - mean(b): a [..., n_a], b [..., n_b] (>= 2 runs each) -> (difference, low, high).

    difference -+ t_{dof, (1 + confidence) / 2} * sqrt(s_a^2 / n_a + s_b^2 / n_b), dof by Welch-Satterthwaite
    (the interval that inverts ``welch_t_test``). Both samples constant: the degenerate interval (d, d).
    """
    x, y = _as_stack(a, "welch_interval a", 2), _as_stack(b, "welch_interval b", 2)
    quantile = _two_sided_quantile(confidence)
    var_x = x.var(axis=-1, ddof=1) / x.shape[-1]  # squared standard errors [...]
    var_y = y.var(axis=-1, ddof=1) / y.shape[-1]
    standard_error2 = var_x + var_y
    denominator = var_x**2 / (x.shape[-1] - 1) + var_y**2 / (y.shape[-1] - 1)
    safe = np.where(denominator > 0, denominator, 1.0)
    dof = np.where(denominator > 0, standard_error2**2 / safe, x.shape[-1] + y.shape[-1] - 2)
    half = scipy_stats.t.ppf(quantile, dof) * np.sqrt(standard_error2)
    difference = x.mean(axis=-1) - y.mean(axis=-1)
    return _scalar(difference), _scalar(difference - half), _scalar(difference + half)


def paired_t_test(a: Any, b: Any) -> tuple[float, float, float]:
    """Paired t-test of a [n] against b [n] (run i of a paired with run i of b; >= 2 pairs) -> (t, dof, p).

    The one-sample t-test of the differences d = a - b, two-sided, dof = n - 1: the numbers of
    ``scipy.stats.ttest_rel(a, b)``. Where scipy gives NaN because every difference is the same: all 0 ->
    (0.0, n - 1, 1.0); a nonzero constant -> (+-inf, n - 1, 0.0).
    """
    differences = _paired(a, b, "paired_t_test")
    dof = float(differences.size - 1)
    mean, spread = float(differences.mean()), float(differences.std(ddof=1))
    if spread == 0.0:
        return (0.0, dof, 1.0) if mean == 0.0 else (math.copysign(math.inf, mean), dof, 0.0)
    t = mean / (spread / math.sqrt(differences.size))
    return float(t), dof, min(1.0, 2.0 * float(scipy_stats.t.sf(abs(t), dof)))


def paired_interval(a: Any, b: Any, *, confidence: float = 0.95) -> tuple[float, float, float]:
    """Student-t CI of the mean paired difference: a [n], b [n] (>= 2 pairs) -> (mean(a - b), low, high),
    the interval that inverts ``paired_t_test``."""
    return t_interval(_paired(a, b, "paired_interval"), confidence=confidence)


def _paired(a: Any, b: Any, name: str) -> np.ndarray:
    """The per-pair differences a - b [n]; both arms need the same number (>= 2) of runs."""
    x, y = _as_runs(a, f"{name} a", 2), _as_runs(b, f"{name} b", 2)
    if x.size != y.size:
        raise UserError(f"{name} pairs run i of a with run i of b, but a has {x.size} runs and b {y.size}")
    return x - y


def sign_flip_test(a: Any, b: Any, *, n_resamples: int = 100_000, random_state: int = 0) -> float:
    """Exact two-sided sign-flip (paired permutation) test of the mean paired difference: a [n], b [n] -> p.

    Under H0 each difference d_i = a_i - b_i is as likely to have either sign, so p = #{sign patterns s with
    |mean(s d)| >= |mean(d)|} / 2^n, enumerated when 2^n <= ``n_resamples`` (Fisher 1935; Good 2005, ch. 3). Its
    smallest value with any nonzero difference is 2 / 2^n: 0.5 at n = 2, 0.0625 at n = 5, 0.002 at n = 10, which
    ``sign_flip_floor`` names. Above ``n_resamples`` patterns, random ones give (1 + hits) / (1 + n_resamples)
    (Phipson & Smyth 2010). Ties use a relative tolerance of 1e-12.
    """
    differences = _paired(a, b, "sign_flip_test")
    observed = abs(differences.mean())
    threshold = observed - _EXACT_TIE_TOLERANCE * max(1.0, float(np.abs(differences).max()))
    n = differences.size
    if 2**n <= n_resamples:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)  # [2^n, n] every pattern of +-1
        return float(np.mean(np.abs(signs @ differences) / n >= threshold))
    rng = np.random.default_rng(random_state)
    signs = rng.choice((-1.0, 1.0), size=(int(n_resamples), n))
    hits = int(np.count_nonzero(np.abs(signs @ differences) / n >= threshold))
    return (1 + hits) / (1 + int(n_resamples))


def sign_flip_floor(n: int) -> float:
    """2 / 2^n: the smallest p-value any exact permutation test of n paired differences can give."""
    return min(1.0, 2.0 / 2.0**n)


def equivalence_test(a: Any, b: Any, margin: float, *, paired: bool = False) -> float:
    """Schuirmann's (1987) two one-sided tests (TOST) of |mean(a) - mean(b)| < margin -> p.

    p = max(p_low, p_high), the one-sided p-values of H0: difference <= -margin and H0: difference >= +margin,
    each a t-test with the standard error and dof of the paired test (``paired``: a [n], b [n]) or of Welch's
    (a [n_a], b [n_b]). p < alpha claims equivalence within the margin at level alpha; it does exactly when
    the (1 - 2 alpha) t interval of the difference lies inside (-margin, +margin). Zero standard error: p = 0
    when |difference| < margin, else 1.
    """
    if not (math.isfinite(margin) and margin > 0):
        raise UserError(f"the equivalence margin must be a positive number, got {margin}")
    difference, standard_error, dof = _difference_error(a, b, paired)
    if standard_error == 0.0:
        return 0.0 if abs(difference) < margin else 1.0
    p_low = float(scipy_stats.t.sf((difference + margin) / standard_error, dof))  # H0: difference <= -margin
    p_high = float(scipy_stats.t.cdf((difference - margin) / standard_error, dof))  # H0: difference >= margin
    return max(p_low, p_high)


def _difference_error(a: Any, b: Any, paired: bool) -> tuple[float, float, float]:
    """(mean difference, its standard error, dof): of the paired differences, or Welch's."""
    if paired:
        differences = _paired(a, b, "equivalence_test")
        return (float(differences.mean()), float(differences.std(ddof=1) / math.sqrt(differences.size)),
                float(differences.size - 1))
    x, y = _as_runs(a, "equivalence_test a", 2), _as_runs(b, "equivalence_test b", 2)
    var_x, var_y = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    denominator = var_x**2 / (x.size - 1) + var_y**2 / (y.size - 1)
    dof = (var_x + var_y) ** 2 / denominator if denominator > 0 else float(x.size + y.size - 2)
    return float(x.mean() - y.mean()), math.sqrt(var_x + var_y), float(dof)


def iqm(values: Any) -> Any:
    """Interquartile mean of values [..., n_runs] -> [...]: the mean of the middle half of the runs.

    rliable's ``aggregate_iqm``: ``scipy.stats.trim_mean(values, 0.25)``, which cuts floor(n / 4) runs
    from each end (with 5 runs, the mean of the middle 3; with 3 runs, of all 3).
    """
    runs = _as_stack(values, "iqm", 1)
    return _scalar(scipy_stats.trim_mean(runs, 0.25, axis=-1))


def probability_of_improvement(a: Any, b: Any) -> Any:
    """P(X > Y) for X drawn from a [..., n_a] and Y from b [..., n_b] -> [...], ties counting 1/2.

    The Mann-Whitney U statistic of a over b divided by n_a * n_b: rliable's ``probability_of_improvement``
    for one task. 0.5 = neither tends to be higher; 1 = every run of a beats every run of b.
    """
    x, y = _as_stack(a, "probability_of_improvement a", 1), _as_stack(b, "probability_of_improvement b", 1)
    wins = x[..., :, None] > y[..., None, :]  # [..., n_a, n_b]
    ties = x[..., :, None] == y[..., None, :]
    return _scalar((wins + 0.5 * ties).mean(axis=(-2, -1)))


def _improvement_variance(theta: np.ndarray, n_a: int, n_b: int) -> np.ndarray:
    """Hanley-McNeil variance of the Mann-Whitney P(X > Y) at theta, with both sample sizes replaced by
    their mean N* = (n_a + n_b) / 2 in the two correction terms (Newcombe 2006, method 4)."""
    shared = (n_a + n_b) / 2 - 1
    return theta * (1 - theta) / (n_a * n_b) * (1 + shared * (1 - theta) / (2 - theta) + shared * theta / (1 + theta))


def improvement_interval(a: Any, b: Any, *, confidence: float = 0.95,
                         iterations: int = 60) -> tuple[Any, Any, Any]:
    """P(X > Y) with its CI: a [..., n_a], b [..., n_b] -> (p, low, high), each [...].

    Newcombe (2006, "Confidence intervals for an effect size measure based on the Mann-Whitney statistic",
    Stat. Med. 25, method 5): the thetas whose Hanley-McNeil standard error covers the estimate,
    |p - theta| <= z sqrt(V(theta)), found by bisection on [0, p] and [p, 1]. Like Wilson's interval for a
    proportion it stays inside [0, 1] and does not collapse at p = 0 or 1.
    """
    x, y = _as_stack(a, "improvement_interval a", 1), _as_stack(b, "improvement_interval b", 1)
    z = scipy_stats.norm.ppf(_two_sided_quantile(confidence))
    p = np.asarray(probability_of_improvement(x, y), dtype=np.float64)
    n_a, n_b = x.shape[-1], y.shape[-1]

    def outside(theta: np.ndarray) -> np.ndarray:
        return (p - theta) ** 2 > z * z * _improvement_variance(theta, n_a, n_b)

    low_out, low_in = np.zeros_like(p), p.copy()  # bisect the lower end between 0 (outside) and p (inside)
    high_in, high_out = p.copy(), np.ones_like(p)
    for _ in range(iterations):
        middle = (low_out + low_in) / 2
        low_out, low_in = np.where(outside(middle), middle, low_out), np.where(outside(middle), low_in, middle)
        middle = (high_in + high_out) / 2
        high_out, high_in = np.where(outside(middle), middle, high_out), np.where(outside(middle), high_in, middle)
    return _scalar(p), _scalar(low_in), _scalar(high_in)


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


DEFAULT_EQUIVALENCE_MARGIN = 0.05  # TOST margin on a score in [0, 1] (5 points) when none is given


def compare_pair(a: Any, b: Any, *, paired: bool = False, margin: float = DEFAULT_EQUIVALENCE_MARGIN,
                 n_resamples: int = 10_000, random_state: int = 0) -> dict[str, Any]:
    """Everything the report says about one pair: a [n_a], b [n_b] (>= 2 runs each) -> one row.

    ``paired``: run i of a and run i of b share a seed (n_a == n_b), so the test is the paired t-test and the
    interval that of the mean paired difference (``paired_within_floor``); else Welch's test and interval
    (``welch_within_floor``). Either p, and tost_p, is floored at the smallest p an exact permutation test of these
    runs can give; an interval with no spread to build it from is NaN. ``test`` names the one used,
    ``p`` is its p-value and difference_low / difference_high its 95% interval of mean(a) - mean(b);
    ``seed_correlation`` is the Pearson correlation of the paired scores (NaN unpaired or constant);
    ``difference_sd`` the SD of one seed's difference (of the paired differences, else sqrt(var_a + var_b),
    what ``grpolab.planning`` plans seeds from). Also:
    n_a, n_b, mean_a, mean_b, mean_difference, welch_t, welch_dof, welch_p (shown whichever test is used),
    tost_p (``equivalence_test`` at ``margin``, paired like the test; 1 at margin 0, where the start is at the ceiling:
    ``grpolab.equivalence.margin``) and margin, permutation_p,
    mann_whitney_p, cohens_d, hedges_g, the interquartile means iqm_a / iqm_b, and P(a > b) with its 95%
    Newcombe interval (prob_improvement, prob_improvement_low / _high). No multiplicity correction: that
    belongs to the family the pair is in.
    """
    x, y = _as_runs(a, "compare_pair a", 2), _as_runs(b, "compare_pair b", 2)
    t, dof, welch_p = welch_t_test(x, y)
    test = "paired t" if paired else "Welch"
    tost_p = 1.0 if margin == 0 else equivalence_test(x, y, margin, paired=paired)  # margin 0: nothing is equivalent
    if paired:
        p, low, high, test = paired_within_floor(x, y)
        both_vary = x.std() > 0 and y.std() > 0
        correlation = float(np.corrcoef(x, y)[0, 1]) if both_vary else math.nan
        tost_p = max(tost_p, sign_flip_floor(x.size))
    else:
        p, low, high, test = welch_within_floor(x, y)
        correlation = math.nan
        tost_p = max(tost_p, permutation_floor(x.size, y.size))
    improvement, improvement_low, improvement_high = improvement_interval(x, y)
    return {
        "n_a": int(x.size), "n_b": int(y.size), "mean_a": float(x.mean()), "mean_b": float(y.mean()),
        "test": test, "p": p, "seed_correlation": correlation,
        "mean_difference": float(x.mean() - y.mean()), "difference_low": low, "difference_high": high,
        "difference_sd": float((x - y).std(ddof=1) if paired else math.sqrt(x.var(ddof=1) + y.var(ddof=1))),
        "welch_t": t, "welch_dof": dof, "welch_p": welch_p,
        "tost_p": tost_p, "margin": float(margin),
        "permutation_p": permutation_test(x, y, n_resamples=n_resamples, random_state=random_state),
        "mann_whitney_p": mann_whitney(x, y),
        "cohens_d": cohens_d(x, y), "hedges_g": hedges_g(x, y),
        "iqm_a": iqm(x), "iqm_b": iqm(y),
        "prob_improvement": improvement, "prob_improvement_low": improvement_low,
        "prob_improvement_high": improvement_high,
    }


def no_spread(differences: Any, a: Any, b: Any, *, axis: int = 0) -> Any:
    """Whether the paired ``differences`` of ``a`` and ``b`` (along ``axis``) have no spread beyond the rounding of
    their subtraction: a range within 1e-12 of the values' scale (differences of equal pass rates computed from
    different floats, 0.55 - 0.50 against 0.65 - 0.60, differ by about 1e-16; a real difference of one completion
    in a million is 1e-6)."""
    scale = np.maximum(1.0, np.maximum(np.abs(np.asarray(a, dtype=np.float64)).max(axis=axis),
                                       np.abs(np.asarray(b, dtype=np.float64)).max(axis=axis)))
    return np.ptp(np.asarray(differences, dtype=np.float64), axis=axis) <= 1e-12 * scale


def paired_within_floor(a: Any, b: Any) -> tuple[float, float, float, str]:
    """a [n], b [n] (run i of a paired with run i of b; >= 2 pairs) -> (p, low, high, test name) of the paired
    comparison of mean(a - b): the paired t-test and its interval, its p raised to
    ``sign_flip_floor(n)`` where it falls below (nearly or exactly constant differences: "paired t (floored)"), so
    that no p is smaller than any exact test of n pairs can give while a stronger effect never reads weaker; where
    the differences have zero spread the interval is NaN: there is no spread to build one from, and a zero-width
    interval would read as certainty."""
    differences = _paired(a, b, "paired_within_floor")
    _, _, p = paired_t_test(a, b)
    _, low, high = paired_interval(a, b)
    if no_spread(differences, a, b):
        low = high = math.nan
    floor = sign_flip_floor(differences.size)
    return (floor, low, high, "paired t (floored)") if p < floor else (p, low, high, "paired t")


def permutation_floor(n_a: int, n_b: int) -> float:
    """The smallest p-value an exact two-sided permutation test of the difference of means of n_a against n_b runs
    can give: 1 / C(n_a + n_b, n_a), twice that for equal sizes (a split and its mirror reach the same |difference|)."""
    return min(1.0, (2.0 if n_a == n_b else 1.0) / math.comb(n_a + n_b, n_a))


def welch_within_floor(a: Any, b: Any) -> tuple[float, float, float, str]:
    """a [n_a], b [n_b] (>= 2 runs each) -> (p, low, high, test name) of the unpaired comparison of mean(a) -
    mean(b): Welch's test and interval, its p raised to ``permutation_floor`` where it falls below ("Welch
    (floored)"); where neither sample varies the interval is NaN, as in ``paired_within_floor`` (Welch's p is then
    0 for any difference, and the interval of zero width)."""
    x, y = _as_runs(a, "welch_within_floor a", 2), _as_runs(b, "welch_within_floor b", 2)
    _, _, p = welch_t_test(x, y)
    _, low, high = welch_interval(x, y)
    if no_spread(x, x, y) and no_spread(y, x, y):  # constant up to the rounding of equal scores, as paired
        low = high = math.nan
    floor = permutation_floor(x.size, y.size)
    return (floor, low, high, "Welch (floored)") if p < floor else (p, low, high, "Welch")


WELCH_TESTS = ("Welch", "Welch (floored)")
"""The ``test`` names of an unpaired row (``compare_pair``): Welch's test, and the same with its p raised to the
floor of what an exact permutation test of these runs can give."""
P_FAMILIES = ("p", "welch_p", "tost_p", "permutation_p", "mann_whitney_p")
PAIRED_TESTS = ("paired t", "paired t (floored)")
"""The ``test`` names of a paired row (``compare_pair``): the paired t-test, and the same with its p raised to the
floor 2 / 2^n of what n pairs can carry."""


def holm_family(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of one test family with ``<family>_holm`` added for each p-value family in P_FAMILIES,
    adjusted over these rows only (new dicts; the input is left as it is)."""
    rows = [dict(row) for row in rows]
    for family in P_FAMILIES:
        adjusted = holm_correction([row[family] for row in rows])
        for row, value in zip(rows, adjusted, strict=True):
            row[f"{family}_holm"] = float(value)
    return rows


def pairwise_comparisons(
    groups: dict[str, Any], *, n_resamples: int = 10_000, random_state: int = 0
) -> list[dict[str, Any]]:
    """All pairs of named groups {name: values[n_runs]}, in insertion order (a before b).

    Each row: name_a, name_b, the fields of ``compare_pair``, and the Holm-adjusted ``*_p_holm`` for each
    test family, adjusted over all pairs. Every group needs >= 2 runs (Welch).
    """
    if len(groups) < 2:
        raise UserError(f"pairwise_comparisons needs at least two groups, got {len(groups)}")
    arrays = {name: _as_runs(values, f"group {name!r}", 2) for name, values in groups.items()}
    rows = [
        {"name_a": a, "name_b": b, **compare_pair(arrays[a], arrays[b], n_resamples=n_resamples,
                                                  random_state=random_state)}
        for a, b in itertools.combinations(arrays, 2)
    ]
    return holm_family(rows)
