"""The Verdict's picture: a forest plot of every tested difference, and the table of the pairs not tested.

One row per tested pair (``report.comparisons``), the primary family first (every group size and variant),
then the secondary family, each in the order of the comparisons: the difference A - B of the final score with
its 95% interval (paired by seed, else Welch), the equivalence margin shaded around 0, and the Holm-adjusted p
of the row's family beside it. The pairs that are not tested (the same update under Adam, repeats of a
stand-in's pair, arms with fewer than 2 runs) are a table below the plot, each with its reason.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from grpolab.report.comparisons import arm_label, finding, lr_phrase, metric_name

__all__ = ["FOREST_COLUMNS", "figure_forest", "forest_rows", "untested_table"]

FAMILIES = ("primary", "secondary")
FOREST_COLUMNS = ("label", "family", "metric", "difference", "low", "high", "p_holm", "finding", "margin")
FINDING_COLORS = {"higher": "#1a7f37", "lower": "#cf222e", "equivalent": "#0969da", "ceiling": "#9a6700",
                  "unclear": "#57606a"}


def forest_rows(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The plot's rows, top to bottom: each tested pair once, the primary family first.

    rows: ``comparisons.comparisons``. Columns: label ("G = 2: sign - dr_grpo"), family, metric, difference,
    low, high (A - B and its 95% interval, as fractions), p_holm and finding ("higher", "lower", "ceiling",
    "equivalent", "unclear"; ``comparisons.finding``) and margin (the pair's equivalence margin)."""
    tested = sorted((r for r in rows if r["tested"]), key=lambda r: FAMILIES.index(r["role"]))  # stable
    return pd.DataFrame([{
        "label": f"{arm_label(r['variant'], r['group_size'])}: {r['name_a']} - {r['name_b']}",
        "family": r["role"], "metric": metric_name(r), "difference": r["mean_difference"],
        "low": r["difference_low"], "high": r["difference_high"], "p_holm": r["p_holm"], "finding": finding(r),
        "margin": r["margin"],
    } for r in tested], columns=list(FOREST_COLUMNS))


def figure_forest(forest: pd.DataFrame, margin: float) -> Figure:
    """Horizontal forest plot of ``forest_rows`` in points: a dot and its interval per row, 0 as a line, the
    equivalence margin (a fraction, +-margin) shaded, the family's Holm-adjusted p written right of each row."""
    height = 1.2 + 0.42 * len(forest)
    fig, ax = plt.subplots(figsize=(8.5, height))
    y = list(range(len(forest)))[::-1]  # the first row on top
    ax.axvspan(-100 * margin, 100 * margin, color="#0969da", alpha=0.12, lw=0,
               label=f"equivalence margin ±{100 * margin:.1f} points (ticks: each pair's, cut near the ceiling)")
    ax.axvline(0, color="#222", lw=0.9)
    for yi, row in zip(y, forest.itertuples(index=False), strict=True):
        color = FINDING_COLORS[row.finding]
        ax.plot([100 * row.low, 100 * row.high], [yi, yi], color=color, lw=2)
        ax.plot(100 * row.difference, yi, "o", color=color, ms=6)
        ax.plot([-100 * row.margin, 100 * row.margin], [yi, yi], "|", color="#0969da", ms=9)
        ax.annotate(f"p = {row.p_holm:.2g}", (1.01, yi), xycoords=("axes fraction", "data"), va="center",
                    fontsize=8.5)
    if (forest["family"] == "primary").any() and (forest["family"] == "secondary").any():
        ax.axhline(y[int((forest["family"] == "primary").sum()) - 1] - 0.5, color="#999", lw=0.8, ls="--")
    ax.set_yticks(y, [f"{row.label} ({row.family})" for row in forest.itertuples(index=False)], fontsize=9)
    ax.set_ylim(-0.7, len(forest) - 0.3)
    ax.set_xlabel("Difference of the final score, A - B (points; dot: mean, bar: 95% CI)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8.5, loc="lower left", bbox_to_anchor=(0.0, 1.0), frameon=False)
    ax.set_title("Holm-adjusted p", loc="right", fontsize=8.5, x=1.1)
    fig.tight_layout()
    return fig


def _reason(row: dict[str, Any]) -> str:
    """Why a pair has no test, in a table cell."""
    if row["role"] == "same_update":
        reason = (f"the same update under Adam (advantages {row['ratio']:.3g} times each other on every reward "
                  "pattern)")
        different = lr_phrase(row)
        return reason + (f"; different lrs ({different[2:]}), so any difference is the lr's" if different else "")
    if row["role"] == "repeat":
        return f"repeats {row['repeats']} (its stand-in is the same update under Adam, at the same lr)"
    return f"a test needs at least 2 finished runs per arm (n = {row['n_a']} vs {row['n_b']})"


def untested_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per pair not tested: the arm (G and variant), the pair, its difference of means, and why."""
    return pd.DataFrame([{
        "Arm": arm_label(r["variant"], r["group_size"]), "Pair": f"{r['name_a']} vs {r['name_b']}",
        "A - B": f"{100 * r['mean_difference']:+.1f} points", "Not tested because": _reason(r),
    } for r in rows if not r["tested"]], columns=["Arm", "Pair", "A - B", "Not tested because"])
