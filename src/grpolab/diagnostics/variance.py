"""The variance view of fixed-reference against group-centred advantages: a predicted signal-to-noise ratio.

Take binary rewards r in {0, 1} with success probability p for a prompt, on-policy sampling and no ratio
clipping, and write s = grad log pi(y) for a completion's score (E[s] = 0, E[r s] = grad p). Then

* the sign advantage (2r - 1) has E[(2r - 1) s] = 2 grad p, and
* the group-centred advantage (r_i - mean_j r_j) of a group of G has E[(r_i - rbar) s_i] = (1 - 1/G) grad p:

the same expected direction. Paper 1's "pass@G failure descent" is one term of a decomposition of this same
expectation (E[(2r - 1) s] = E[r s] - E[(1 - r) s]), not a different direction. What differs is the noise. When
the score's noise is large and unrelated to the reward (s = z + signal with E|z|^2 >> |signal|^2, the regime of a
language model's high-dimensional score), the per-completion variance is E|s|^2 for sign, since (2r - 1)^2 = 1,
and p (1 - p) (1 - 1/G) E|s|^2 for the group-centred advantage. The ratio of squared signal-to-noise ratios
(mean^2 / variance) is therefore

    SNR^2_sign / SNR^2_centred = 4 p (1 - p) / (1 - 1/G),

The same argument for any fixed baseline b (A = r - b: ``reinforce`` is b = 0, ``nsr`` b = 1, ``sign`` twice
b = 1/2) gives a per-completion variance of (p (1 - b)^2 + (1 - p) b^2) E|s|^2 and the ratio

    SNR^2_fixed(b) / SNR^2_centred = p (1 - p) / ((1 - 1/G) (p (1 - b)^2 + (1 - p) b^2)),

that is (1 - p) / (1 - 1/G) for reinforce and p / (1 - 1/G) for nsr. For sign it
exceeds 1 only at middling success: p in (0.146, 0.854) at G = 2 and (0.25, 0.75) at G = 4; above G = 4
the window narrows to nothing as G grows. Under Adam, whose step size does not follow the gradient's scale, the
SNR is what sets progress, so the view predicts sign helps at middling p and hurts at low p.

Over a batch of prompts with success rates p_i the signals add up to grad of the mean success and the noises
to their means over prompts, so p (1 - p) becomes E_i[p_i (1 - p_i)], not pbar (1 - pbar): on a bimodal start
(many prompts near 0 or 1) the two differ by the variance of p_i, Var(p_i) = pbar (1 - pbar) - E[p_i (1 - p_i)].
The noise term p (1 - b)^2 + (1 - p) b^2 is linear in p, so its batch mean uses pbar.
``mean_success_variance`` estimates E_i[p_i (1 - p_i)] without bias from an evaluation's per-prompt counts
(k_i successes in n samples: E[k (n - k)] = n (n - 1) p (1 - p), so k (n - k) / (n (n - 1)) is unbiased where
the plug-in (k / n)(1 - k / n) is biased low by a factor (n - 1) / n), and ``snr_ratio_from_counts`` gives the
batch ratio from those counts.

Departures: this is a first-order prediction of a rough model, not a result of either paper; the scale-free
constants (the 2 and the 1 - 1/G) drop out under Adam but matter under SGD. ``tests/diagnostics/test_variance.py``
checks the formula by simulation under its own assumptions; ``docs/when-sign-helps.md`` tests it on training runs.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["FIXED_BASELINES", "mean_success_variance", "sign_helps_interval", "snr_ratio_fixed_vs_centred",
           "snr_ratio_from_counts", "snr_ratio_sign_vs_centred"]

# The registry's fixed-reference estimators as A = scale * (r - b): their baseline b (the scale drops out of an SNR).
FIXED_BASELINES = {"sign": 0.5, "reinforce": 0.0, "nsr": 1.0}


def snr_ratio_sign_vs_centred(p: float | np.ndarray, group_size: int) -> float | np.ndarray:
    """Predicted SNR^2 of the sign advantage over a group-centred one (dr_grpo), ``4 p (1 - p) / (1 - 1/G)``,
    at success probability ``p`` (a number or an array) and group size ``G >= 2``."""
    if group_size < 2:
        raise ValueError(f"group-centred advantages need G >= 2, got {group_size}")
    p = np.asarray(p, dtype=float)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("p must lie in [0, 1]")
    ratio = 4.0 * p * (1.0 - p) / (1.0 - 1.0 / group_size)
    return float(ratio) if ratio.ndim == 0 else ratio


def snr_ratio_fixed_vs_centred(p: float | np.ndarray, group_size: int, baseline: float) -> float | np.ndarray:
    """Predicted SNR^2 of a fixed-baseline advantage ``r - b`` over a group-centred one at success probability
    ``p`` and group size ``G >= 2``: ``p (1 - p) / ((1 - 1/G) (p (1 - b)^2 + (1 - p) b^2))`` (0 where p is 0 or 1)."""
    if group_size < 2:
        raise ValueError(f"group-centred advantages need G >= 2, got {group_size}")
    p = np.asarray(p, dtype=float)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("p must lie in [0, 1]")
    spread = p * (1.0 - baseline) ** 2 + (1.0 - p) * baseline**2
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(spread > 0, p * (1.0 - p) / ((1.0 - 1.0 / group_size) * spread), 0.0)
    return float(ratio) if ratio.ndim == 0 else ratio


def sign_helps_interval(group_size: int) -> tuple[float, float] | None:
    """The success probabilities where the predicted ratio exceeds 1, ``(low, high)``; None when there are none
    (``4 p (1 - p) <= 1 - 1/G`` everywhere, which never happens for finite G, but the interval shrinks to 0.5)."""
    if group_size < 2:
        raise ValueError(f"group-centred advantages need G >= 2, got {group_size}")
    threshold = (1.0 - 1.0 / group_size) / 4.0  # p (1 - p) must exceed this
    discriminant = 1.0 - 4.0 * threshold
    if discriminant <= 0:
        return None
    half = math.sqrt(discriminant) / 2.0
    return 0.5 - half, 0.5 + half


def mean_success_variance(successes: np.ndarray, n: int) -> float:
    """Unbiased estimate of E_i[p_i (1 - p_i)] over prompts from successes [P] (k_i of n samples each, n >= 2):
    the mean of k_i (n - k_i) / (n (n - 1))."""
    counts = np.asarray(successes, dtype=float).ravel()
    if n < 2 or counts.size == 0:
        raise ValueError(f"an unbiased p (1 - p) needs n >= 2 samples per prompt and a prompt, got n = {n}")
    if np.any((counts < 0) | (counts > n)):
        raise ValueError(f"successes must lie in [0, {n}]")
    return float(np.mean(counts * (n - counts)) / (n * (n - 1)))


def snr_ratio_from_counts(successes: np.ndarray, n: int, group_size: int, baseline: float = 0.5) -> float:
    """Predicted SNR^2 of a fixed-baseline advantage ``r - b`` (sign: b = 1/2) over a group-centred one for a
    batch of prompts, from their per-prompt counts successes [P] of n samples:
    ``E[p_i (1 - p_i)] / ((1 - 1/G) (pbar (1 - b)^2 + (1 - pbar) b^2))``, the first factor by
    ``mean_success_variance``; for sign ``4 E[p_i (1 - p_i)] / (1 - 1/G)``. 0 when the noise term is 0."""
    if group_size < 2:
        raise ValueError(f"group-centred advantages need G >= 2, got {group_size}")
    variance = mean_success_variance(successes, n)
    p_bar = float(np.mean(np.asarray(successes, dtype=float)) / n)
    spread = p_bar * (1.0 - baseline) ** 2 + (1.0 - p_bar) * baseline**2
    return variance / ((1.0 - 1.0 / group_size) * spread) if spread > 0 else 0.0
