"""Seed-level aggregation of the per-run measurements: mean and 95% Student-t CI over runs
(``grpolab.stats.t_interval``, which holds its coverage at 3 to 5 seeds where a percentile bootstrap is too
narrow), and a one-word reading of each estimator's pass@k change."""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpolab.stats import t_interval

__all__ = ["KEYS", "passk_reading", "summarise"]

KEYS = ["part", "measure", "estimator", "group_size", "token_class", "outcome", "phase", "k"]


def summarise(per_run: pd.DataFrame) -> pd.DataFrame:
    """One row per ``KEYS`` group of ``per_run``: mean, ci_low, ci_high over the runs with a value, n_runs
    (0 when no run recorded the measure: mean and CI are then NaN; 1: the CI is NaN) and tokens (the token
    count of one run, the same for every run since all runs are scored on the same completions)."""
    table = per_run.assign(k=per_run["k"].fillna(0).astype(int))
    rows = []
    for key, group in table.groupby(KEYS, sort=False, dropna=False):
        values = group["value"].dropna().to_numpy(dtype=float)
        mean, low, high = t_interval(values) if values.size else (np.nan, np.nan, np.nan)
        rows.append({**dict(zip(KEYS, key, strict=True)), "mean": mean, "ci_low": low, "ci_high": high,
                     "n_runs": int(values.size), "tokens": group["tokens"].max()})
    return pd.DataFrame(rows)


def passk_reading(summary: pd.DataFrame, estimator: str, group_size: int) -> str:
    """Search compression (pass@1 up, pass@k_max not up), capacity gain (pass@k_max up), loss (pass@1
    down) or no clear change, read from the 95% CIs of the per-run changes."""
    changes = summary[(summary["part"] == "passk") & (summary["phase"] == "change")
                      & (summary["estimator"] == estimator) & (summary["group_size"] == group_size)]
    if changes.empty or changes["n_runs"].min() == 0:
        return "no pass@k recorded"
    first = changes[changes["k"] == changes["k"].min()].iloc[0]
    last = changes[changes["k"] == changes["k"].max()].iloc[0]
    if last["k"] > 1 and last["ci_low"] > 0:
        return f"capacity gain (pass@{last['k']} up)"
    if first["ci_low"] > 0:
        return "search compression (pass@1 up, pass@k not)" if last["k"] > 1 else "pass@1 up"
    if first["ci_high"] < 0:
        return "loss (pass@1 down)"
    return "no clear change"
