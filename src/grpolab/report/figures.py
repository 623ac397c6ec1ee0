"""Matplotlib figures of the ``grpolab compare`` report: the gradient-starvation paper's figures, your runs.

Each ``figure_*`` function takes tidy pandas frames prepared by ``grpolab.report.sections`` and returns a
matplotlib ``Figure`` (Agg backend, never shown); ``grpolab.report.sections`` renders them as PNG. Colours are
fixed per estimator (``grpolab.advantages.display_colors``) so one estimator looks the same in every figure.
Accuracies are drawn in percent.

Departures from the paper's figures (arXiv 2605.07689):

* Figure 1 (accuracy per estimator) adds 95% Student-t CIs and every seed as a dot; a ``--vary`` variant
  is drawn as an estimator of its own, ``name+variant`` (``tables.labelled``).
* Figure 2 (start policy): the histogram is of the *start evaluation's* per-prompt success rates c / n (the
  paper histograms training rollouts); the bar pairs show D_real vs D_iid for every group size, both from
  training groups (first steps) and from the start evaluation's counts (unbiased estimator).
* Figure 3 (pass@k): the start policy is one shared black dashed curve (mean over all runs of that group
  size) instead of one per estimator: every estimator starts from the same model.
* Figure 4 (training dynamics): curves are a rolling mean over ``window`` steps (the paper also smooths);
  the band is the 95% Student-t interval over seeds of the smoothed curves (none for one seed). Its panels and
  their labels are the rows of ``grpolab.metric_keys.KEYS`` marked ``dynamics`` (``dynamics_keys``, ``label``).
* Learning curves (not in the paper): held-out score at each evaluation step per estimator, mean over seeds
  with its 95% Student-t band (``figure_learning_curves``).
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from grpolab import metric_keys
from grpolab.advantages import display_colors, display_order
from grpolab.stats import t_interval

DPI = 110


def _panels(n_panels: int, width: float, height: float, sharey: bool = True) -> tuple[Figure, list]:
    fig, axes = plt.subplots(1, n_panels, figsize=(width * n_panels, height), sharey=sharey, squeeze=False)
    return fig, list(axes[0])


def _outside_legend(ax: plt.Axes) -> None:
    """One legend right of the last panel, so it never hides a curve (none when nothing is labelled)."""
    if not ax.get_legend_handles_labels()[0]:
        return
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)


def _accuracy_bar(ax: plt.Axes, x: int, row: pd.Series, seeds: np.ndarray, color: Any, jitter: np.ndarray) -> None:
    """One bar (mean, %) with its CI whisker (none for one seed), the seeds as dots and the mean as a label."""
    mean = 100 * row["final_accuracy"]
    has_ci = bool(np.isfinite(row["ci_low"]) and np.isfinite(row["ci_high"]))
    err = [[mean - 100 * row["ci_low"]], [100 * row["ci_high"] - mean]] if has_ci else None
    ax.bar(
        x,
        mean,
        color=color,
        alpha=0.75,
        width=0.65,
        yerr=err,
        capsize=5,
        error_kw={"elinewidth": 1.4, "ecolor": "#222"},
    )
    ax.scatter(x + jitter, seeds, s=22, color="white", edgecolor="#222", zorder=3, linewidth=0.9)
    top = max(mean, seeds.max(), 100 * row["ci_high"] if has_ci else mean)
    ax.annotate(f"{mean:.1f}%", (x, top), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=9)


def figure_final_accuracy(runs: pd.DataFrame, summary: pd.DataFrame) -> Figure:
    """Bars of mean final accuracy with 95% Student-t CI, seeds as dots; one panel per group size.

    runs: one row per run (estimator, group_size, final_accuracy); summary: ``summary_table`` output.
    """
    sizes = sorted(summary["group_size"].unique())
    names = display_order(summary["estimator"])
    colors = display_colors(names)
    fig, axes = _panels(len(sizes), max(3.2, 1.0 + 0.85 * len(names)), 4.2)
    rng = np.random.default_rng(0)
    for ax, size in zip(axes, sizes, strict=True):
        rows = summary[summary["group_size"] == size].set_index("estimator")
        present = [n for n in names if n in rows.index]
        for x, name in enumerate(present):
            mask = (runs["estimator"] == name) & (runs["group_size"] == size)
            seeds = 100 * runs.loc[mask, "final_accuracy"].to_numpy(float)
            _accuracy_bar(ax, x, rows.loc[name], seeds, colors[name], rng.uniform(-0.14, 0.14, seeds.size))
        crowded = len(present) > 3 or max(len(n) for n in present) > 10
        ax.set_xticks(range(len(present)), present, rotation=20 if crowded else 0)
        if crowded:
            ax.set_xticklabels(present, ha="right", rotation_mode="anchor")
        ax.set_title(f"G = {size}")
        ax.set_ylim(0, 105)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("Final held-out score (%)")
    fig.suptitle("Final accuracy per estimator\n(bars: mean, whiskers: 95% t interval, dots: seeds)")
    fig.tight_layout()
    return fig


def _histogram_axis(ax: plt.Axes, histogram: dict, n_prompts: int, n_samples: str, pool: str) -> None:
    rates, fractions = np.asarray(histogram["rates"]), np.asarray(histogram["fractions"])
    width = (rates[1] - rates[0]) * 0.85 if rates.size > 1 else 0.1
    ax.bar(rates, 100 * fractions, width=width, color="#607d8b")
    for rate, label in ((0.0, "p = 0"), (1.0, "p = 1")):
        match = np.isclose(rates, rate)
        if histogram["exact"] and match.any():
            value = 100 * fractions[match][0]
            ax.annotate(
                f"{label}: {value:.1f}%",
                (rate, value),
                xytext=(0, 4),
                textcoords="offset points",
                ha="left" if rate == 0.0 else "right",
                fontsize=9,
            )
    ax.set_ylim(0, 100 * fractions.max() * 1.12 + 1)
    ax.set_xlabel(f"Per-prompt success rate c / n at start (n = {n_samples})")
    ax.set_ylabel(f"Share of {pool} prompts (%)")
    ax.set_title(f"Start policy: success-rate distribution ({n_prompts} prompts)")
    ax.set_xlim(-0.08, 1.08)
    ax.grid(axis="y", alpha=0.3)


def _jensen_axis(ax: plt.Axes, jensen: pd.DataFrame, pool: str) -> None:
    counted = "start eval (unbiased)" if pool == "test" else f"{pool} prompts' counts (unbiased)"
    pairs = [
        ("d_real_train", "d_iid_train", "training groups", "#37474f"),
        ("d_real_eval", "d_iid_eval", counted, "#8d6e63"),
    ]
    pairs = [p for p in pairs if jensen[p[0]].notna().any()]
    width = 0.8 / max(1, 2 * len(pairs))
    for i, (real, iid, label, color) in enumerate(pairs):
        for j, column in enumerate((real, iid)):
            offset = (2 * i + j - (2 * len(pairs) - 1) / 2) * width
            name = f"D_real, {label}" if j == 0 else f"D_iid, {label.replace(' (unbiased)', '')}"
            ax.bar(
                np.arange(len(jensen)) + offset,
                jensen[column],
                width=width * 0.95,
                color=color,
                alpha=1.0 if j == 0 else 0.45,
                hatch=None if j == 0 else "//",
                label=name,
            )
        for x, (d_real, d_iid) in enumerate(zip(jensen[real], jensen[iid], strict=True)):
            if np.isfinite(d_real) and np.isfinite(d_iid):
                gap = f"{d_real - d_iid:+.2f}" + (f"\n({(d_real - d_iid) / d_iid:+.0%})" if d_iid > 0 else "")
                ax.annotate(
                    gap,
                    (x + (2 * i - (2 * len(pairs) - 1) / 2 + 0.5) * width, max(d_real, d_iid)),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    fontsize=9,
                )
    ax.set_xticks(range(len(jensen)), [f"G = {g}" for g in jensen["group_size"]])
    ax.set_ylim(0, 1.25)
    ax.set_ylabel("Degenerate group fraction")
    ax.set_title("Degeneracy: D_real vs D_iid (annotated: Jensen gap)")
    ax.legend(fontsize=9, loc="upper right", ncol=2 if len(pairs) > 1 else 1)
    ax.grid(axis="y", alpha=0.3)


def figure_start_policy(histogram: dict | None, jensen: pd.DataFrame, n_prompts: int, n_samples: str, *,
                        pool: str = "test") -> Figure:
    """Left: start success-rate histogram (``diagnostics.success_histogram`` dict) of the ``pool`` split's prompts
    (``grpolab preflight``: train). Right: D_real vs D_iid.

    jensen: one row per group_size with d_real_train, d_iid_train, d_real_eval, d_iid_eval (NaN if unknown).
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.6), gridspec_kw={"width_ratios": [1, 1.15]})
    if histogram is None:
        left.text(0.5, 0.5, "no start evaluation in the results", ha="center", va="center")
        left.set_axis_off()
    else:
        _histogram_axis(left, histogram, n_prompts, n_samples, pool)
    if jensen.empty:
        right.text(0.5, 0.5, "no degeneracy data", ha="center", va="center")
        right.set_axis_off()
    else:
        _jensen_axis(right, jensen, pool)
    fig.tight_layout()
    return fig


def _mean_curve(curves: pd.Series) -> np.ndarray | None:
    """Mean of pass@k lists [n] (truncated to the shortest; empty lists skipped), None when there are none."""
    arrays = [np.asarray(c, dtype=float) for c in curves if c is not None and len(c)]
    if not arrays:
        return None
    length = min(a.size for a in arrays)
    return np.mean([a[:length] for a in arrays], axis=0)


def figure_pass_at_k(runs: pd.DataFrame) -> Figure:
    """pass@k (mean over seeds) per estimator at the end (solid) and for the shared start (black dashed).

    runs: one row per run with estimator, group_size, start_pass_at_k (list or None), end_pass_at_k (list).
    """
    sizes = sorted(runs["group_size"].unique())
    names = display_order(runs["estimator"])
    colors = display_colors(names)
    fig, axes = _panels(len(sizes), 5.0, 4.0)
    for ax, size in zip(axes, sizes, strict=True):
        subset = runs[runs["group_size"] == size]
        curve = _mean_curve(subset["start_pass_at_k"])
        if curve is not None:
            ax.plot(np.arange(1, curve.size + 1), 100 * curve, "k--", lw=1.6, label="start (all runs)")
        for name in names:
            curve = _mean_curve(subset.loc[subset["estimator"] == name, "end_pass_at_k"])
            if curve is not None:
                ax.plot(
                    np.arange(1, curve.size + 1), 100 * curve, "-o", ms=3.5, color=colors[name], label=f"{name} (end)"
                )
        ax.set_xscale("log", base=2)
        n_max = int(max(2, runs["n"].max()))
        ks = sorted({2**i for i in range(int(np.log2(n_max)) + 1)} | {n_max})
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("k (samples per prompt, log2 scale)")
        ax.set_title(f"G = {size}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("pass@k (%)")
    _outside_legend(axes[-1])
    fig.suptitle("pass@k on the test set, mean over seeds")
    fig.tight_layout()
    return fig


def _band_on_grid(runs: list[pd.DataFrame], x: str, y: str, window: int) -> tuple[np.ndarray, ...] | None:
    """Smooth each seed's y(x), put it on a common x grid; return (grid, mean, low, high) or None: the mean over
    seeds and its 95% Student-t interval (the mean alone for one seed)."""
    smoothed = []
    for run in runs:
        frame = run[[x, y]].dropna().sort_values(x)
        if len(frame):
            smoothed.append((frame[x].to_numpy(float), frame[y].rolling(window, min_periods=1).mean().to_numpy()))
    if not smoothed:
        return None
    end = min(s[0][-1] for s in smoothed)
    grid = np.unique(np.concatenate([s[0][s[0] <= end] for s in smoothed]))
    stack = np.array([np.interp(grid, xs, ys) for xs, ys in smoothed])  # [seeds, steps]
    if len(smoothed) < 2:
        return grid, stack[0], stack[0], stack[0]
    mean, low, high = t_interval(stack.T)  # over seeds, at each step
    return grid, mean, low, high


def figure_dynamics(metrics: pd.DataFrame, columns: list[str], x: str, x_label: str, window: int) -> Figure:
    """Rows: metric columns; panels: group sizes; one line per estimator (mean over seeds, 95% t band)."""
    sizes = sorted(metrics["group_size"].unique())
    names = display_order(metrics["estimator"])
    colors = display_colors(names)
    fig, grid = plt.subplots(
        len(columns), len(sizes), figsize=(5.2 * len(sizes), 3.0 * len(columns)), sharex="col", squeeze=False
    )
    for col, size in enumerate(sizes):
        subset = metrics[metrics["group_size"] == size]
        for row, column in enumerate(columns):
            ax = grid[row][col]
            for name in names:
                per_seed = [g for _, g in subset[subset["estimator"] == name].groupby("run_id")]
                band = _band_on_grid(per_seed, x, column, window)
                if band is not None:
                    ax.plot(band[0], band[1], color=colors[name], lw=1.8, label=name)
                    ax.fill_between(band[0], band[2], band[3], color=colors[name], alpha=0.18, lw=0)
            ax.set_ylim(-0.03, 1.03)
            ax.grid(alpha=0.3)
            ax.set_ylabel(metric_keys.label(column) if col == 0 else "")
            if row == 0:
                ax.set_title(f"G = {size}")
            if row == len(columns) - 1:
                ax.set_xlabel(x_label)
    _outside_legend(grid[0][-1])
    fig.suptitle(f"Training dynamics: mean over seeds\n(band: 95% t interval; rolling mean over {window} step(s))")
    fig.tight_layout()
    return fig


def figure_effective_rank(metrics: pd.DataFrame, paper_rank: float = 2.0) -> Figure:
    """``metric_keys.GROUP_RANK`` at the tracked steps, per estimator (mean, min-max band); panels per group size;
    a dotted line at the foundations paper's "about 2"."""
    tracked = metrics.dropna(subset=[metric_keys.GROUP_RANK])
    sizes = sorted(tracked["group_size"].unique())
    names = display_order(tracked["estimator"])
    colors = display_colors(names)
    fig, axes = _panels(len(sizes), 5.0, 3.8)
    for ax, size in zip(axes, sizes, strict=True):
        subset = tracked[tracked["group_size"] == size]
        for name in names:
            per_step = subset[subset["estimator"] == name].groupby("step")[metric_keys.GROUP_RANK]
            if per_step.ngroups == 0:
                continue
            stats = per_step.agg(["mean", "min", "max"])
            ax.plot(stats.index, stats["mean"], "-o", ms=3.5, color=colors[name], label=name)
            ax.fill_between(stats.index, stats["min"], stats["max"], color=colors[name], alpha=0.18, lw=0)
        ax.axhline(paper_rank, color="k", ls=":", lw=1.4, label="the paper's 'about 2'")
        ax.set_xlabel("Training step")
        ax.set_title(f"G = {size}")
        ax.grid(alpha=0.3)
    top = max(max(ax.get_ylim()[1] for ax in axes), paper_rank * 1.25)
    axes[0].set_ylim(0, top)
    _outside_legend(axes[-1])
    axes[0].set_ylabel("Effective rank, per-group A_i g_i")
    fig.suptitle("Gradient effective rank over training\n(mean over seeds, band: min-max)")
    fig.tight_layout()
    return fig


def figure_learning_curves(curves: pd.DataFrame) -> Figure:
    """Held-out score against training step; panels: (variant-labelled) group sizes; one line per estimator.

    curves: ``curves.curve_table`` rows (estimator, group_size, step, mean, low, high, n_seeds): the mean over
    seeds at each evaluation step with its 95% Student-t band."""
    sizes = sorted(curves["group_size"].unique())
    names = display_order(curves["estimator"])
    colors = display_colors(names)
    fig, axes = _panels(len(sizes), 5.0, 3.8)
    for ax, size in zip(axes, sizes, strict=True):
        for name in names:
            rows = curves[(curves["group_size"] == size) & (curves["estimator"] == name)].sort_values("step")
            if rows.empty:
                continue
            ax.plot(rows["step"], 100 * rows["mean"], "-o", ms=3.5, color=colors[name], label=name)
            ax.fill_between(rows["step"], 100 * rows["low"], 100 * rows["high"], color=colors[name], alpha=0.18,
                            lw=0)
        ax.set_xlabel("Training step")
        ax.set_title(f"G = {size}")
        ax.set_ylim(-3, 103)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Held-out score (%)")
    _outside_legend(axes[-1])
    fig.suptitle("Learning curves: held-out score at each evaluation\n(mean over seeds, band: 95% t interval)")
    fig.tight_layout()
    return fig
