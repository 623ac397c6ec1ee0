"""maj@k (``grpolab.diagnostics.majority``): the exact expectation over k-subsets against a plain loop over every
k-subset in exact fractions, the tie rule, and hand-computed prompts."""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpolab.diagnostics.majority import MAX_SAMPLES, Votes, maj_at_k_curve, maj_at_k_curves, votes_of
from grpolab.diagnostics.passk import pass_at_k
from grpolab.errors import UserError

pytestmark = pytest.mark.fast

EPS = np.finfo(np.float64).eps


def tolerance(n: int) -> float:
    """Every coefficient is a sum of non-negative products built through at most n + 1 convolutions of at most
    n + 1 terms, then divided by C(n, k): a relative error of at most about (n + 1)^2 eps (Higham 2002, 4.2),
    times 4 for the divisions and the integral's weights. The values are in [0, 1], so it is absolute too."""
    return 4 * (n + 1) ** 2 * EPS


def brute_force(votes: Votes) -> list[Fraction]:
    """maj@k for k = 1..n by enumerating every k-subset: plurality of the answered samples, ties shared."""
    labels = (["right"] * votes.correct + [f"wrong{j}" for j, m in enumerate(votes.wrong) for _ in range(m)]
              + [None] * votes.abstained)
    curve = []
    for k in range(1, len(labels) + 1):
        total, subsets = Fraction(0), 0
        for subset in itertools.combinations(labels, k):
            subsets += 1
            counts = Counter(label for label in subset if label is not None)
            if counts:
                top = max(counts.values())
                tied = [label for label, m in counts.items() if m == top]
                total += Fraction(1, len(tied)) if "right" in tied else 0
        curve.append(total / subsets)
    return curve


votes_strategy = st.builds(
    lambda correct, wrong, abstained: Votes(correct, tuple(sorted(wrong, reverse=True)), abstained),
    st.integers(0, 4), st.lists(st.integers(1, 3), max_size=3), st.integers(0, 2),
).filter(lambda v: v.n >= 1)


@settings(max_examples=60, deadline=None)
@given(votes_strategy)
def test_the_exact_expectation_equals_the_loop_over_every_subset(votes: Votes) -> None:
    expected = np.array([float(v) for v in brute_force(votes)])
    np.testing.assert_allclose(maj_at_k_curve(votes), expected, rtol=0, atol=tolerance(votes.n))


@settings(max_examples=60, deadline=None)
@given(votes_strategy)
def test_maj_at_1_is_the_share_correct_and_never_above_pass_at_k(votes: Votes) -> None:
    curve = maj_at_k_curve(votes)
    assert curve[0] == pytest.approx(votes.correct / votes.n, abs=tolerance(votes.n))
    passk = np.array([pass_at_k(votes.n, votes.correct, k) for k in range(1, votes.n + 1)])
    assert np.all(curve <= passk + tolerance(votes.n))  # a subset the majority gets right holds a correct sample


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 6), st.integers(0, 6))
def test_with_no_wrong_answer_to_vote_for_maj_at_k_is_pass_at_k(correct: int, abstained: int) -> None:
    votes = Votes(correct, (), abstained)
    if votes.n == 0:
        return
    passk = [pass_at_k(votes.n, correct, k) for k in range(1, votes.n + 1)]
    np.testing.assert_allclose(maj_at_k_curve(votes), passk, rtol=0, atol=tolerance(votes.n))


def test_hand_computed_prompts_and_the_tie_rule() -> None:
    # 2 right, 2 for one wrong answer: at k = 4 the vote ties 2-2 and counts 1/2
    assert maj_at_k_curve(Votes(2, (2,)))[3] == pytest.approx(0.5, abs=tolerance(4))
    # 1 right and three distinct wrong answers: a four-way tie counts 1/4; at k = 2 every pair ties: 1/2 * 3/6
    curve = maj_at_k_curve(Votes(1, (1, 1, 1)))
    assert curve[3] == pytest.approx(0.25, abs=tolerance(4)) and curve[1] == pytest.approx(0.25, abs=tolerance(4))
    # 1 right, a wrong answer twice, one abstention: the wrong answer wins at k = 4; at k = 2 the right sample
    # wins alone with the abstention (1 pair) and ties with one wrong vote (2 pairs, 1/2 each): (1 + 1) / 6
    curve = maj_at_k_curve(Votes(1, (2,), 1))
    assert curve[3] == 0.0 and curve[1] == pytest.approx(2 / 6, abs=tolerance(4))


def test_votes_group_the_wrong_answers_and_put_every_correct_sample_in_one_class() -> None:
    votes = votes_of([True, False, False, True, False, False], ["18", "7", "7", "18.0", None, "9"])
    assert votes == Votes(correct=2, wrong=(2, 1), abstained=1) and votes.n == 6
    with pytest.raises(UserError, match="one answer per sample"):
        votes_of([True], [])


def test_prompts_with_the_same_classes_share_one_computation_and_give_the_same_curve() -> None:
    curves = maj_at_k_curves([Votes(2, (1,)), Votes(0, (3,)), Votes(2, (1,))])
    assert curves[0] is curves[2] and np.all(curves[1] == 0.0)


def test_too_many_samples_or_none_are_refused() -> None:
    with pytest.raises(UserError, match="at most"):
        maj_at_k_curve(Votes(MAX_SAMPLES + 1))
    with pytest.raises(UserError, match="at least one sample"):
        maj_at_k_curve(Votes(0))
