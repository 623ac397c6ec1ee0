"""The report's "Learning-rate selection" section and the verdict's word on lrs that the grid does not bracket.

The selection table (``selection.parquet``, ``grpolab.sweep.select.select_lrs``) holds one row per lr-grid run:
estimator, group_size, lr, seed, validation_score, selected, and in newer sweeps ``variant``, ``round`` (0 =
the user's grid, 1.. = lrs the sweep added to bracket the best one) and ``bracketed`` (per arm: the chosen lr
has a tried lr on each side). Older tables lack the last three: one variant "", every lr in round 0, and
bracketing inferred from whether the chosen lr is an end of its arm's grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from grpolab.render import Section
from grpolab.report.comparisons import arm_label
from grpolab.report.tables import ARM, sort_arms, variants

__all__ = ["bracketing", "selection_section", "selection_table", "unbracketed_lines"]


def _with_defaults(selection: pd.DataFrame) -> pd.DataFrame:
    rounds = selection["round"].fillna(0).astype(int) if "round" in selection.columns else 0
    diverged = selection["status"].eq("diverged") if "status" in selection.columns else False
    return selection.assign(variant=variants(selection), round=rounds, diverged=diverged)


def selection_table(selection: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, estimator, group_size, lr): mean validation score over the selection seeds that did not
    diverge and the worst of them, the seeds' count, how many diverged, whether the lr was chosen and the round
    that added it (0 = the user's grid)."""
    table = _with_defaults(selection).groupby([*ARM, "lr"]).agg(
        validation_score=("validation_score", "mean"), worst_seed=("validation_score", "min"),
        seeds=("seed", "nunique"), diverged=("diverged", "sum"),
        selected=("selected", "any"), round=("round", "min"))
    return table.reset_index()


def _bracketed(group: pd.DataFrame, chosen: float) -> bool:
    """The table's own ``bracketed`` flag where it has one, else: the chosen lr is not an end of the grid."""
    if "bracketed" in group.columns and group["bracketed"].notna().any():
        return bool(group["bracketed"].dropna().astype(bool).all())
    return bool(group["lr"].min() < chosen < group["lr"].max())


def bracketing(selection: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, estimator, group_size): the chosen lr, whether it is bracketed, and ``side``: "largest" /
    "smallest" when it is that end of the lrs tried (else "")."""
    rows = []
    for (variant, estimator, size), group in _with_defaults(selection).groupby(ARM):
        chosen = group.loc[group["selected"].astype(bool), "lr"]
        if chosen.empty:
            continue
        lr = float(chosen.iloc[0])
        side = "largest" if lr == group["lr"].max() else "smallest" if lr == group["lr"].min() else ""
        rows.append({"variant": variant, "estimator": estimator, "group_size": int(size), "lr": lr,
                     "bracketed": _bracketed(group, lr), "side": side})
    return sort_arms(pd.DataFrame(rows, columns=[*ARM, "lr", "bracketed", "side"]))


def unbracketed_lines(selection: pd.DataFrame | None) -> list[str]:
    """One verdict line per arm whose chosen lr is not bracketed by the lrs tried."""
    if selection is None or selection.empty:
        return []
    lines = []
    for row in bracketing(selection).itertuples():
        if row.bracketed:
            continue
        where = {"largest": "above", "smallest": "below"}.get(row.side)
        said = f"is the {row.side} tried ({row.lr:g}); it may lie {where} the grid" if where else \
            f"({row.lr:g}) is not bracketed by the lrs tried"
        lines.append(f"The best lr for {row.estimator} {arm_label(row.variant, row.group_size)} {said}, so its "
                     "results may understate it.")
    return lines


def _percent(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{100 * value:.1f}%"


def _chosen(row: pd.Series) -> str:
    return "yes" if row["selected"] else ""


def selection_section(selection: pd.DataFrame, config: dict[str, Any] | None = None) -> Section:
    """The lr grid: mean validation score and worst seed per (variant, estimator, G, lr), the chosen lr marked, the
    lrs that the sweep added to bracket the best one marked with their round; ``config``: the sweep settings (the
    rule under ``lr_seed_floor``, and a bullet for each cell where no lr cleared it)."""
    table = sort_arms(selection_table(selection), extra=("lr",))
    added = table["round"] > 0
    display = pd.DataFrame({
        **({"Variant": table["variant"]} if (table["variant"] != "").any() else {}),
        "Estimator": table["estimator"], "G": table["group_size"],
        "lr": [f"{lr:g}" + (f" (added, round {r})" if r > 0 else "") for lr, r in zip(table["lr"], table["round"],
                                                                                   strict=True)],
        "Validation score": table["validation_score"].map(_percent), "Worst seed": table["worst_seed"].map(_percent),
        "Seeds": table["seeds"], "Chosen": table.apply(_chosen, axis=1),
    })
    if table["diverged"].gt(0).any():
        display.insert(len(display.columns) - 1, "Diverged", table["diverged"].astype(int))
    floor = ((config or {}).get("compare") or {}).get("lr_seed_floor")  # the sweep settings' compare part
    rule = ("the lr with the best mean validation score was chosen (ties: the smaller lr)" if floor is None else
            f"the lr with the best mean validation score among those whose every selection seed scored above "
            f"{100 * floor:g}% was chosen (--lr-seed-floor; where no lr did, the one with the best worst seed; "
            "ties: the smaller lr)")
    text = ("Every (estimator, G) was trained at each learning rate of --lrs on separate selection seeds "
            "(1000, 1001, ...), scored on the validation split (disjoint from train and test), and " + rule + ". "
            "The results above are fresh runs at the chosen lr; the selection runs are never reported as results.")
    if added.any():
        text += (" Where the best lr was an end of the grid, the sweep tried further lrs beyond it (marked "
                 "\"added\") until the best one had a tried lr on each side.")
    notes = unbracketed_lines(selection) + [
        f"No lr for {cell} had every selection seed above {100 * floor:g}%: the one with the best worst seed was "
        "chosen, so its reported runs may collapse too." for cell in ((config or {}).get("selection") or {}).get(
            "below_floor", [])]
    return Section("Learning-rate selection", [text], [("Validation score per learning rate", display)],
                   bullets=notes)
