"""The report's "Starting policy and the Jensen gap" section: the start policy's per-prompt success rates,
D_real against D_iid per group size (the gradient-starvation paper's Fig. 2), and the variance view's predicted
SNR² of sign over a group-centred estimator from the start evaluation's counts (``tables.variance_table``).

Departures from the paper: the histogram is of the start evaluation's per-prompt rates (the paper's is of
training rollouts), and D_real is measured twice (training groups and the start evaluation, unbiased); see
``grpolab.report.tables``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpolab.diagnostics.starvation import success_histogram
from grpolab.render import Section
from grpolab.report import figures as figs
from grpolab.report.sections import figure_png
from grpolab.report.tables import START_STEPS, jensen_table, variance_table

__all__ = ["start_section"]


def _pct(value: float) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:.1f}%"


def _num(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.{digits}g}"


def _start_histogram(results: pd.DataFrame) -> tuple[dict | None, int, str]:
    """Pooled success-rate histogram of the start evaluations -> (histogram or None, prompts, n label)."""
    starts = results[results["phase"] == "start"]
    counts = [
        (np.asarray(s, dtype=int), int(n))
        for s, n in zip(starts["successes"], starts["n"], strict=True)
        if s is not None and np.asarray(s).size
    ]
    if not counts:
        return None, 0, "?"
    c = np.concatenate([s for s, _ in counts])
    n = np.concatenate([np.full(s.size, value) for s, value in counts])
    label = ", ".join(str(v) for v in sorted(set(n.tolist())))
    return success_histogram(c, n), int(np.median([s.size for s, _ in counts])), label


def _jensen_display(jensen: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "G": jensen["group_size"],
            f"D_real, training (first {START_STEPS} steps)": jensen["d_real_train"].map(_num),
            "D_iid, training": jensen["d_iid_train"].map(_num),
            "Gap, training": jensen["gap_train"].map(_num),
            "D_real, start eval (unbiased)": jensen["d_real_eval"].map(_num),
            "D_iid, start eval": jensen["d_iid_eval"].map(_num),
            "Gap, start eval": jensen["gap_eval"].map(_num),
        }
    )


def _variance_display(table: pd.DataFrame) -> pd.DataFrame:
    variant = {"Variant": table["variant"]} if (table["variant"] != "").any() else {}
    return pd.DataFrame({
        **variant,
        "G": table["group_size"],
        "pbar (start)": table["p_bar"].map(_pct),
        "E[p(1-p)], unbiased": table["mean_p_variance"].map(_num),
        "SNR² ratio, 4 E[p(1-p)] / (1 - 1/G)": table["snr_ratio"].map(lambda v: f"{v:.2f}"),
        "pbar formula, 4 pbar(1 - pbar) / (1 - 1/G)": table["snr_ratio_pbar"].map(lambda v: f"{v:.2f}"),
    })


def start_section(results: pd.DataFrame, metrics: pd.DataFrame) -> Section:
    histogram, prompts, n_label = _start_histogram(results)
    jensen = jensen_table(results, metrics)
    text = (
        "A group of G completions that are all right or all wrong has a group-centred advantage of 0: "
        "the prompt gives no gradient. D_real is the share of such groups; D_iid = pbar^G + (1 - pbar)^G "
        "is what independent prompts of the mean success rate pbar would give. D_real >= D_iid "
        "(Jensen's inequality); the more bimodal the success rates (mass at 0 and 1), the larger the gap. "
        f"Training values average the first {START_STEPS} training steps; start-eval values use the "
        "unbiased estimator (C(c, G) + C(n - c, G)) / C(n, G) on the start evaluation's counts."
    )
    section = Section(
        "Starting policy and the Jensen gap",
        [text],
        [("Degenerate-group fraction of the start policy", _jensen_display(jensen))],
    )
    section.tables.append(("The variance view's predicted SNR² of sign over a group-centred estimator",
                           _variance_display(variance_table(results))))
    section.paragraphs.append(
        "The variance view (grpolab.diagnostics.variance) predicts sign's SNR² over a group-centred estimator "
        "(dr_grpo) as 4 E[p_i (1 - p_i)] / (1 - 1/G) over the batch's prompts; above 1 it favours sign. "
        "E[p_i (1 - p_i)] is estimated without bias from the start evaluation's per-prompt counts (k (n - k) / "
        "(n (n - 1)) per prompt). The pbar column, 4 pbar (1 - pbar) / (1 - 1/G), ignores the spread of the "
        "success rates over prompts and overstates the ratio on a bimodal start."
    )
    section.figures.append(
        (
            "start_policy",
            "Left: per-prompt success rates of the start policy. Right: "
            "D_real vs D_iid per group size, the Jensen gap annotated (absolute, relative).",
            figure_png(figs.figure_start_policy(histogram, jensen, prompts, n_label)),
        )
    )
    if histogram is None:
        section.notes.append("No start evaluation with per-prompt counts: the histogram is missing.")
    if jensen["d_real_train"].isna().all():
        section.notes.append("No starvation/degenerate metric: D_real from training groups is not shown.")
    return section
