"""grpolab.pairing: arms that share seeds get the paired test, Welch's only when asked (and then said), arms whose
seeds differ get Welch's; pairing is by seed label, not by row order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from grpolab.errors import UserError
from grpolab.pairing import UNPAIRED_NOTE, compare_arms, shares_seeds, which_tests
from grpolab.stats import PAIRED_TESTS, WELCH_TESTS

scores = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def two_arms(draw):
    """Two arms with seeds 0..n-1, the second perhaps missing a seed or holding an extra one, in any order."""
    n = draw(st.integers(min_value=2, max_value=7))
    seeds_b = list(range(n))
    change = draw(st.sampled_from(["same", "missing", "extra"]))
    if change == "missing" and n > 2:
        seeds_b.remove(draw(st.sampled_from(seeds_b)))
    elif change == "extra":
        seeds_b.append(n)
    order_a, order_b = draw(st.permutations(range(n))), draw(st.permutations(seeds_b))
    a = pd.Series(draw(st.lists(scores, min_size=n, max_size=n)), index=list(order_a))
    b = pd.Series(draw(st.lists(scores, min_size=len(seeds_b), max_size=len(seeds_b))), index=list(order_b))
    return a, b


@settings(max_examples=60, deadline=None)
@given(arms=two_arms(), unpaired=st.booleans())
def test_a_paired_design_never_reports_welch_unless_asked(arms, unpaired: bool) -> None:
    a, b = arms
    result = compare_arms(a, b, unpaired=unpaired, n_resamples=200)
    shared = set(a.index) == set(b.index)
    assert result["seeds_shared"] is shared
    assert (result["test"] in PAIRED_TESTS) is (shared and not unpaired)
    assert (result["test"] in WELCH_TESTS) is (not shared or unpaired)
    assert result["unpaired"] is (shared and unpaired)
    assert (UNPAIRED_NOTE in which_tests([result])) is (shared and unpaired)


def test_pairs_by_seed_label_not_by_row_order() -> None:
    a = pd.Series([0.30, 0.50, 0.42, 0.61], index=[0, 1, 2, 3])
    b = pd.Series([0.65, 0.20, 0.50, 0.45], index=[3, 0, 2, 1])  # the same seeds, listed in another order
    result = compare_arms(a, b)
    expected = scipy_stats.ttest_rel(a.sort_index().to_numpy(), b.sort_index().to_numpy())
    assert result["test"] == "paired t" and result["t_p"] == pytest.approx(expected.pvalue)
    assert result["mean_difference"] == pytest.approx(float(np.mean(a.sort_index() - b.sort_index())))


def test_seeds_shared_means_the_same_seeds_each_once() -> None:
    assert shares_seeds([2, 0, 1], [0, 1, 2])
    assert not shares_seeds([0, 1, 2], [0, 1])
    assert not shares_seeds([0, 0, 1], [0, 1, 1])  # a seed twice pairs with nothing in particular


def test_which_tests_names_the_tests_and_why_welch_ran() -> None:
    a, b = pd.Series([0.1, 0.2, 0.4], index=[0, 1, 2]), pd.Series([0.3, 0.1, 0.6], index=[0, 1, 2])
    paired = compare_arms(a, b)
    assert which_tests([paired]) == "Test: paired t (paired by seed)."
    differ = compare_arms(a, b.drop(1))
    assert which_tests([paired, differ]) == ("Test: Welch, paired t. Welch's test where the two arms' seeds differ.")
    assert UNPAIRED_NOTE in which_tests([compare_arms(a, b, unpaired=True)])


def test_a_failed_run_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match="NaN or infinite"):
        compare_arms(pd.Series([0.1, np.nan, 0.3]), pd.Series([0.2, 0.3, 0.4]))
