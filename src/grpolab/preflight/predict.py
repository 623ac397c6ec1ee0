"""What a train pool's per-prompt counts predict before any training: the degenerate share per group size, the
Jensen gap, the variance view's SNR² ratios, a recommended G and a pass-rate band.

Input: successes [P], k_i correct of n samples for each of P train prompts. For each G of ``GROUP_SIZES``:

* ``degenerate``: the unbiased mean over prompts of [C(k, G) + C(n - k, G)] / C(n, G), the share of G-groups
  with no signal (all right or all wrong) the pool predicts (gradient-starvation paper, arXiv 2605.07689: a
  group-centred advantage is 0 for every member of such a group), with its parts ``all_wrong`` and
  ``all_right`` (``diagnostics.expected_outcomes_from_counts``). It needs G <= n: for G > n no unbiased
  estimate exists from n samples (the count k says nothing about p^G beyond p^n), so those cells are NaN and
  only the i.i.d. prediction is given.
* ``d_iid``: pbar^G + (1 - pbar)^G, what the same pool would give if every prompt had the mean pass rate; the
  paper's Jensen inequality makes ``degenerate >= d_iid`` and ``jensen_gap`` is their difference.
* ``informative_per_1000``: the G-groups with signal among 1,000 sampled completions, (1000 / G)(1 - degenerate).
* ``snr_<name>``: the variance view's predicted SNR² of each fixed-reference estimator (``sign``, ``reinforce``,
  ``nsr``) over ``dr_grpo`` for a batch of these prompts (``diagnostics.variance.snr_ratio_from_counts``).
* ``degenerate_se``: the standard error of ``degenerate`` over prompts (the SD of the per-prompt unbiased
  estimates over sqrt(P)): how far another draw of P prompts and n samples could move it.

The rules (departures: neither paper recommends a G or a band; these are grpolab's, stated so they can be
argued with):

* recommended G: the smallest G of ``GROUP_SIZES`` (with G <= n) whose predicted degenerate share is at most
  1/2, so that at least half the groups carry signal; when none reaches it, the largest G that n allows.
* pass-rate band at that G: the pass rates p at which a G-group carries signal at least half as often as at
  p = 1/2, i.e. 1 - p^G - (1 - p)^G >= (1 - 2^(1-G)) / 2 (at G = 2: p in [0.146, 0.854]; at G = 4: [0.134,
  0.866]). A prompt is in the band when its estimated p = k / n lies in it.
* the band's degenerate share at that G (``held_out_band_degenerate``): not from the counts that chose the band,
  which understate it (a prompt is in the band because its k is neither 0 nor n, so at G = n the same counts
  say 0). Each prompt's n samples are split at random into halves (its count split hypergeometrically, as two
  independent halves' counts are distributed); one half chooses the band, the other predicts its share, both
  ways, over ``HELD_OUT_SPLITS`` splits. That is the share of a band chosen on n / 2 samples, not n, so it can
  differ a little from the band's own. Simulated (p ~ Beta(0.5, 0.5), 4,000 prompts; the true share, held out,
  same counts): n = 16, G = 4: 0.281, 0.276, 0.208; n = 16, G = 8: 0.147, 0.192, 0.069; n = 8, G = 4: 0.281,
  0.328, 0.124 (``tests/preflight/test_predict.py``). It needs G <= n / 2, else NaN.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from grpolab.diagnostics import degeneracy_per_prompt, expected_outcomes_from_counts, iid_degeneracy
from grpolab.diagnostics.variance import FIXED_BASELINES, mean_success_variance, snr_ratio_from_counts
from grpolab.errors import UserError

__all__ = [
    "GROUP_SIZES",
    "HELD_OUT_SPLITS",
    "MAX_DEGENERATE",
    "band_for",
    "band_mask",
    "check_band",
    "control_indices",
    "empty_band",
    "group_table",
    "held_out_band_degenerate",
    "in_band",
    "mean_p_variance",
    "recommend_group_size",
]

GROUP_SIZES = (2, 4, 8, 16)
MAX_DEGENERATE = 0.5  # the recommended G is the smallest whose predicted degenerate share is at most this
HELD_OUT_SPLITS = 200  # random halvings of each prompt's samples behind the band's held-out share


def _row(successes: np.ndarray, n: int, group_size: int) -> dict[str, Any]:
    p_bar = float(successes.mean() / n)
    d_iid = iid_degeneracy(p_bar, group_size)
    row: dict[str, Any] = {"group_size": group_size, "d_iid": d_iid}
    if group_size <= n:
        parts = expected_outcomes_from_counts(successes, n, group_size)
        degenerate = parts["all_wrong"] + parts["all_right"]
        per_prompt = degeneracy_per_prompt(successes, n, group_size)
        spread = float(np.std(per_prompt, ddof=1) / math.sqrt(per_prompt.size)) if per_prompt.size > 1 else np.nan
        row.update(degenerate=degenerate, degenerate_se=spread, all_wrong=parts["all_wrong"],
                   all_right=parts["all_right"], jensen_gap=degenerate - d_iid,
                   informative_per_1000=1000.0 / group_size * (1.0 - degenerate))
    else:
        row.update(degenerate=np.nan, degenerate_se=np.nan, all_wrong=np.nan, all_right=np.nan, jensen_gap=np.nan,
                   informative_per_1000=np.nan)
    for name, baseline in FIXED_BASELINES.items():
        row[f"snr_{name}"] = snr_ratio_from_counts(successes, n, group_size, baseline)
    return row


def group_table(successes: Any, n: int, group_sizes: tuple[int, ...] = GROUP_SIZES) -> pd.DataFrame:
    """One row per G: degenerate, degenerate_se, all_wrong, all_right (NaN where G > n), d_iid, jensen_gap,
    informative_per_1000, snr_sign, snr_reinforce, snr_nsr; successes [P] of n samples each, n >= 2."""
    counts = np.asarray(successes, dtype=int).ravel()
    if n < 2:
        raise UserError(f"the predictions need at least 2 samples per prompt (E[p(1-p)] from n = {n} is undefined)")
    if counts.size == 0:
        raise UserError("no train prompts to predict from")
    return pd.DataFrame([_row(counts, n, g) for g in group_sizes])


def mean_p_variance(successes: Any, n: int) -> float:
    """E[p(1 - p)] over the prompts, unbiased (``diagnostics.variance.mean_success_variance``)."""
    return mean_success_variance(np.asarray(successes), n)


def recommend_group_size(table: pd.DataFrame) -> int:
    """The smallest G whose predicted degenerate share is at most ``MAX_DEGENERATE``, else the largest G with
    a prediction (``group_table``'s rows with G <= n)."""
    known = table[table["degenerate"].notna()]
    good = known[known["degenerate"] <= MAX_DEGENERATE]
    return int(good["group_size"].min() if len(good) else known["group_size"].max())


def band_for(group_size: int) -> tuple[float, float]:
    """The pass rates at which a ``group_size``-group carries signal at least half as often as at p = 1/2:
    1 - iid_degeneracy(p, G) >= (1 - 2^(1-G)) / 2, as (low, high), symmetric about 1/2."""
    if group_size < 2:
        raise UserError(f"a band needs G >= 2, got {group_size}")
    wanted = (1.0 - 2.0 ** (1 - group_size)) / 2.0  # half the informative share at p = 1/2
    low = brentq(lambda p: (1.0 - iid_degeneracy(p, group_size)) - wanted, 0.0, 0.5)
    return float(low), float(1.0 - low)


def check_band(band: Any) -> tuple[float, float]:
    """``band`` as (low, high) with 0 <= low <= high <= 1, else a ``UserError``."""
    values = tuple(float(v) for v in band)
    if len(values) != 2 or not 0.0 <= values[0] <= values[1] <= 1.0:
        raise UserError(f"a pass-rate band is two numbers LOW,HIGH with 0 <= LOW <= HIGH <= 1, got {band}")
    return values[0], values[1]


def band_mask(successes: Any, n: int, band: tuple[float, float]) -> np.ndarray:
    """Which prompts' estimated pass rate k / n lies in [low, high]: a bool mask [P] (all False when none does)."""
    return _rates_in(np.asarray(successes, dtype=float), n, check_band(band))


def empty_band(successes: Any, n: int, band: tuple[float, float]) -> str:
    """The sentence for a band holding no prompt, naming the range of the estimated rates."""
    low, high = check_band(band)
    rates = np.asarray(successes, dtype=float) / n
    return (f"no train prompt has an estimated pass rate in [{low:.3f}, {high:.3f}]: the {rates.size} prompts range "
            f"from {rates.min():.3f} to {rates.max():.3f}")


def in_band(successes: Any, n: int, band: tuple[float, float]) -> np.ndarray:
    """``band_mask``; a band holding no prompt is a ``UserError`` (``empty_band``)."""
    mask = band_mask(successes, n, band)
    if not mask.any():
        raise UserError(empty_band(successes, n, band))
    return mask


def _rates_in(counts: np.ndarray, n: int, band: tuple[float, float]) -> np.ndarray:
    rates = counts / n
    return (rates >= band[0] - 1e-12) & (rates <= band[1] + 1e-12)


def held_out_band_degenerate(successes: Any, n: int, band: tuple[float, float], group_size: int, *, seed: int = 0,
                             splits: int = HELD_OUT_SPLITS) -> float:
    """The predicted degenerate share at ``group_size`` of the prompts whose pass rate lies in ``band``, on samples
    held out from choosing them (see the module docstring); NaN when ``group_size`` > n / 2 or no half ever
    chooses a prompt."""
    counts, band = np.asarray(successes, dtype=int).ravel(), check_band(band)
    half = n // 2
    if group_size > half:
        return math.nan
    rng = np.random.default_rng(seed)
    total, chosen = 0.0, 0
    for _ in range(splits):
        first = rng.hypergeometric(counts, n - counts, half)  # each prompt's successes among half its samples
        for choose, size, rest, rest_size in ((first, half, counts - first, n - half),
                                              (counts - first, n - half, first, half)):
            mask = _rates_in(choose, size, band)
            if mask.any():
                total += float(degeneracy_per_prompt(rest[mask], rest_size, group_size).sum())
                chosen += int(mask.sum())
    return total / chosen if chosen else math.nan


def control_indices(pool_size: int, size: int, seed: int) -> np.ndarray:
    """``size`` distinct prompt indices drawn at random from the whole pool of ``pool_size``, seeded, sorted:
    the control set beside the band's prompts (the band's own prompts may be drawn too)."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(pool_size, size=size, replace=False))
