"""The report's verdict, computed, never written by hand, in three sections that open the report.

"Verdict": the bottom line first (``report.bottom_line``: one sentence per primary comparison), a one-line
pointer to the Methods section after the results (``report.methods``), and the forest plot of every tested
difference (``report.forest``). "Pairs not tested": the same-update pairs, the repeats of a stand-in's pair
and the arms with too few runs, a table with each reason. "The verdict in detail", as bullets:

0. When the primary comparison was declared (``primary_declaration``, recorded in ``compare.yaml`` by
   ``grpolab.sweep.settings``), flagged when it replaced another primary after runs had trained, and said to be
   chosen with earlier results known where results of the same configuration existed then
   (``grpolab.sweep.earlier``).
1. The primary comparison (``--primary``; see ``report.comparisons``), one family over every group size and
   variant, Holm-corrected together: the difference of means with its 95% interval (paired by seed where
   the arms share seeds, else Welch), its test and Holm-adjusted p, and, where it is not significant, TOST
   at the equivalence margin; P(A > B) with its interval and the interquartile means (rliable, Agarwal et
   al. 2021, arXiv 2108.13264); the same test on greedy accuracy, saying so where the two metrics disagree;
   or why it cannot be tested (an arm missing, fewer than 2 finished runs, the same update under Adam).
2. The arm with the highest mean final score (a tie named as one, not ordered), its gain with its Student-t CI and
   its smallest per-seed gain, and its margin over the runner-up with the p of that pair's family.
3. Secondary: sign against each group-centred (zero-sum, by the registry) estimator, Holm-adjusted over the
   secondary family (every other tested pair of every group size and variant).
4. What qualifies the numbers: arms that ran at different lrs, runs that diverged (left out of every mean and
   test, and counted here), chosen lrs at an end of their grid, and arms clipped at very different rates.

Then sign at each group size (the gradient-starvation paper, arXiv 2605.07689, Fig. 3 right) and where the
gain sits (per prompt family). Departure from the paper: it tests every pair with a t-test and no
correction; here the declared pair is one family over its group sizes, the rest another, each Holm-corrected,
and a difference that is not significant is never read as equality (TOST decides that).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from grpolab import stats
from grpolab.advantages import display_order, entry_for
from grpolab.pairing import compare_arms
from grpolab.render import Section
from grpolab.report.bottom_line import bottom_line
from grpolab.report.clipping import clipping_lines
from grpolab.report.comparisons import (
    arm_label,
    comparisons,
    equivalence_margin,
    finding,
    finding_phrase,
    greedy_clause,
    lr_phrase,
    metric_name,
    p_phrase,
    points,
    primary_pair,
    repeat_phrase,
    resolve_phrase,
    same_update_phrase,
)
from grpolab.report.forest import figure_forest, forest_rows, untested_table
from grpolab.report.methods import methods_pointer
from grpolab.report.selection import unbracketed_lines
from grpolab.report.tables import (
    N_RESAMPLES,
    diverged_table,
    family_split,
    family_table,
    labelled,
    no_signal_table,
    run_table,
    variants,
)

__all__ = ["DETAIL", "UNTESTED", "VERDICT", "verdict_sections"]

SIGN = "sign"
VERDICT = "Verdict"
UNTESTED = "Pairs not tested"
DETAIL = "The verdict in detail"


def _pct(value: float) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:.1f}%"


def _pair(rows: list[dict[str, Any]], variant: str, size: int, a: str, b: str) -> dict[str, Any] | None:
    """The comparison row of a and b at (variant, G), oriented so that name_a == a."""
    for row in rows:
        if row["variant"] == variant and row["group_size"] == size and {row["name_a"], row["name_b"]} == {a, b}:
            if row["name_a"] == a:
                return row
            flipped = {"name_a": a, "name_b": b, "mean_a": row["mean_b"], "mean_b": row["mean_a"], "n_a": row["n_b"],
                       "n_b": row["n_a"], "lr_a": row["lr_b"], "lr_b": row["lr_a"]}
            for prefix in ("", "greedy_"):  # differences and their intervals change sign
                if prefix + "mean_difference" in row:
                    flipped[prefix + "mean_difference"] = -row[prefix + "mean_difference"]
                if prefix + "difference_low" in row:
                    flipped[prefix + "difference_low"] = -row[prefix + "difference_high"]
                    flipped[prefix + "difference_high"] = -row[prefix + "difference_low"]
            if "iqm_a" in row:
                flipped.update(iqm_a=row["iqm_b"], iqm_b=row["iqm_a"], prob_improvement=1 - row["prob_improvement"],
                               prob_improvement_low=1 - row["prob_improvement_high"],
                               prob_improvement_high=1 - row["prob_improvement_low"])
            return {**row, **flipped}
    return None


def _primary_text(row: dict[str, Any] | None, pair: tuple[str, str], present: set[str]) -> str:
    """The primary comparison's numbers, or why there are none."""
    a, b = pair
    if row is None:
        missing = [name for name in pair if name not in present]
        return f"not testable: {' and '.join(missing)} has no finished run here"
    if row["role"] == "same_update":
        return f"not tested: {same_update_phrase(row)}"
    if not row["tested"]:
        return f"not testable: a test needs at least 2 finished runs per arm (n = {row['n_a']} vs {row['n_b']})"
    return (f"on {metric_name(row)}, {finding_phrase(row)}; P({a} > {b}) = {row['prob_improvement']:.2f} "
            f"[{row['prob_improvement_low']:.2f}, {row['prob_improvement_high']:.2f}]; interquartile means "
            f"{_pct(row['iqm_a'])} vs {_pct(row['iqm_b'])}{greedy_clause(row)}")


def declaration_line(config: dict[str, Any], pair: tuple[str, str]) -> str:
    """When the primary comparison was declared, from the sweep's record; flagged when it was changed after
    runs had trained, or said to be unknown where nothing recorded it."""
    record = config.get("primary_declaration") or {}
    when = record.get("primary_declared") or ""
    name = f"{pair[0]} vs {pair[1]}"
    if not when:
        return (f"The primary comparison is {name}; when it was declared is not recorded (a sweep saved before "
                "compare.yaml recorded it), so nothing shows it was declared before the results.")
    if record.get("primary_declared_after_results"):
        replaced = record.get("primary_replaced") or "another pair"
        return (f"CHANGED AFTER RESULTS: the primary comparison {name} was declared at {when}, after runs of this "
                f"sweep had trained, replacing {replaced.replace(',', ' vs ')}: it was chosen with results in "
                "view, so read its p-values as exploratory.")
    earlier = record.get("primary_earlier_results")
    if earlier is None:
        return (f"The primary comparison {name} was declared at {when}, before any run of this sweep trained; whether "
                "earlier results of the same configuration were known then is not recorded (a sweep saved before "
                "compare.yaml recorded it).")
    if earlier:
        return (f"The primary comparison {name} was declared at {when}, before any run of this sweep trained, but "
                f"earlier results of the same configuration existed ({earlier}): it was chosen with earlier results "
                "known, so read its p-values as a replication of what was seen, not a test declared before any "
                "result.")
    return (f"The primary comparison {name} was declared at {when}, before any run of this sweep trained and before "
            "any result of the same configuration (none beside the sweep's folder or in experiments/).")


def _primary_lines(runs: pd.DataFrame, rows: list[dict[str, Any]], config: dict[str, Any]) -> list[str]:
    pair = primary_pair(config, display_order(runs["estimator"]))
    if pair is None:
        return []
    lines = [declaration_line(config, pair)]
    for (variant, size), group in runs.groupby(["variant", "group_size"]):
        row = _pair(rows, variant, int(size), *pair)
        text = _primary_text(row, pair, set(group["estimator"]))
        lr = lr_phrase(row) if row and row["role"] != "same_update" else ""
        lines.append(f"Primary comparison ({pair[0]} vs {pair[1]}), {arm_label(variant, int(size))}: {text}{lr}.")
    return lines


def _best_line(runs: pd.DataFrame, rows: list[dict[str, Any]], variant: str, size: int) -> str:
    group = runs[(runs["group_size"] == size) & (runs["variant"] == variant)]
    means = group.groupby("estimator")["final_accuracy"].mean().sort_values(ascending=False)
    best, label = means.index[0], arm_label(variant, size)
    metric = "pass@1" if (group["n"] > 0).all() else "greedy accuracy"
    tied = [name for name, mean in means.items() if abs(mean - means.iloc[0]) <= 1e-12]
    if len(tied) > 1:  # an order of equal means would name a winner the scores do not
        return f"{label}: {', '.join(tied)} tie for the highest mean held-out {metric}, {_pct(means.iloc[0])}."
    mine = group[group["estimator"] == best]
    gains = (mine["final_accuracy"] - mine["start_accuracy"]).to_numpy(float)
    gains = gains[np.isfinite(gains)]  # a run without a start evaluation has no gain
    if gains.size == 0:
        return f"{label}: {best} reaches the highest held-out {metric}, {_pct(means.iloc[0])} (no start evaluation)."
    low, high = stats.t_interval(gains)[1:] if gains.size >= 2 else (np.nan, np.nan)
    text = (f"{label}: {best} has the highest mean held-out {metric}, {_pct(mine['start_accuracy'].mean())} -> "
            f"{_pct(means.iloc[0])} ({points(gains.mean())}, 95% CI [{points(low)}, {points(high)}]; smallest gain "
            f"of its {gains.size} seeds {points(gains.min())})")
    if len(means) > 1:
        second = means.index[1]
        pair = _pair(rows, variant, size, best, second)
        test = (f", {p_phrase(pair)}, n = {pair['n_a']} vs {pair['n_b']}" if pair and pair["tested"]
                else f" ({repeat_phrase(pair)})" if pair and pair["role"] == "repeat" else " (not tested)")
        text += f"; runner-up {second}, {points(means.iloc[0] - means.iloc[1])} behind{test}"
    return text + "."


def _sign_lines(runs: pd.DataFrame, rows: list[dict[str, Any]]) -> list[str]:
    """Per (variant, G): sign against every group-centred (zero-sum) estimator in a tested secondary pair."""
    lines = []
    names = display_order(runs["estimator"])
    zero_sum = [n for n in names if (e := entry_for(n)) is not None and e.zero_sum and "+" not in n]
    for (variant, size), _ in runs.groupby(["variant", "group_size"]):
        pairs = [p for other in zero_sum if (p := _pair(rows, variant, int(size), SIGN, other)) is not None
                 and p["tested"] and p["role"] == "secondary"]
        if not pairs:
            continue
        parts = [f"vs {p['name_b']} {points(p['mean_difference'])} ({p_phrase(p)}{lr_phrase(p)})" for p in pairs]
        said = {kind: [p["name_b"] for p in pairs if finding(p) == kind]
                for kind in ("higher", "lower", "equivalent", "ceiling")}
        said["unclear"] = [f"{p['name_b']} ({resolve_phrase(p)})" for p in pairs if finding(p) == "unclear"]
        lines.append(f"{arm_label(variant, int(size))}, secondary: sign against the group-centred estimators on "
                     f"{metric_name(pairs[0])}: {'; '.join(parts)}: {_sign_verdict(said, pairs[0]['margin'])} "
                     f"(n = {pairs[0]['n_a']} seeds of sign).")
    return lines


def _names(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _sign_verdict(said: dict[str, list[str]], margin: float) -> str:
    """sign's findings against the others in plain words: better, worse, equivalent, or no evidence."""
    parts = [f"significantly better than {_names(said['higher'])}"] if said["higher"] else []
    parts += [f"significantly worse than {_names(said['lower'])}"] if said["lower"] else []
    parts += [f"equivalent within +-{100 * margin:.1f} points to {_names(said['equivalent'])}"] \
        if said["equivalent"] else []
    parts += [f"at the ceiling with {_names(said['ceiling'])} (both within +-{100 * margin:.1f} points of 100%: "
              "cannot be resolved)"] if said["ceiling"] else []
    unclear = f"no evidence either way at this n against {_names(said['unclear'])}" if said["unclear"] else ""
    if not parts:
        return unclear
    return f"sign is {' and '.join(parts)}" + (f"; {unclear}" if unclear else "")


def _diverged_lines(results: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """Per arm with diverged runs: how many, when, and that the means leave them out."""
    lines = []
    for (variant, estimator, size), group in diverged_table(results).groupby(["variant", "estimator", "group_size"]):
        kept = int(((runs["variant"] == variant) & (runs["estimator"] == estimator)
                    & (runs["group_size"] == size)).sum())
        steps = [f"{s:.0f}" for s in sorted(group["diverged_at_step"].dropna())]
        when = f" (at step {', '.join(steps)})" if steps else ""
        lines.append(f"{estimator} {arm_label(variant, int(size))}: {len(group)} of {len(group) + kept} runs diverged"
                     f"{when}; they are left out of every mean and test, which describe only the {kept} run(s) that "
                     "did not diverge (a survivor bias in that arm's favour).")
    return lines


def _no_signal_lines(results: pd.DataFrame) -> list[str]:
    """Per arm with runs that ``--stop-when-dead`` ended: how many of the arm's runs, and at which step."""
    lines = []
    for (variant, estimator, size), group in no_signal_table(results).groupby(["variant", "estimator", "group_size"]):
        arm = results[(variants(results) == variant) & (results["estimator"] == estimator)
                      & (results["group_size"] == size)]
        steps = ", ".join(f"{s:.0f}" for s in sorted(set(group["no_signal_at_step"].dropna())))
        lines.append(f"{estimator} {arm_label(variant, int(size))}: {len(group)} of {arm['run_id'].nunique()} runs "
                     f"stopped with no learning signal at step {steps or '?'} (--stop-when-dead); they are counted "
                     "with the score of the policy they stopped with.")
    return lines


def _sign_group_sizes(runs: pd.DataFrame) -> list[str]:
    """sign's gain at each group size, and a test between the two smallest sizes, paired by seed where both hold the
    same seeds, else Welch (``grpolab.pairing``; variant "" only)."""
    sign = runs[(runs["estimator"] == SIGN) & (runs["variant"] == "")]
    sizes = sorted(sign["group_size"].unique())
    if len(sizes) < 2:
        return []
    gains = {g: (r.set_index("seed")["final_accuracy"] - r.set_index("seed")["start_accuracy"]).dropna()
             for g, r in sign.groupby("group_size")}
    parts = ", ".join(f"G = {g}: {points(gains[g].mean())} (n = {gains[g].size})" for g in sizes)
    metric = "pass@1" if (sign["n"] > 0).all() else "greedy accuracy"
    line = f"sign's gain in held-out {metric} at each group size (the paper's Fig. 3, right; exploratory, not " \
           f"adjusted): {parts}"
    a, b = gains[sizes[0]], gains[sizes[1]]
    if a.size >= 2 and b.size >= 2:  # seed s starts from the same policy at every G: paired where the seeds match
        result = compare_arms(b, a, n_resamples=N_RESAMPLES)
        line += f"; G = {sizes[1]} vs G = {sizes[0]}: {result['test']} p = {result['p']:.2g}"
    return [line + "."]


def _family_lines(results: pd.DataFrame) -> list[str]:
    """Where the gain sits, at the largest G; nothing for a task without prompt families."""
    split = family_split(family_table(labelled(results)))
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
    parts = [f"{name} {points(rows.at[name, column])}" for name in names]
    return [f"Where the gain sits (G = {largest}): every prompt family started {side} 50% held-out success, so "
            f"there is no split; the change in them: " + "; ".join(parts) + "."]


def _change(value: float) -> str:
    """A change of success, or 'no family' where an estimator had no family on that side of 50%."""
    return "no family" if value is None or not np.isfinite(value) else points(value)


def _headline(runs: pd.DataFrame, rows: list[dict[str, Any]], config: dict[str, Any],
              png: Callable[[Any], bytes]) -> Section:
    """The answer first: the bottom line (one sentence per primary comparison), where the methods are, and the
    forest plot of every tested difference."""
    section = Section(VERDICT, [*bottom_line(runs, rows, config), methods_pointer()])
    forest = forest_rows(rows)
    if forest.empty:
        section.notes.append("No pair was tested (a test needs at least 2 finished runs per arm): no forest plot.")
        return section
    caption = ("Every tested difference A - B of the final score, the primary family first: dot the mean, bar its "
               "95% interval (paired by seed, else Welch), shaded the equivalence margin; right, the Holm-adjusted "
               "p of the pair's family. Green: A ahead, red: B ahead, blue: equivalent, grey: not resolved.")
    section.figures.append(("tested_differences", caption, png(figure_forest(forest, equivalence_margin(config)))))
    return section


def _untested(rows: list[dict[str, Any]]) -> list[Section]:
    """The pairs not tested (the same update under Adam, repeats, too few runs), one table row each; no section
    when every pair was tested."""
    table = untested_table(rows)
    text = "The pairs that have no test, and why; the forest plot above holds every tested pair."
    return [] if table.empty else [Section(UNTESTED, [text], [("", table)])]


def _detail(results: pd.DataFrame, runs: pd.DataFrame, rows: list[dict[str, Any]], selection: pd.DataFrame | None,
            config: dict[str, Any], metrics: pd.DataFrame | None) -> Section:
    """The verdict in detail: when the primary was declared, the primary comparison with all its numbers, who
    learns fastest and by how much, sign vs group-centred, and everything that qualifies those numbers."""
    arms = runs[["variant", "group_size"]].drop_duplicates().sort_values(["variant", "group_size"])
    bullets = _primary_lines(runs, rows, config)
    bullets += [_best_line(runs, rows, v, int(g)) for v, g in arms.itertuples(index=False)]
    bullets += _sign_lines(runs, rows)
    bullets += _diverged_lines(results, runs) + _no_signal_lines(results)
    bullets += unbracketed_lines(selection) + clipping_lines(metrics, config)
    bullets += _sign_group_sizes(runs) + _family_lines(results)
    return Section(DETAIL, bullets=bullets)


def verdict_sections(results: pd.DataFrame, selection: pd.DataFrame | None, config: dict[str, Any] | None,
                     metrics: pd.DataFrame | None, png: Callable[[Any], bytes]) -> list[Section]:
    """The sections that open the report, in order: "Verdict" (bottom line, pointer to the methods, forest
    plot), "Pairs not tested" (where there are any) and "The verdict in detail"; ``png`` renders a figure."""
    config = config or {}
    runs = run_table(results)
    rows, _ = comparisons(runs, config)
    return [_headline(runs, rows, config, png), *_untested(rows),
            _detail(results, runs, rows, selection, config, metrics)]
