"""The report's "Paired pass@k" section: pass@k over k per arm and the paired difference with its bands.

For each pair of arms at each G (the primary pair first, ``comparisons.primary_pair``; then every other pair of
the sweep's estimators), from the end evaluations' per-prompt successes (``grpolab.paired.arm_pairs``):

* the prompt-level simultaneous 95% band over k of A - B, each arm's runs pooled per prompt over the seeds both
  ran (a paired bootstrap over prompts with a sup-t band, ``grpolab.paired.band``): a statement
  about these trained checkpoints;
* the seed-level 95% Student-t interval of the per-seed differences at each k, with paired t p-values
  Holm-adjusted over k: the statement about the estimator, which is what the verdict's question is.

The figure draws the primary pair only: each arm's mean pass@k over seeds (top) and the difference with both
bands (bottom), one column per G. The table gives every pair at k = 1 and at the largest k.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from grpolab.advantages import display_colors, display_order
from grpolab.errors import UserError
from grpolab.paired.sources import arm_pairs
from grpolab.render import Section
from grpolab.report.comparisons import primary_pair
from grpolab.report.tables import labelled

__all__ = ["figure_paired_passk", "paired_passk_section", "paired_rows"]


def _pairs_in_order(names: list[str], primary: tuple[str, str] | None) -> list[tuple[str, str]]:
    pairs = [primary] if primary and all(name in names for name in primary) else []
    return pairs + [pair for pair in itertools.combinations(names, 2) if set(pair) != set(pairs[0] if pairs else ())]


def paired_rows(results: pd.DataFrame, config: dict[str, Any], resamples: int = 2000) -> list[dict[str, Any]]:
    """``arm_pairs`` of every pair of arms with sampled end evaluations, the primary pair first."""
    ends = labelled(results[(results["phase"] == "end") & (results["n"].fillna(0) > 0)])
    names = display_order(sorted(set(ends["estimator"])))
    rows = []
    for a, b in _pairs_in_order(names, primary_pair(config, names)):
        try:
            rows += arm_pairs(results, a, b, resamples=resamples)
        except UserError:  # no common G and seed, or no per-prompt successes: nothing to pair
            continue
    return rows


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "none: no spread over seeds"
    return f"[{100 * low:+.1f}, {100 * high:+.1f}]"


def _table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    lines = []
    for row in rows:
        band, seed = row["prompt_level"], row["seed_level"]
        for j in sorted({0, len(band["ks"]) - 1}):
            seed_j = min(j, len(seed["ks"]) - 1) if seed else None
            lines.append({"Pair (A vs B)": f"{row['arm_a']} vs {row['arm_b']}", "G": row["group_size"],
                          "Seeds": len(row["seeds"]), "k": band["ks"][j],
                          "A - B (pts, pooled)": f"{100 * band['difference'][j]:+.1f}",
                          "Prompt band over k": (f"none: each prompt {100 * band['difference'][j]:+.1f}"
                                                 if band["se"][j] == 0 else
                                                 _interval(band["band_low"][j], band["band_high"][j])),
                          "Seed k": "-" if seed is None else seed["ks"][seed_j],
                          "Seed-level 95% t": "-" if seed is None else _interval(seed["low"][seed_j],
                                                                                 seed["high"][seed_j]),
                          "p (Holm over k)": "-" if seed is None else f"{seed['p_holm'][seed_j]:.3g}"})
    return pd.DataFrame(lines)


def _curve_axis(ax: plt.Axes, row: dict[str, Any], colors: dict[str, Any]) -> None:
    for arm, key in ((row["arm_a"], "curves_a"), (row["arm_b"], "curves_b")):
        if key in row:
            curve = np.mean(row[key], axis=0)
            ax.plot(np.arange(1, curve.size + 1), 100 * curve, "-o", ms=3, color=colors[arm], label=arm)
    ax.set_title(f"G = {row['group_size']}")
    ax.grid(alpha=0.3)


def _difference_axis(ax: plt.Axes, row: dict[str, Any]) -> None:
    band, seed = row["prompt_level"], row["seed_level"]
    ks = np.asarray(band["ks"])
    ax.fill_between(ks, 100 * np.asarray(band["band_low"]), 100 * np.asarray(band["band_high"]), alpha=0.25,
                    color="tab:blue", label="prompt band (pooled runs)")
    ax.plot(ks, 100 * np.asarray(band["difference"]), "-", color="tab:blue")
    if seed is not None:
        seed_ks = np.asarray(seed["ks"])
        difference, low, high = (np.asarray(seed[key], dtype=np.float64) for key in ("difference", "low", "high"))
        ax.errorbar(seed_ks, 100 * difference, yerr=[100 * np.nan_to_num(difference - low),
                                                     100 * np.nan_to_num(high - difference)],
                    fmt="o", ms=3, color="black", capsize=2, label="seed-level 95% t")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("k")
    ax.grid(alpha=0.3)


def figure_paired_passk(rows: list[dict[str, Any]]) -> Figure:
    """Two rows of panels, one column per row of ``rows`` (one pair at each G): pass@k per arm, then A - B."""
    fig, axes = plt.subplots(2, len(rows), figsize=(4.6 * len(rows), 6.4), squeeze=False, sharex="col")
    colors = display_colors([rows[0]["arm_a"], rows[0]["arm_b"]])
    for column, row in enumerate(rows):
        _curve_axis(axes[0][column], row, colors)
        _difference_axis(axes[1][column], row)
    axes[0][0].set_ylabel("pass@k (%), mean over seeds")
    axes[1][0].set_ylabel(f"{rows[0]['arm_a']} - {rows[0]['arm_b']} (pts)")
    axes[0][-1].legend(fontsize=8, frameon=False)
    axes[1][-1].legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


TEXT = ("The paired difference A - B of unbiased pass@k at every k, on the same test prompts. The prompt band "
        "(a paired bootstrap over prompts with a sup-t simultaneous 95% band over k, each arm's runs pooled per "
        "prompt) says whether these trained checkpoints differ on prompts like these; it leaves out the seed of "
        "training. The seed-level interval (95% Student t over the seeds both arms ran; each p at least 2 / 2^seeds, "
        "the least an exact test of that many pairs gives, then Holm-adjusted over k: with 5 seeds and 8 values of "
        "k, for example, none is below 8 x 2 / 2^5 = 0.5) is the one that supports a claim about the estimator. "
        "docs/evaluation.md, \"Paired comparisons of pass@k\".")


def paired_passk_section(results: pd.DataFrame, config: dict[str, Any],
                         figure_png: Callable[[Figure], bytes]) -> Section | None:
    """The section, or None when no two arms have sampled end evaluations on common seeds."""
    if "successes" not in results.columns:
        return None
    rows = paired_rows(results, config)
    if not rows:
        return None
    section = Section("Paired pass@k", [TEXT], [("Every pair at k = 1 and the largest k (points)", _table(rows))])
    first = (rows[0]["arm_a"], rows[0]["arm_b"])
    primary = [row for row in rows if (row["arm_a"], row["arm_b"]) == first]
    caption = (f"{first[0]} against {first[1]}: pass@k per arm (top) and the difference with the prompt-level band "
               "and the seed-level intervals (bottom).")
    section.figures.append(("paired_pass_at_k", caption, figure_png(figure_paired_passk(primary))))
    if any(row["seed_level"] is None for row in rows):
        section.notes.append("Pairs with one common seed have no seed-level interval: no claim about the estimator.")
    return section
