"""The compare report's section on each prompt's fate (``grpolab.diagnostics.fate``), per arm: of the train
prompts all wrong when first sampled and sampled again, the share later mixed or all right. Paper 1 (arXiv
2605.07689) predicts that a group-centred estimator leaves such prompts without gradient, so fewer of them escape
than under a fixed-reference one ("pass@G failure descent"); this tests it directly. Counts are pooled over an
arm's runs (``fate_*`` columns of the results, ``grpolab.sweep.gather.fate_columns``); runs without rollout tables
add nothing.
"""

from __future__ import annotations

import math

import pandas as pd

from grpolab.diagnostics.fate import FATE_COUNTS, escaped_share
from grpolab.render import Section
from grpolab.report.tables import ARM, variants

__all__ = ["fate_section", "fate_table"]

COLUMNS = [f"fate_{name}" for name in FATE_COUNTS]


def fate_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per arm (variant, estimator, group_size): runs with rollout tables, the ``FATE_COUNTS`` summed over them,
    and ``escaped_share``; empty when no result row has the fate columns."""
    if any(c not in results.columns for c in COLUMNS):
        return pd.DataFrame(columns=[*ARM, "runs", *FATE_COUNTS, "escaped_share"])
    per_run = results.assign(variant=variants(results)).groupby("run_id").head(1).dropna(subset=COLUMNS)
    rows = []
    for (variant, estimator, size), group in per_run.groupby(ARM):
        counts = {name: int(group[f"fate_{name}"].sum()) for name in FATE_COUNTS}
        rows.append({"variant": variant, "estimator": estimator, "group_size": int(size), "runs": len(group),
                     **counts, "escaped_share": escaped_share(counts)})
    return pd.DataFrame(rows, columns=[*ARM, "runs", *FATE_COUNTS, "escaped_share"])


def _share(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.1f}%"


def fate_section(results: pd.DataFrame) -> Section | None:
    """The section, or None when no run has rollout tables."""
    table = fate_table(results)
    if table.empty:
        return None
    arm = {"Variant": table["variant"]} if (table["variant"] != "").any() else {}
    display = pd.DataFrame({**arm, "Estimator": table["estimator"], "G": table["group_size"], "Runs": table["runs"],
                            "Prompts": table["prompts"], "All wrong first": table["all_wrong_first"],
                            "Sampled again": table["all_wrong_first_resampled"], "Escaped": table["escaped"],
                            "Solved": table["solved"], "Escaped share": table["escaped_share"].map(_share)})
    intro = ("Each train prompt's state each time it was sampled: all wrong, mixed or all right in its group. Of the "
             "prompts all wrong when first sampled and sampled again, 'Escaped' were later mixed or all right and "
             "'Solved' later all right; the share is Escaped / Sampled again, pooled over the arm's runs: paper 1's "
             "pass@G failure descent tested directly (docs/audit.md).")
    return Section("Each prompt's fate", [intro], tables=[("", display)])
