"""The pre-flight's HTML page (``preflight.html``, through ``grpolab.render``) and its table for the terminal.

The figure is the compare report's start-policy figure (``report.figures.figure_start_policy``) drawn from the
train prompts' counts: the distribution of the estimated p = k / n, and the predicted degenerate share beside
the i.i.d. prediction for each G (the gradient-starvation paper's Fig. 2, arXiv 2605.07689, before training).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from grpolab.diagnostics import success_histogram
from grpolab.io import atomic_write_text
from grpolab.preflight import predict
from grpolab.preflight.outputs import train_command
from grpolab.preflight.result import PreflightResult
from grpolab.render import Section, render_html

__all__ = ["TITLE", "display_table", "page_sections", "summary_lines", "write_page"]

TITLE = "grpolab preflight: predicted gradient starvation of the train prompts"


def _share(value: float) -> str:
    return "n/a (G > n)" if not np.isfinite(value) else f"{100 * value:.1f}%"


def _share_se(value: float, error: float) -> str:
    return _share(value) + (f" ± {100 * error:.1f}" if np.isfinite(value) and np.isfinite(error) else "")


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """``predict.group_table`` formatted: shares in percent (the degenerate one ± its standard error), SNR² ratios to
    two decimals."""
    shown = pd.DataFrame({
        "G": table["group_size"],
        "degenerate (from counts) ± SE": [_share_se(v, e) for v, e in zip(table["degenerate"],
                                                                          table["degenerate_se"], strict=True)],
        "all wrong": table["all_wrong"].map(_share),
        "all right": table["all_right"].map(_share),
        "i.i.d. pbar^G + (1-pbar)^G": table["d_iid"].map(_share),
        "Jensen gap": table["jensen_gap"].map(lambda v: "n/a" if not np.isfinite(v) else f"{100 * v:+.1f} pts"),
        "informative groups / 1,000 completions": table["informative_per_1000"].map(
            lambda v: "n/a" if not np.isfinite(v) else f"{v:.0f}"),
    })
    for column in [c for c in table.columns if c.startswith("snr_")]:
        shown[f"SNR² {column[4:]} / dr_grpo"] = table[column].map(lambda v: f"{v:.2f}")
    return shown


def _close_call(result: PreflightResult) -> str:
    """A sentence when a G's degenerate share lies within two standard errors of the rule's threshold."""
    known = result.table[result.table["degenerate"].notna()]
    close = known[(known["degenerate"] - predict.MAX_DEGENERATE).abs() <= 2 * known["degenerate_se"]]
    if close.empty:
        return ""
    shares = ", ".join(f"G = {row.group_size}: {_share_se(row.degenerate, row.degenerate_se)}"
                       for row in close.itertuples())
    return (f" Within two standard errors of {predict.MAX_DEGENERATE:.0%} ({shares}), so another draw of prompts "
            "and samples could choose another G.")


def _band_line(result: PreflightResult) -> str:
    low, high = result.band
    reason = result.empty_band()
    if reason is not None:
        return (f"Pass-rate band [{low:.3f}, {high:.3f}]: {reason}, so there is no band to train on (no band/ or "
                "control/ folder); the shares above still say how starved a run on these prompts would be.")
    if np.isfinite(result.band_degenerate):
        share = (f"predicted degenerate share {_share(result.band_degenerate)} at G = {result.group_size}, on "
                 "halves of each prompt's samples held out from choosing the band (the counts that chose it would "
                 "understate it)")
    else:
        share = (f"no honest degenerate share at G = {result.group_size}: the counts that chose the band understate "
                 f"it, and halves held out from the choice need n >= 2G (--eval-samples {2 * result.group_size})")
    return (f"Pass-rate band [{low:.3f}, {high:.3f}]: {result.band_size} prompts, {share} (the band is where a "
            "G-group carries signal at least half as often as at p = 1/2, unless --band set it).")


def summary_lines(result: PreflightResult) -> list[str]:
    """The findings in sentences: the pool, the recommendation and its rules, the band."""
    return [
        f"{result.model} on {result.task}: {len(result.problem_ids)} train prompts, n = {result.n} samples each; "
        f"mean pass rate {result.p_mean:.3f}, E[p(1-p)] = {result.mean_p_variance:.4f} (unbiased).",
        f"Recommended G = {result.group_size}: the smallest of {', '.join(map(str, predict.GROUP_SIZES))} (with "
        f"G <= n) whose predicted degenerate share is at most {predict.MAX_DEGENERATE:.0%}, else the largest G "
        f"that n allows.{_close_call(result)}",
        _band_line(result),
    ]


def _train_section(result: PreflightResult) -> list[Section]:
    if "band" not in result.files or not result.sampling:
        return []
    folder = Path(result.files["band"])
    return [Section("Train on the band (and its control)",
                    paragraphs=["Both folders hold the task's own test split as test.jsonl; the control is an "
                                "equal-size random draw from the whole pool, seeded by --seed. The lines sample as "
                                "the pre-flight did (verifier, temperature, max_new_tokens, chat template)."],
                    code="\n".join(train_command(result.model, f, result.group_size, result.sampling)
                                   for f in (folder, folder.with_name("control"))))]


def page_sections(result: PreflightResult) -> list[Section]:
    from grpolab.report.figures import figure_start_policy
    from grpolab.report.sections import figure_png

    n_values = np.full(len(result.successes), result.n)
    jensen = pd.DataFrame({"group_size": result.table["group_size"], "d_real_eval": result.table["degenerate"],
                           "d_iid_eval": result.table["d_iid"], "d_real_train": np.nan, "d_iid_train": np.nan})
    figure = figure_start_policy(success_histogram(result.successes, n_values), jensen,
                                 len(result.problem_ids), str(result.n), pool="train")
    return [
        Section("Summary", paragraphs=summary_lines(result)),
        Section("Predicted shares per group size", tables=[("", display_table(result.table))],
                notes=["degenerate: the unbiased mean over prompts of [C(k,G) + C(n-k,G)] / C(n,G); it needs "
                       "G <= n. SE: its standard error over prompts (the SD of the per-prompt estimates over "
                       "sqrt(P)). SNR² ratios: the variance view (grpolab.diagnostics.variance)."]),
        Section("Distribution of the estimated pass rate",
                figures=[("preflight", "Left: estimated p = k / n of the train prompts. Right: the predicted "
                          "degenerate share against the i.i.d. prediction (annotated: the Jensen gap).",
                          figure_png(figure))]),
        *_train_section(result),
    ]


def write_page(result: PreflightResult, path: Path) -> None:
    atomic_write_text(path, render_html(page_sections(result), TITLE))
