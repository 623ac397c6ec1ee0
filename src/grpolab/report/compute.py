"""The compute each arm of a comparison spent: completions and completion tokens sampled, per (arm, G).

A remedy for gradient starvation that resamples (``+dynamic``) spends more sampling per step than one that
does not (``+mask``, ``sign``), so a comparison at equal steps is not one at equal compute. This section states
what each arm spent (the runs' last ``rollout/completions_generated`` and ``rollout/tokens_generated``, mean
over finished runs, with the range over seeds), and the budget when ``--budget`` held compute equal
(``grpolab.config.budget``). Diverged runs are left out, as in every other table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from grpolab.advantages import display_order
from grpolab.render import Section

__all__ = ["COMPLETIONS", "TOKENS", "compute_section", "compute_table"]

COMPLETIONS = "rollout/completions_generated"
TOKENS = "rollout/tokens_generated"


def compute_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per (estimator, group_size), over the finished runs: seeds, mean last step, and the mean, min and max of
    the completions and the tokens sampled by the end (tokens NaN where the engine does not count them)."""
    columns = ["estimator", "group_size", "n_seeds", "steps", "completions", "completions_min", "completions_max",
               "tokens", "tokens_min", "tokens_max"]
    if metrics.empty or COMPLETIONS not in metrics.columns:
        return pd.DataFrame(columns=columns)
    finished = metrics if "status" not in metrics.columns else metrics[metrics["status"] != "diverged"]
    last = finished.sort_values("step").groupby("run_id").tail(1)
    tokens = last[TOKENS] if TOKENS in last.columns else pd.Series(np.nan, index=last.index)
    last = last.assign(_tokens=tokens.astype(float), _completions=last[COMPLETIONS].astype(float))
    rows = []
    for (estimator, size), runs in last.groupby(["estimator", "group_size"]):
        rows.append({"estimator": estimator, "group_size": int(size), "n_seeds": len(runs),
                     "steps": float(runs["step"].mean()), **_spread(runs["_completions"], "completions"),
                     **_spread(runs["_tokens"], "tokens")})
    table = pd.DataFrame(rows, columns=columns)
    order = {name: i for i, name in enumerate(display_order(table["estimator"]))}
    return table.sort_values(["group_size", "estimator"], key=lambda c: c.map(order) if c.name == "estimator" else c,
                             ignore_index=True)


def _spread(values: pd.Series, name: str) -> dict[str, float]:
    if values.isna().all():
        return {name: np.nan, f"{name}_min": np.nan, f"{name}_max": np.nan}
    return {name: float(values.mean()), f"{name}_min": float(values.min()), f"{name}_max": float(values.max())}


def _count(mean: float, low: float, high: float) -> str:
    if not np.isfinite(mean):
        return "not counted"
    return f"{mean:,.0f}" if low == high else f"{mean:,.0f} ({low:,.0f} to {high:,.0f})"


def compute_section(metrics: pd.DataFrame, config: dict[str, Any]) -> Section | None:
    """The "Compute per arm" section, or None when the runs logged no completions count."""
    table = compute_table(metrics)
    if table.empty:
        return None
    display = pd.DataFrame({
        "Arm": table["estimator"], "G": table["group_size"], "Seeds": table["n_seeds"],
        "Steps": table["steps"].map(lambda v: f"{v:,.1f}".removesuffix(".0")),
        "Completions sampled": [_count(*r) for r in table[["completions", "completions_min", "completions_max"]]
                                .itertuples(index=False)],
        "Tokens sampled": [_count(*r) for r in table[["tokens", "tokens_min", "tokens_max"]].itertuples(index=False)],
    })
    text = ("The sampling each arm spent by the end of its runs (mean over finished seeds, range in brackets): "
            "completions and completion tokens sampled, extra dynamic-sampling rounds included.")
    budget = (config.get("train") or {}).get("budget")
    text += (f" Every run had the budget {budget} (--budget): it stopped after the step that reached it, so arms "
             "differ by at most one step's sampling." if budget else
             " No --budget was set: arms that resample (+dynamic) spent more per step than the others.")
    return Section("Compute per arm", [text], [("Compute spent per arm", display)])
