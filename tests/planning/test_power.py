"""``grpolab.planning.power``: the exact power of the paired t against an independent Monte Carlo of the test
(and statsmodels' ``TTestPower`` where it is installed), and the seeds it needs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from grpolab.errors import UserError
from grpolab.planning import fewest_resolving_seeds, floored_power, paired_power, seeds_needed
from grpolab.planning.power import MOST_SEEDS

pytestmark = pytest.mark.fast

CASES = [(0.05, 0.05, 5, 1), (0.04, 0.02, 3, 2), (-0.1, 0.15, 8, 3), (0.02, 0.05, 12, 1)]


def _monte_carlo_power(effect: float, sd: float, seeds: int, level: float, draws: int, seed: int) -> float:
    """Share of simulated pilots (normal per-seed differences) whose two-sided one-sample t-test rejects at
    ``level``: scipy's ttest_1samp, not the noncentral t."""
    rng = np.random.default_rng(seed)
    differences = rng.normal(effect, sd, size=(draws, seeds))
    return float(np.mean(scipy_stats.ttest_1samp(differences, 0.0, axis=1).pvalue < level))


@pytest.mark.parametrize(("effect", "sd", "seeds", "family"), CASES)
def test_the_exact_power_is_what_simulated_tests_reject(effect: float, sd: float, seeds: int, family: int) -> None:
    """20,000 simulated pilots estimate a power with a standard error of at most sqrt(1/4 / 20,000) = 0.0035;
    the exact value must lie within 4 of those. A normal approximation misses by more at 3 seeds."""
    draws = 20_000
    exact = paired_power(effect, sd, seeds, alpha=0.05, family=family)
    simulated = _monte_carlo_power(effect, sd, seeds, 0.05 / family, draws, seed=seeds)
    assert abs(exact - simulated) < 4 * math.sqrt(0.25 / draws)


def test_a_normal_approximation_would_be_wrong_at_few_seeds() -> None:
    effect, sd, seeds = 0.04, 0.02, 3
    z = scipy_stats.norm.ppf(1 - 0.05 / 2)
    normal = scipy_stats.norm.sf(z - effect / sd * math.sqrt(seeds))
    assert normal - paired_power(effect, sd, seeds) > 0.1


def test_against_statsmodels_where_installed() -> None:
    power_module = pytest.importorskip("statsmodels.stats.power")
    for effect, sd, seeds, family in CASES:
        theirs = power_module.TTestPower().power(effect_size=abs(effect) / sd, nobs=seeds, alpha=0.05 / family,
                                                 alternative="two-sided")
        assert paired_power(effect, sd, seeds, family=family) == pytest.approx(theirs, abs=1e-6)


@pytest.mark.parametrize(("effect", "sd", "family"), [(0.05, 0.05, 1), (0.04, 0.02, 2), (0.01, 0.08, 4)])
def test_the_seeds_needed_are_the_fewest_that_reach_the_power(effect: float, sd: float, family: int) -> None:
    seeds = seeds_needed(effect, sd, power=0.8, family=family)
    assert seeds is not None and seeds >= 2
    assert paired_power(effect, sd, seeds, family=family) >= 0.8
    floor = fewest_resolving_seeds(family=family)  # fewer seeds can never give the report's p below alpha / m
    assert seeds == floor or (seeds > floor and paired_power(effect, sd, seeds - 1, family=family) < 0.8)
    assert seeds_needed(-effect, sd, power=0.8, family=family) == seeds  # two-sided
    assert seeds_needed(effect, sd, power=0.9, family=family) >= seeds
    assert seeds_needed(effect, sd, power=0.8, family=family + 1) >= seeds  # a bigger family costs seeds


def test_what_no_number_of_seeds_can_do_and_bad_input() -> None:
    assert seeds_needed(0.0, 0.05) is None
    assert paired_power(0.05, 0.0, 2) == 1.0 and seeds_needed(0.05, 0.0) == 6  # 2 / 2^6 < 0.05 <= 2 / 2^5
    assert fewest_resolving_seeds() == 6 and fewest_resolving_seeds(family=2) == 7
    for call in (lambda: seeds_needed(0.05, -1.0), lambda: seeds_needed(0.05, 0.05, power=1.0),
                 lambda: paired_power(0.05, 0.05, 1), lambda: seeds_needed(0.05, 0.05, family=0)):
        with pytest.raises(UserError):
            call()


def test_the_report_tests_power_is_zero_below_the_fewest_resolving_seeds() -> None:
    """At 3 seeds the report's p is floored at 0.25, so no effect is ever resolved: the power is 0, not the t-test's."""
    assert paired_power(0.1, 0.05, 3) > 0.3 and floored_power(0.1, 0.05, 3) == 0.0
    assert floored_power(0.1, 0.05, 6) == paired_power(0.1, 0.05, 6)
    assert floored_power(0.1, 0.05, 6, family=2) == 0.0  # 7 seeds in a Holm family of 2
    with pytest.raises(UserError):
        floored_power(0.1, -1.0, 3)


def test_an_effect_beyond_the_cap_is_not_an_effect_of_0_and_non_finite_effects_are_refused(capsys) -> None:
    from grpolab.cli import main

    assert seeds_needed(1e-6, 0.05) is None  # about 2e10 seeds: more than MOST_SEEDS
    assert main(["plan", "--sd", "0.05", "--effect", "1e-6"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"more than {MOST_SEEDS:,} seeds per arm" in said and "effect of 0" not in said
    assert main(["plan", "--sd", "0.05", "--effect", "0"]) == 0
    assert "no number of seeds detects an effect of 0" in capsys.readouterr().out
    for effect in ("inf", "nan"):
        assert main(["plan", "--sd", "0.05", "--effect", effect]) == 2
        assert "the effect to detect must be a finite difference" in capsys.readouterr().err
