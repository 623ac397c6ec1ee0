"""The compute each arm of a comparison spent, per (arm, G): optimizer steps, trained sequences, trained and
forwarded tokens, and the completions and completion tokens sampled.

Equal steps are not equal compute, and neither are equal completions: a remedy that resamples (``+dynamic``) spends
more sampling per step than one that does not (``+mask``, ``sign``), and grpolab's update skips zero-advantage rows,
so ``sign`` (never 0) backpropagates more rows than ``dr_grpo``. This section states what each arm spent (each run's
last cumulative counts, ``grpolab.metric_keys.COMPUTE`` and ``rollout/completions_generated``; mean over finished
runs, with the range over seeds), and what ``--budget`` held equal when it was set (``grpolab.config.budget``). A
count a run did not record (a run older than the counter, or one the TRL engine cannot count) shows as "not
recorded". Diverged runs are left out, as in every other table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from grpolab.advantages import display_order
from grpolab.config.budget import parse_budget
from grpolab.metric_keys import COMPUTE
from grpolab.render import Section

__all__ = ["COUNTED", "budget_sentence", "compute_section", "compute_table"]

COUNTED = {"optimizer_steps": COMPUTE["optimizer_steps"][1], "trained_sequences": COMPUTE["trained_sequences"][1],
           "trained_tokens": COMPUTE["trained_tokens"][1], "forward_tokens": COMPUTE["forward_tokens"][1],
           "completions": "rollout/completions_generated", "sampled_tokens": COMPUTE["sampled_tokens"][1]}
"""The table's counts (column -> the cumulative metric key it reads), in the order it shows them."""

LABELS = {"optimizer_steps": "Optimizer steps", "trained_sequences": "Sequences trained",
          "trained_tokens": "Tokens trained", "forward_tokens": "Tokens forwarded",
          "completions": "Completions sampled", "sampled_tokens": "Tokens sampled"}


def compute_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per (estimator, group_size), over the finished runs: seeds, mean last step, and for each of ``COUNTED`` the
    mean, min and max of the runs' counts by the end (NaN where the runs did not record it)."""
    spreads = [f"{name}{suffix}" for name in COUNTED for suffix in ("", "_min", "_max")]
    columns = ["estimator", "group_size", "n_seeds", "steps", *spreads]
    if metrics.empty or COUNTED["completions"] not in metrics.columns:
        return pd.DataFrame(columns=columns)
    finished = metrics if "status" not in metrics.columns else metrics[metrics["status"] != "diverged"]
    last = finished.sort_values("step").groupby("run_id").tail(1)
    counts = {f"_{name}": (last[key] if key in last.columns else pd.Series(np.nan, index=last.index)).astype(float)
              for name, key in COUNTED.items()}
    last = last.assign(**counts)
    rows = []
    for (estimator, size), runs in last.groupby(["estimator", "group_size"]):
        row = {"estimator": estimator, "group_size": int(size), "n_seeds": len(runs),
               "steps": float(runs["step"].mean())}
        for name in COUNTED:
            row.update(_spread(runs[f"_{name}"], name))
        rows.append(row)
    table = pd.DataFrame(rows, columns=columns)
    order = {name: i for i, name in enumerate(display_order(table["estimator"]))}
    return table.sort_values(["group_size", "estimator"], key=lambda c: c.map(order) if c.name == "estimator" else c,
                             ignore_index=True)


def _spread(values: pd.Series, name: str) -> dict[str, float]:
    """Mean, min and max of the runs' counts; NaN when any run did not record it (a mean over some seeds would
    pass for the arm's)."""
    if values.isna().any():
        return {name: np.nan, f"{name}_min": np.nan, f"{name}_max": np.nan}
    return {name: float(values.mean()), f"{name}_min": float(values.min()), f"{name}_max": float(values.max())}


def _count(mean: float, low: float, high: float) -> str:
    if not np.isfinite(mean):
        return "not recorded"
    return f"{mean:,.0f}" if low == high else f"{mean:,.0f} ({low:,.0f} to {high:,.0f})"


def budget_sentence(config: dict[str, Any]) -> str:
    """What the comparison held equal: the ``--budget`` and its unit's meaning, or equal steps without one."""
    budget = (config.get("train") or {}).get("budget")
    if not budget:
        return ("No --budget was set, so every arm ran the same steps: equal steps, not equal compute (arms that "
                "resample, +dynamic, sample more per step; arms whose advantages are 0 less often, such as sign, "
                "train more rows per step).")
    return (f"Every run had the budget {budget} (--budget), which holds equal {parse_budget(budget).holds_equal}: "
            "each run stopped after the step that reached it, so arms differ in that count by at most one step's.")


def compute_section(metrics: pd.DataFrame, config: dict[str, Any]) -> Section | None:
    """The "Compute per arm" section, or None when the runs logged no completions count."""
    table = compute_table(metrics)
    if table.empty:
        return None
    display = pd.DataFrame({"Arm": table["estimator"], "G": table["group_size"], "Seeds": table["n_seeds"],
                            "Steps": table["steps"].map(lambda v: f"{v:,.1f}".removesuffix(".0"))})
    for name, label in LABELS.items():
        spread = table[[name, f"{name}_min", f"{name}_max"]].itertuples(index=False)
        display[label] = [_count(*r) for r in spread]
    text = ("The compute each arm spent by the end of its runs (mean over finished seeds, range in brackets): "
            "optimizer steps; completions that reached the backward pass and their completion tokens (zero-advantage "
            "rows are skipped); the prompt and completion tokens of the forwards with a gradient; and the completions "
            "and completion tokens sampled, extra dynamic-sampling rounds included. ")
    return Section("Compute per arm", [text + budget_sentence(config)], [("Compute spent per arm", display)])
