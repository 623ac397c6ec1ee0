"""maj@k: majority voting over the extracted answers of k samples, as an exact expectation over k-subsets.

Majority voting ("self-consistency", Wang et al. 2023, arXiv 2203.11171) samples n answers and keeps the most
frequent one. With n samples per prompt and k < n, a single vote over "the first k" throws the other samples
away; here maj@k is the expected outcome of the vote over a k-subset drawn uniformly without replacement
from the n samples, computed exactly (no Monte Carlo), the way pass@k is (Chen et al. 2021).

The vote of one k-subset, stated exactly:

* every sample belongs to one class: all correct samples form one class (they all equal the reference); a
  wrong sample's class is its extracted answer (``grpolab.verifiers.votes``: a number for GSM8K, normalised
  LaTeX for MATH); a wrong sample with no extracted answer abstains;
* the winners are the classes with the most members in the subset; abstentions do not vote;
* tie rule: when t + 1 classes tie for the most votes and one of them is the correct class, the vote counts
  1 / (t + 1) (a fair coin among the tied classes, in expectation); a subset with no vote scores 0.

So maj@1 = c / n (= avg@n) exactly, and maj@n is the plain vote over all n samples with ties shared.
Departures: lighteval's ``maj@n`` takes the first of the tied answers in sample order (``max(answers,
key=answers.count)``) and votes on whole normalised texts; lm-eval's self-consistency tasks vote over the
first k samples (``take_first_k``).

The computation, for one prompt with m_c correct samples, wrong classes of sizes m_j and a abstentions:

    maj@k = sum_{x=1}^{min(m_c,k)} C(m_c, x) * integral_0^1 [z^{k-x}] Q_x(z, u) du / C(n, k),
    Q_x(z, u) = (1 + z)^{A_x} * prod_{j: m_j >= x} (sum_{y<x} C(m_j, y) z^y + u C(m_j, x) z^x),

where A_x counts the abstentions and the members of classes too small to reach x votes. Giving every class a
uniform random priority u breaks ties fairly: a rival tied at x loses with probability u, so the integral over
the correct class's priority u of the product is E[1 / (1 + ties)]. Q_x is a polynomial in (u, z), built with
2-D convolutions, and serves every k at once. Prompts with the same class sizes share one computation.

Shapes: a prompt's ``Votes``; a curve is [n] (k = 1..n).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.signal import convolve2d
from scipy.special import comb

from grpolab.errors import UserError

__all__ = ["MAX_SAMPLES", "Votes", "maj_at_k_curve", "maj_at_k_curves", "votes_of"]

MAX_SAMPLES = 1000
"""The largest n per prompt: binomial coefficients C(n, k) above it overflow float64."""


@dataclass(frozen=True)
class Votes:
    """One prompt's samples grouped for the vote.

    correct: samples scored correct (one class).
    wrong: the sizes of the wrong answers' classes, largest first.
    abstained: wrong samples with no extracted answer.
    """

    correct: int
    wrong: tuple[int, ...] = ()
    abstained: int = 0

    @property
    def n(self) -> int:
        return self.correct + sum(self.wrong) + self.abstained


def votes_of(correct: Sequence[bool], answers: Sequence[Hashable | None]) -> Votes:
    """The ``Votes`` of one prompt's samples: ``correct[i]`` its verdict, ``answers[i]`` its extracted answer
    (None: no answer). Correct samples form one class whatever their answers' spelling."""
    if len(correct) != len(answers):
        raise UserError(f"votes_of needs one answer per sample: {len(correct)} verdicts, {len(answers)} answers")
    wrong = Counter(answer for ok, answer in zip(correct, answers, strict=True) if not ok and answer is not None)
    abstained = sum(1 for ok, answer in zip(correct, answers, strict=True) if not ok and answer is None)
    return Votes(int(sum(bool(ok) for ok in correct)), tuple(sorted(wrong.values(), reverse=True)), abstained)


def _binomials(m: int) -> np.ndarray:
    """C(m, 0..m) as float64 [m + 1]."""
    return comb(m, np.arange(m + 1), exact=False)


def _rivals_polynomial(votes: Votes, x: int) -> np.ndarray:
    """Q_x(z, u) of the module docstring as coefficients [u degree + 1, z degree + 1]."""
    small = votes.abstained + sum(m for m in votes.wrong if m < x)
    poly = _binomials(small)[None, :]  # [1, small + 1]
    for m in votes.wrong:
        if m < x:
            continue
        factor = np.zeros((2, x + 1))
        factor[0, :x] = _binomials(m)[:x]
        factor[1, x] = comb(m, x, exact=False)
        poly = convolve2d(poly, factor)
    return poly


def maj_at_k_curve(votes: Votes) -> np.ndarray:
    """maj@k of one prompt for k = 1..n: [n] float64 (see the module docstring for the vote and tie rule)."""
    n = votes.n
    if n < 1:
        raise UserError("maj@k needs at least one sample per prompt")
    if n > MAX_SAMPLES:
        raise UserError(f"maj@k supports at most {MAX_SAMPLES} samples per prompt, got {n}")
    wins = np.zeros(n + 1)  # wins[k]: the number of k-subsets the correct class wins, ties shared
    for x in range(1, votes.correct + 1):
        poly = _rivals_polynomial(votes, x)
        integral = (poly / np.arange(1, poly.shape[0] + 1)[:, None]).sum(axis=0)  # integral over u of Q_x
        top = min(n, x + len(integral) - 1)
        wins[x : top + 1] += comb(votes.correct, x, exact=False) * integral[: top - x + 1]
    k = np.arange(1, n + 1)
    return np.clip(wins[1:] / comb(n, k, exact=False), 0.0, 1.0)


def maj_at_k_curves(votes: Sequence[Votes]) -> list[np.ndarray]:
    """``maj_at_k_curve`` of every prompt (prompts with the same class sizes are computed once)."""
    cache: dict[Votes, np.ndarray] = {}
    curves = []
    for one in votes:
        if one not in cache:
            cache[one] = maj_at_k_curve(one)
        curves.append(cache[one])
    return curves
