"""What a comparison may call equal: the equivalence margin of a metric, relative to its headroom, and the
ceiling, where no margin can tell two arms apart.

* **The margin** (Schuirmann's 1987 TOST tests |difference| < margin; ``stats.equivalence_test``) is
  ``margin(fixed, start)`` = min(fixed, ``HEADROOM_FRACTION`` x (ceiling - start)): the fixed margin (5 points by
  default), cut to a quarter of what training could add to the metric's start score. The start score is the
  metric's mean at the start evaluation, before any update, so the margin is fixed before any result is seen
  (a margin read off the arms' end scores would move with the outcome it judges). On a task that starts within
  20 points of the ceiling a 5-point margin would call equal two arms that differ by a quarter of all there is
  to gain; the cut keeps it below that. Each metric (pass@1, greedy accuracy) has its own start and margin.
* **The ceiling**: where both arms end within the margin of the ceiling (100% of a score), any two such arms
  differ by less than the margin, so "equivalent" would be true of every pair there and says nothing about the
  estimators: the verdict is ``AT_CEILING`` ("both at the ceiling, cannot be resolved") instead.
* **The verdict** of one Holm-adjusted comparison (``verdict``): "better" / "worse" (p < alpha), else
  ``AT_CEILING``, else "equivalent" (TOST p < alpha), else "no evidence either way". A difference that is
  significant but smaller than the margin is still "better" or "worse"; ``inside_margin`` says that it is.
"""

from __future__ import annotations

import math

from grpolab.errors import UserError

__all__ = ["AT_CEILING", "CEILING", "HEADROOM_FRACTION", "VERDICTS", "at_ceiling", "inside_margin", "margin", "verdict"]

CEILING = 1.0  # the largest value of a score (pass@1, greedy accuracy) in [0, 1]
HEADROOM_FRACTION = 0.25  # the margin is at most this share of (ceiling - start)
AT_CEILING = "both at the ceiling, cannot be resolved"
VERDICTS = ("better", "worse", AT_CEILING, "equivalent", "no evidence either way")


def margin(fixed: float, start: float, *, ceiling: float = CEILING, fraction: float = HEADROOM_FRACTION) -> float:
    """The equivalence margin of a metric whose start score is ``start``: min(fixed, fraction x (ceiling - start)),
    0 where the start is at or above the ceiling (nothing can be called equivalent there)."""
    if not (math.isfinite(fixed) and fixed > 0):
        raise UserError(f"the equivalence margin must be a positive number, got {fixed}")
    if not math.isfinite(start):
        raise UserError(f"the start score must be a number to set the equivalence margin, got {start}")
    return max(0.0, min(fixed, fraction * (ceiling - start)))


def at_ceiling(mean_a: float, mean_b: float, margin_: float, *, ceiling: float = CEILING) -> bool:
    """Whether both arms' mean scores lie within ``margin_`` of the ceiling."""
    return min(mean_a, mean_b) >= ceiling - margin_


def inside_margin(difference: float, margin_: float) -> bool:
    """Whether a difference is smaller in size than the margin (a significant one is then one too small to matter
    by the margin's own standard)."""
    return abs(difference) < margin_


def verdict(
    p_holm: float,
    tost_p_holm: float,
    difference: float,
    mean_a: float,
    mean_b: float,
    margin_: float,
    *,
    alpha: float = 0.05,
    ceiling: float = CEILING,
) -> str:
    """One of ``VERDICTS`` for a comparison of arm a against arm b: its Holm-adjusted difference and TOST p, its
    mean difference a - b, the arms' means and the equivalence margin."""
    if p_holm < alpha:
        return "better" if difference > 0 else "worse"
    if at_ceiling(mean_a, mean_b, margin_, ceiling=ceiling):
        return AT_CEILING
    return "equivalent" if margin_ > 0 and tost_p_holm < alpha else "no evidence either way"


def margin_rule(fixed: float) -> str:
    """The margin rule in words, for a report's methods: 'margin +-5.0 points, cut to 25% of ...'."""
    return (
        f"margin +-{100 * fixed:.1f} points, cut to {HEADROOM_FRACTION:.0%} of the headroom above each metric's "
        f"start score (100% - start); a pair whose arms both end within the margin of 100% is at the ceiling, "
        "where nothing is called equivalent"
    )
