"""The power of the compare report's test and the seeds it needs: a two-sided paired t-test of the per-seed
differences, Holm-corrected over its family of m tests (``grpolab.report.comparisons``).

With n seeds per arm, a true mean paired difference ``effect`` and a standard deviation ``sd`` of one seed's
difference, the t statistic follows a noncentral t with n - 1 degrees of freedom and noncentrality
effect / sd * sqrt(n), so the exact power at level a is

    power(n) = P(T > t_{1 - a/2, n-1}) + P(T < -t_{1 - a/2, n-1}),   T ~ nct(n - 1, effect / sd * sqrt(n)).

Holm over a family of m: Holm rejects every hypothesis that Bonferroni at alpha / m rejects, so the power at
a = alpha / m is a lower bound on the power of that pair under Holm (exact for m = 1). The seeds returned are
therefore enough (conservatively) under the report's test. ``seeds_needed`` is the smallest n >= 2 with
power(n) >= the target. A normal approximation would undercount at the 3 to 10 seeds of a sweep, where
t_{1 - a/2, n-1} is far above z_{1 - a/2}.

The report never gives a paired p below 2 / 2^n, the smallest an exact permutation test of n seeds can give
(``stats.compare_pair``): with so few seeds that 2 / 2^n >= alpha / m no difference can be declared, whatever
``paired_power`` (the t-test's) says, so ``seeds_needed`` is never below the fewest seeds that clear that floor
(``fewest_resolving_seeds``: 6 alone at alpha 0.05, 7 in a family of 2).

Departure from the papers: neither plans seeds; this is grpolab's, the textbook power of the one-sample t
(e.g. statsmodels' ``TTestPower``, which ``tests/planning/test_power.py`` checks it against).
"""

from __future__ import annotations

import math

from scipy import stats as scipy_stats

from grpolab.errors import UserError
from grpolab.stats import sign_flip_floor

__all__ = ["MOST_SEEDS", "fewest_resolving_seeds", "floored_power", "paired_power", "seeds_needed"]

MOST_SEEDS = 1_000_000  # seeds_needed gives up (None) beyond this


def _check(sd: float, alpha: float, family: int) -> None:
    if not (math.isfinite(sd) and sd >= 0):
        raise UserError(f"the standard deviation of the paired difference must be a finite number >= 0, got {sd}")
    if not 0 < alpha < 1:
        raise UserError(f"alpha must lie in (0, 1), got {alpha}")
    if int(family) < 1:
        raise UserError(f"a test family holds at least 1 test, got {family}")


def paired_power(effect: float, sd: float, seeds: int, *, alpha: float = 0.05, family: int = 1) -> float:
    """Exact power of the two-sided paired t-test at level alpha / family with ``seeds`` (>= 2) pairs, a true
    mean difference ``effect`` and a per-seed difference SD ``sd`` (``floored_power``: that of the report's test)."""
    _check(sd, alpha, family)
    if seeds < 2:
        raise UserError(f"a paired t-test needs at least 2 seeds, got {seeds}")
    if sd == 0:
        return 1.0 if effect != 0 else alpha / family
    dof, shift = seeds - 1, abs(effect) / sd * math.sqrt(seeds)  # the test is symmetric in the sign of the effect
    critical = float(scipy_stats.t.ppf(1 - alpha / family / 2, dof))
    # P(T < -c) as P(T' > c), T' ~ nct(dof, -shift): scipy's nct.cdf returns NaN far in the tail, its sf does not
    return float(scipy_stats.nct.sf(critical, dof, shift) + scipy_stats.nct.sf(critical, dof, -shift))


def floored_power(effect: float, sd: float, seeds: int, *, alpha: float = 0.05, family: int = 1) -> float:
    """The power of the report's paired test, whose p is floored at 2 / 2^seeds (``stats.paired_within_floor``):
    ``paired_power`` from ``fewest_resolving_seeds`` on, 0 below it, where no p can pass alpha / family."""
    if seeds < fewest_resolving_seeds(alpha, family):
        _check(sd, alpha, family)
        return 0.0
    return paired_power(effect, sd, seeds, alpha=alpha, family=family)


def fewest_resolving_seeds(alpha: float = 0.05, family: int = 1) -> int:
    """The fewest seeds n (>= 2) whose exact sign-flip floor 2 / 2^n lies below alpha / family: fewer can never give
    the report's paired p below the Bonferroni step of Holm."""
    seeds = 2
    while sign_flip_floor(seeds) >= alpha / family:
        seeds += 1
    return seeds


def seeds_needed(effect: float, sd: float, *, power: float = 0.8, alpha: float = 0.05, family: int = 1) -> int | None:
    """The fewest seeds per arm, at least ``fewest_resolving_seeds``, at which ``paired_power`` reaches ``power``;
    None when no number up to ``MOST_SEEDS`` does (an effect of 0 never does)."""
    _check(sd, alpha, family)
    if not 0 < power < 1:
        raise UserError(f"power must lie in (0, 1), got {power}")
    if not math.isfinite(effect):
        raise UserError(f"the effect to detect must be a finite difference, got {effect}")
    if effect == 0:
        return None

    def enough(seeds: int) -> bool:
        return paired_power(effect, sd, seeds, alpha=alpha, family=family) >= power

    high = fewest_resolving_seeds(alpha, family)
    while not enough(high):  # power grows with the seeds: double, then bisect
        if high >= MOST_SEEDS:
            return None
        high = min(2 * high, MOST_SEEDS)
    floor = fewest_resolving_seeds(alpha, family)
    low = max(high // 2, floor - 1) if high > floor else floor - 1  # enough(low) is False, or low is below the floor
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high
