"""How often gradient clipping acted, per arm: the report's "Gradient clipping" section and the verdict's
sentence when the estimators were clipped at very different rates.

Clipping rescales a step whose pre-clip gradient norm exceeds ``max_grad_norm``. Adam is invariant to a
constant rescaling of the loss, not to clipping: an estimator whose raw gradients are larger (sign, whose
advantages never vanish) is clipped more often, so at one lr it takes different steps than its advantages
alone would give. The share of clipped steps says how much of a comparison is this effect.

Source: ``loss/clipped`` (0 / 1 per step) where the runs logged it; in older metrics it is inferred from the
pre-clip norm ``loss/grad_norm`` > ``max_grad_norm`` of the sweep's settings (the same event, since that norm
was always logged before clipping). Departure from the papers: they do not report clipping.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from grpolab.config import TrainConfig
from grpolab.render import Section
from grpolab.report.comparisons import arm_label
from grpolab.report.tables import ARM, sort_arms, variants

__all__ = ["CLIPPING_GAP", "clipping_lines", "clipping_section", "clipping_table"]

CLIPPED, NORM = "loss/clipped", "loss/grad_norm"
CLIPPING_GAP = 0.2  # the verdict says so when two arms' clipped shares differ by this much (20 points)


def _max_grad_norm(config: dict[str, Any]) -> float:
    train = config.get("train") or {}
    return float(train.get("max_grad_norm", TrainConfig().max_grad_norm))


def _clipped_steps(metrics: pd.DataFrame, config: dict[str, Any]) -> tuple[pd.Series | None, str]:
    """Per metrics row: 1.0 clipped, 0.0 not (NaN unknown), and where that comes from; None without data."""
    if CLIPPED in metrics.columns and metrics[CLIPPED].notna().any():
        return metrics[CLIPPED].astype(float), "logged (loss/clipped)"
    limit = _max_grad_norm(config)
    if NORM in metrics.columns and metrics[NORM].notna().any() and limit > 0:
        norms = metrics[NORM].astype(float)
        return (norms > limit).astype(float).where(norms.notna()), f"inferred (loss/grad_norm > {limit:g})"
    return None, ""


def clipping_table(metrics: pd.DataFrame | None, config: dict[str, Any]) -> tuple[pd.DataFrame, str]:
    """Per (variant, estimator, group_size): runs, clipped_share (mean over runs of each run's share of clipped
    steps) and median_norm (median pre-clip gradient norm over all steps) -> (table, source). Empty table
    when the metrics hold neither column (or clipping was off and nothing was logged)."""
    columns = [*ARM, "runs", "clipped_share", "median_norm"]
    if metrics is None or metrics.empty:
        return pd.DataFrame(columns=columns), ""
    clipped, source = _clipped_steps(metrics, config)
    if clipped is None:
        return pd.DataFrame(columns=columns), ""
    frame = metrics.assign(variant=variants(metrics), clipped=clipped,
                           norm=metrics[NORM].astype(float) if NORM in metrics.columns else np.nan)
    per_run = frame.groupby([*ARM, "run_id"]).agg(share=("clipped", "mean"), norm=("norm", "median")).reset_index()
    table = per_run.groupby(ARM).agg(runs=("run_id", "nunique"), clipped_share=("share", "mean"),
                                     median_norm=("norm", "median")).reset_index()
    return sort_arms(table[columns]), source


def clipping_lines(metrics: pd.DataFrame | None, config: dict[str, Any]) -> list[str]:
    """One verdict line per (variant, G) whose arms' clipped shares differ by at least CLIPPING_GAP."""
    table, _ = clipping_table(metrics, config)
    lines = []
    for (variant, size), group in table.dropna(subset=["clipped_share"]).groupby(["variant", "group_size"]):
        most, least = group.loc[group["clipped_share"].idxmax()], group.loc[group["clipped_share"].idxmin()]
        if most["clipped_share"] - least["clipped_share"] >= CLIPPING_GAP:
            lines.append(f"{arm_label(variant, int(size))}: gradient clipping (max_grad_norm = "
                         f"{_max_grad_norm(config):g}) acted on {most['clipped_share']:.0%} of {most['estimator']}'s "
                         f"steps but {least['clipped_share']:.0%} of {least['estimator']}'s: their steps differ in "
                         "size beyond what the advantages give, and the comparison includes that effect (see Gradient "
                         "clipping).")
    return lines


def clipping_section(metrics: pd.DataFrame | None, config: dict[str, Any]) -> Section | None:
    """The clipped share of steps per arm; None when the metrics hold no gradient norm."""
    table, source = clipping_table(metrics, config)
    if table.empty:
        return None
    show_variant = (table["variant"] != "").any()
    display = pd.DataFrame({
        **({"Variant": table["variant"]} if show_variant else {}),
        "Estimator": table["estimator"], "G": table["group_size"], "Runs": table["runs"],
        "Clipped steps": table["clipped_share"].map(lambda v: "n/a" if not np.isfinite(v) else f"{v:.0%}"),
        "Median pre-clip norm": table["median_norm"].map(lambda v: "n/a" if not np.isfinite(v) else f"{v:.3g}"),
    })
    text = (f"Share of training steps whose pre-clip gradient norm exceeded max_grad_norm = "
            f"{_max_grad_norm(config):g}, so that clipping rescaled the step (mean over runs; {source}). Adam "
            "undoes a constant scale of the gradient, so clipping does not shrink every step: it scales the clipped "
            "steps' gradients down against the unclipped ones, reweighting the steps of a run. Two estimators "
            "clipped on different shares of their steps are reweighted differently, beyond what their advantages "
            "give.")
    return Section("Gradient clipping", [text], [("Clipped share of steps", display)])
