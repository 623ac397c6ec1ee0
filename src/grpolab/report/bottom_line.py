"""The report's bottom line: one plain sentence per primary comparison (per group size and variant), the first
thing the Verdict says.

Each sentence names the metric, the difference A - B of the primary pair (``report.comparisons``) with its 95%
interval, and what the Holm-corrected tests make of it: resolved (one arm ahead), equivalent within the TOST
margin, or not resolved at this many seeds, with the seeds per arm that would resolve a difference of the
observed size (``comparisons.seeds_to_resolve``, the planner of ``grpolab plan``). The numbers and their
tests are those of the "Verdict in detail" bullets; only the words are shorter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from grpolab.advantages import display_order
from grpolab.report.comparisons import arm_label, finding, metric_name, primary_pair, seeds_to_resolve

__all__ = ["bottom_line"]


def _signed(value: float) -> str:
    return f"{100 * value:+.1f}"


def _interval(low: float, high: float) -> str:
    """The 95% interval of a difference, said to be unadjusted (the family's Holm p decides, and can leave a
    difference unresolved whose interval excludes 0); "no interval" where the scores had no spread."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "(no interval: the seeds' differences have no spread)"
    return f"[{_signed(low)}, {_signed(high)}] (95% CI, not adjusted for the family)"


def _seeds(row: dict[str, Any]) -> str:
    return f"{row['n_a']} seeds" if row["n_a"] == row["n_b"] else f"{row['n_a']} vs {row['n_b']} seeds"


def _untested(row: dict[str, Any] | None, pair: tuple[str, str], present: set[str]) -> str:
    """Why the primary pair has no test here."""
    if row is None:
        missing = " and ".join(name for name in pair if name not in present)
        return f"not tested: {missing} has no finished run here"
    if row["role"] == "same_update":
        return "not tested: the two are the same update under Adam (see Pairs not tested)"
    return f"not tested: a test needs at least 2 finished runs per arm (n = {row['n_a']} vs {row['n_b']})"


def _tested(row: dict[str, Any]) -> str:
    """The difference with its interval and whether the family's tests resolve it."""
    diff, low, high = row["mean_difference"], row["difference_low"], row["difference_high"]
    said = finding(row)
    if said in ("higher", "lower"):
        ahead = row["name_a"] if said == "higher" else row["name_b"]
        ends = (low, high) if said == "higher" else (-high, -low)  # the interval of the leader's lead
        return (f"{ahead} is ahead by {100 * abs(diff):.1f} points {_interval(*ends)} "
                f"(resolved: Holm-adjusted p = {row['p_holm']:.2g})")
    numbers = f"{_signed(diff)} points {_interval(low, high)}"
    if said == "ceiling":
        return (f"{numbers}; both at the ceiling (within ±{100 * row['margin']:.1f} points of 100%), cannot be "
                f"resolved (Holm-adjusted p = {row['p_holm']:.2g})")
    if said == "equivalent":
        return (f"{numbers}, equivalent within ±{100 * row['margin']:.1f} points (Holm-adjusted TOST p = "
                f"{row['tost_p_holm']:.2g})")
    needed = seeds_to_resolve(row)
    more = f"; about {needed} seeds per arm would resolve a difference this size" if needed else ""
    return f"{numbers}; not resolved at {_seeds(row)} (Holm-adjusted p = {row['p_holm']:.2g}){more}"


def _primary_row(rows: list[dict[str, Any]], variant: str, size: int, pair: tuple[str, str]) -> dict[str, Any] | None:
    """The primary pair's row at (variant, G); ``comparisons`` orients it as declared (name_a = pair[0])."""
    return next((r for r in rows if r["variant"] == variant and r["group_size"] == size
                 and {r["name_a"], r["name_b"]} == set(pair)), None)


def _exploratory(config: dict[str, Any]) -> str:
    """The caveat of a primary pair declared after runs had trained (``verdict.declaration_line`` says when)."""
    if (config.get("primary_declaration") or {}).get("primary_declared_after_results"):
        return " (exploratory: this pair was declared after results were seen)"
    return ""


def bottom_line(runs: pd.DataFrame, rows: list[dict[str, Any]], config: dict[str, Any]) -> list[str]:
    """One sentence per (variant, G) on the primary pair, e.g. "On pass@1, sign vs dr_grpo at G = 2: +9.2 points
    [+0.2, +18.2]; not resolved at 5 seeds (Holm-adjusted p = 0.13); about 12 seeds per arm would resolve a
    difference this size." runs: ``tables.run_table``; rows: ``comparisons.comparisons``. None without a pair."""
    pair = primary_pair(config, display_order(runs["estimator"]))
    if pair is None:
        return []
    lines = []
    for (variant, size), group in runs.groupby(["variant", "group_size"]):
        row = _primary_row(rows, variant, int(size), pair)
        head = f"{pair[0]} vs {pair[1]} at {arm_label(variant, int(size))}"
        if row is not None and row["tested"]:
            lines.append(f"On {metric_name(row)}, {head}: {_tested(row)}{_exploratory(config)}.")
        else:
            lines.append(f"The primary pair {head}: {_untested(row, pair, set(group['estimator']))}.")
    return lines
