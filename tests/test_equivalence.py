"""grpolab.equivalence: the margin cut to a quarter of the headroom above the start, the ceiling where no margin
resolves two arms, and the verdict's order (different, then ceiling, then equivalent)."""

from __future__ import annotations

import pytest

from grpolab.equivalence import AT_CEILING, at_ceiling, inside_margin, margin, margin_rule, verdict
from grpolab.errors import UserError
from grpolab.stats import compare_pair


@pytest.mark.parametrize(
    ("start", "expected"), [(0.05, 0.05), (0.80, 0.05), (0.82, 0.045), (0.96, 0.01), (1.0, 0.0), (1.2, 0.0)]
)
def test_the_margin_is_the_fixed_one_cut_to_a_quarter_of_the_headroom(start: float, expected: float) -> None:
    assert margin(0.05, start) == pytest.approx(expected)


def test_a_margin_needs_a_positive_fixed_margin_and_a_start() -> None:
    with pytest.raises(UserError, match="positive number"):
        margin(0.0, 0.5)
    with pytest.raises(UserError, match="start score"):
        margin(0.05, float("nan"))


def test_the_ceiling_is_both_arms_within_the_margin_of_it() -> None:
    assert at_ceiling(0.96, 0.97, 0.05) and not at_ceiling(0.94, 0.99, 0.05)
    assert inside_margin(-0.02, 0.05) and not inside_margin(0.06, 0.05)


def test_the_verdict_order() -> None:
    assert verdict(0.01, 0.01, 0.02, 0.97, 0.95, 0.05) == "better"  # a resolved difference stays one
    assert verdict(0.01, 0.5, -0.2, 0.4, 0.6, 0.05) == "worse"
    assert verdict(0.5, 0.01, 0.005, 0.975, 0.97, 0.05) == AT_CEILING  # TOST alone would say equivalent
    assert verdict(0.5, 0.01, 0.005, 0.605, 0.60, 0.05) == "equivalent"
    assert verdict(0.5, 0.2, 0.005, 0.605, 0.60, 0.05) == "no evidence either way"


def test_a_zero_margin_tests_no_equivalence() -> None:
    row = compare_pair([0.5, 0.51, 0.49], [0.5, 0.5, 0.5], paired=True, margin=0.0)
    assert row["tost_p"] == 1.0 and row["margin"] == 0.0
    assert verdict(row["p"], row["tost_p"], row["mean_difference"], 0.5, 0.5, 0.0) == "no evidence either way"


def test_the_rule_in_words_names_the_fixed_margin_and_the_cut() -> None:
    text = margin_rule(0.05)
    assert text.startswith("margin +-5.0 points, cut to 25% of the headroom") and "at the ceiling" in text
