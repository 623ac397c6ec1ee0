"""The sections of the ``grpolab compare`` report that lead with the answer: the verdict, the learning-rate
selection, and where the gain sits (per prompt family).

The verdict is computed, never written by hand: per group size, the estimators ranked by held-out score
(``tables.score``: pass@1, or greedy accuracy without samples), the best one's gain with its CI and
its smallest per-seed gain, its margin over the runner-up with the Holm-adjusted Welch p; then sign
against each group-centred (zero-sum, by the registry) estimator whichever way it falls; then sign at
each group size (the gradient-starvation paper, arXiv 2605.07689, Fig. 3 right).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from grpolab import stats
from grpolab.advantages import display_order, entry_for
from grpolab.render import Section
from grpolab.report.tables import (
    ALPHA,
    N_RESAMPLES,
    comparisons,
    family_split,
    family_table,
    run_table,
    selection_table,
)

__all__ = ["families_section", "selection_section", "verdict_section"]

SIGN = "sign"


def _pts(value: float) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:+.1f} points"


def _pct(value: float) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:.1f}%"


def _pair(rows: list[dict[str, Any]], size: int, a: str, b: str) -> dict[str, Any] | None:
    """The comparison row of a and b at G = size, oriented so that name_a == a."""
    for row in rows:
        if row["group_size"] == size and {row["name_a"], row["name_b"]} == {a, b}:
            if row["name_a"] == a:
                return row
            return {**row, "name_a": a, "name_b": b, "mean_a": row["mean_b"], "mean_b": row["mean_a"],
                    "n_a": row["n_b"], "n_b": row["n_a"], "mean_difference": -row["mean_difference"]}
    return None


def _best_line(runs: pd.DataFrame, rows: list[dict[str, Any]], size: int) -> str:
    group = runs[runs["group_size"] == size]
    means = group.groupby("estimator")["final_accuracy"].mean().sort_values(ascending=False)
    best = means.index[0]
    mine = group[group["estimator"] == best]
    gains = (mine["final_accuracy"] - mine["start_accuracy"]).to_numpy(float)
    gains = gains[np.isfinite(gains)]  # a run without a start evaluation has no gain
    if gains.size == 0:
        return f"G = {size}: {best} reaches the highest held-out score, {_pct(means.iloc[0])} (no start evaluation)."
    low, high = (stats.bootstrap_ci(gains, n_resamples=N_RESAMPLES, random_state=0)[1:]
                 if gains.size >= 2 else (np.nan, np.nan))
    text = (f"G = {size}: {best} learns most, held-out score {_pct(mine['start_accuracy'].mean())} -> "
            f"{_pct(means.iloc[0])} ({_pts(gains.mean())}, 95% CI [{_pts(low)}, {_pts(high)}]; smallest gain "
            f"of its {gains.size} seeds {_pts(gains.min())})")
    if len(means) > 1:
        second = means.index[1]
        pair = _pair(rows, size, best, second)
        test = (f", Holm-adjusted Welch p = {pair['welch_p_holm']:.2g}, n = {pair['n_a']} vs {pair['n_b']}"
                if pair else " (no test: fewer than 2 seeds)")
        text += f"; runner-up {second}, {_pts(means.iloc[0] - means.iloc[1])} behind{test}"
    return text + "."


def _sign_lines(runs: pd.DataFrame, rows: list[dict[str, Any]]) -> list[str]:
    """One line per group size: sign against every group-centred (zero-sum) estimator, whichever way it falls."""
    lines = []
    names = display_order(runs["estimator"])
    zero_sum = [n for n in names if (e := entry_for(n)) is not None and e.zero_sum and "+" not in n]
    for size in sorted(runs["group_size"].unique()):
        pairs = [p for other in zero_sum if (p := _pair(rows, int(size), SIGN, other)) is not None]
        if not pairs:
            continue
        parts = [f"vs {p['name_b']} {_pts(p['mean_difference'])} (Holm-adjusted Welch p = {p['welch_p_holm']:.2g})"
                 for p in pairs]
        better = [p["name_b"] for p in pairs if p["welch_p_holm"] < ALPHA and p["mean_difference"] > 0]
        worse = [p["name_b"] for p in pairs if p["welch_p_holm"] < ALPHA and p["mean_difference"] < 0]
        lines.append(f"G = {size}, sign against the group-centred estimators: {'; '.join(parts)}: "
                     f"{_sign_verdict(better, worse)} (n = {pairs[0]['n_a']} seeds each).")
    return lines


def _names(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _sign_verdict(better: list[str], worse: list[str]) -> str:
    """sign's significant differences in plain words, or that it has none."""
    if not better and not worse:
        return "no significant difference between sign and any of them"
    said = [f"significantly better than {_names(better)}"] if better else []
    said += [f"significantly worse than {_names(worse)}"] if worse else []
    return "sign is " + " and ".join(said)


def _sign_group_sizes(runs: pd.DataFrame) -> list[str]:
    """sign's gain at each group size, and a Welch test between the two smallest sizes."""
    sign = runs[runs["estimator"] == SIGN]
    sizes = sorted(sign["group_size"].unique())
    if len(sizes) < 2:
        return []
    gains = {g: (r["final_accuracy"] - r["start_accuracy"]).dropna().to_numpy(float)
             for g, r in sign.groupby("group_size")}
    parts = ", ".join(f"G = {g}: {_pts(gains[g].mean())} (n = {gains[g].size})" for g in sizes)
    line = f"sign at each group size (the paper's Fig. 3, right): {parts}"
    a, b = gains[sizes[0]], gains[sizes[1]]
    if a.size >= 2 and b.size >= 2:
        _, _, p = stats.welch_t_test(b, a)
        line += f"; G = {sizes[1]} vs G = {sizes[0]}: Welch p = {p:.2g}"
    return [line + "."]


def _family_lines(results: pd.DataFrame) -> list[str]:
    """Where the gain sits, at the largest G; nothing for a task without prompt families."""
    split = family_split(family_table(results))
    if split.empty:
        return []
    largest = split["group_size"].max()
    rows = split[split["group_size"] == largest].set_index("estimator")
    names = display_order(rows.index)
    low, high = rows["low_change"].notna().any(), rows["high_change"].notna().any()
    if low and high:
        parts = [f"{name} {_change(rows.at[name, 'low_change'])} vs {_change(rows.at[name, 'high_change'])}"
                 for name in names]
        return [f"Where the gain sits (G = {largest}, change of held-out success in the families that started "
                f"below 50% vs at or above): " + "; ".join(parts) + "."]
    column, side = ("low_change", "below") if low else ("high_change", "at or above")
    parts = [f"{name} {_pts(rows.at[name, column])}" for name in names]
    return [f"Where the gain sits (G = {largest}): every prompt family started {side} 50% held-out success, so "
            f"there is no split; the change in them: " + "; ".join(parts) + "."]


def _change(value: float) -> str:
    """A change of success, or 'no family' where an estimator had no family on that side of 50%."""
    return "no family" if value is None or not np.isfinite(value) else _pts(value)


def verdict_section(results: pd.DataFrame, selection: pd.DataFrame | None) -> Section:
    """The answer first: who learns fastest and by how much, sign vs group-centred, where the gain sits."""
    runs = run_table(results)
    rows, _ = comparisons(runs)
    bullets = [_best_line(runs, rows, int(size)) for size in sorted(runs["group_size"].unique())]
    bullets += _sign_lines(runs, rows) + _sign_group_sizes(runs) + _family_lines(results)
    lr_text = ("Each estimator ran at its own learning rate, chosen per group size on the validation split "
               "(never on the test split; see Learning-rate selection). " if selection is not None else
               "Every estimator ran at the same learning rate (no --lrs): a difference may come from the "
               "learning rate rather than the estimator. ")
    text = (f"Held-out score = pass@1 on the test split (mean success of the evaluation samples at the training "
            f"temperature; greedy accuracy when no samples were drawn), at the end of training. {lr_text}"
            f"A difference is called significant when its Holm-adjusted Welch p < {ALPHA}.")
    return Section("Verdict", [text], bullets=bullets)


def selection_section(selection: pd.DataFrame) -> Section:
    """The lr grid: mean validation score per (estimator, G, lr), the chosen lr marked."""
    table = selection_table(selection)
    order = {name: i for i, name in enumerate(display_order(table["estimator"]))}
    table = table.sort_values(["group_size", "estimator", "lr"], key=lambda s: s.map(order) if s.name == "estimator"
                              else s)
    display = pd.DataFrame({
        "Estimator": table["estimator"], "G": table["group_size"], "lr": table["lr"].map(lambda v: f"{v:g}"),
        "Validation score": table["validation_score"].map(_pct), "Seeds": table["seeds"],
        "Chosen": table["selected"].map(lambda v: "yes" if v else ""),
    })
    text = ("Every (estimator, G) was trained at each learning rate of --lrs on separate selection seeds "
            "(1000, 1001, ...), scored on the validation split (disjoint from train and test), and the lr with "
            "the best mean validation score was chosen (ties: the smaller lr). The results above are fresh "
            "runs at the chosen lr; the selection runs are never reported as results.")
    return Section("Learning-rate selection", [text], [("Validation score per learning rate", display)])


def families_section(results: pd.DataFrame) -> Section | None:
    """Start and end success per prompt family, for each estimator at each group size; None without families."""
    table = family_table(results)
    if table.empty:
        return None
    wide = table.pivot_table(index=["group_size", "family"], columns="estimator", values="end").reset_index()
    start = table.groupby(["group_size", "family"])["start"].mean().reset_index()
    wide = start.merge(wide, on=["group_size", "family"]).sort_values(["group_size", "start"])
    names = display_order([c for c in wide.columns if c not in ("group_size", "family", "start")])
    display = pd.DataFrame({"G": wide["group_size"], "Family": wide["family"], "Start": wide["start"].map(_pct),
                            **{f"{name} end": wide[name].map(_pct) for name in names}})
    text = ("Mean per-prompt success (over the evaluation samples) in each prompt family at the start and at "
            "the end of training, mean over seeds. Families are ordered by their starting success: the "
            "low-success families are where group-centred advantages starve (most groups all wrong).")
    return Section("Per-family breakdown", [text], [("Held-out success per prompt family", display)])
