"""The numbers of the ``grpolab compare`` report, as pandas tables computed from the sweep's results.

Pure functions of the ``results`` frame (one row per (run, evaluation), see ``grpolab.report.write_report``)
and the ``metrics`` frame (one row per (run, training step)); no plotting, no files. ``grpolab.report`` turns
them into figures and HTML / Markdown.

Choices (departures from arXiv 2605.07689, which reports means over seeds with a t-test):

* The score of an evaluation is held-out pass@1 (the mean success of its n samples per prompt at the
  training temperature: the expected reward RL optimises) when samples were drawn, else greedy accuracy
  (``score``). Final accuracy of a run = the score of its ``end`` evaluation; 95% Student-t CI over seeds
  (``grpolab.stats.t_interval``; the percentile bootstrap used before covers about 81% at n = 5, see
  docs/report-statistics.md); no CI for a single seed. Greedy accuracy is reported beside it.
* Runs are grouped by (variant, estimator, group_size): ``variant`` names a ``--vary`` setting ("" when
  nothing was varied; a results table without the column is one variant ""). Runs whose ``status`` is
  "diverged" are left out of every mean and test and counted instead (``diverged_table``); a table
  without ``status`` holds finished runs only. The pairwise tests are in ``grpolab.report.comparisons``.
* D_real of the start policy is measured twice: over training groups (mean ``starvation/uniform``, the
  all-correct + all-wrong share, over the first ``START_STEPS`` steps, runs without dynamic sampling when
  there are any) and from the start evaluation's counts with the unbiased estimator
  E[(C(c, G) + C(n - c, G)) / C(n, G)]; D_iid = pbar^G + (1 - pbar)^G (``diagnostics.iid_degeneracy``)
  with pbar the mean per-prompt success rate: in training, ``starvation/p_mean`` pooled over a run's first
  ``START_STEPS`` steps (not the per-step D_iid, whose window is still filling then).
* The variance view's predicted SNR^2 of sign over a group-centred estimator (``variance_table``), per
  (variant, G) from the start evaluation's per-prompt counts: 4 E_i[p_i (1 - p_i)] / (1 - 1/G) with the mean of
  p_i (1 - p_i) over prompts estimated without bias (``diagnostics.variance.snr_ratio_from_counts``), beside
  the pbar formula 4 pbar (1 - pbar) / (1 - 1/G), which overstates it by the spread of the p_i.
* Equal sampling cost: the budget of a group size is the largest completions count every run of it reached;
  a run's accuracy at the budget is its last evaluation within it (NaN when that is only the start).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from grpolab import stats
from grpolab.advantages import display_order
from grpolab.diagnostics.starvation import expected_degeneracy_from_counts, iid_degeneracy
from grpolab.diagnostics.variance import mean_success_variance, snr_ratio_from_counts, snr_ratio_sign_vs_centred
from grpolab.train.no_signal import NO_SIGNAL

ALPHA = 0.05  # significance level of the verdict and the one-line readings
START_STEPS = 5  # training steps averaged for D_real / D_iid of the start policy
N_RESAMPLES = 10_000  # permutation splits (exact when C(N, n_a) is at most this, else this many random ones)


def _last_eval(results: pd.DataFrame, phase: str) -> pd.DataFrame:
    """The last evaluation of each run in ``phase`` (by step), indexed by run_id; none of a diverged run (the module
    docstring: left out of every mean)."""
    rows = results[(results["phase"] == phase) & (_statuses(results) != "diverged")].sort_values("step")
    return rows.groupby("run_id").tail(1).set_index("run_id")


def _as_list(value: Any) -> list[float] | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return [float(v) for v in np.asarray(value, dtype=float).ravel()]


def score(row: pd.Series | dict) -> float:
    """An evaluation's score: pass@1 when samples were drawn (n > 0), else greedy accuracy."""
    passk = _as_list(row["pass_at_k"])
    return float(passk[0]) if passk and int(row["n"]) > 0 else float(row["greedy_accuracy"])


def _scores(evaluations: pd.DataFrame) -> pd.Series:
    return pd.Series([score(row) for _, row in evaluations.iterrows()], index=evaluations.index, dtype=float)


def variants(frame: pd.DataFrame) -> pd.Series:
    """The ``variant`` of each row as a string ("" where the column or the value is missing)."""
    if "variant" not in frame.columns:
        return pd.Series("", index=frame.index, dtype=object)
    return frame["variant"].fillna("").astype(str)


def _statuses(frame: pd.DataFrame) -> pd.Series:
    """The ``status`` of each row ("finished" where the column or the value is missing)."""
    if "status" not in frame.columns:
        return pd.Series("finished", index=frame.index, dtype=object)
    return frame["status"].fillna("finished").astype(str)


def _ended_table(results: pd.DataFrame, status: str, at: str) -> pd.DataFrame:
    """One row per run whose status is ``status``: run_id, variant, estimator, group_size, seed and the step
    column ``at`` (NaN when not recorded). Empty for a results table without ``status``."""
    columns = ["run_id", "variant", "estimator", "group_size", "seed", at]
    ended = results[_statuses(results) == status]
    if ended.empty:
        return pd.DataFrame(columns=columns)
    rows = ended.assign(variant=variants(ended)).groupby("run_id").head(1)
    steps = rows[at] if at in rows.columns else pd.Series(math.nan, index=rows.index)
    return rows.assign(**{at: steps.astype(float)})[columns].reset_index(drop=True)


def diverged_table(results: pd.DataFrame) -> pd.DataFrame:
    """One row per run whose status is "diverged", with diverged_at_step (``_ended_table``)."""
    return _ended_table(results, "diverged", "diverged_at_step")


def no_signal_table(results: pd.DataFrame) -> pd.DataFrame:
    """One row per run that ``--stop-when-dead`` ended (status "no_signal"), with no_signal_at_step."""
    return _ended_table(results, NO_SIGNAL, "no_signal_at_step")


def run_table(results: pd.DataFrame) -> pd.DataFrame:
    """One row per run with an end evaluation that did not diverge: variant, estimator, seed, group_size, lr
    (NaN when not recorded), n, start / final accuracy (the score), start / final greedy accuracy, start / end
    pass@k lists [n] and completions generated by the end."""
    finished = results[_statuses(results) != "diverged"]
    end, start = _last_eval(finished, "end"), _last_eval(finished, "start")
    runs = end[["estimator", "seed", "group_size", "n"]].copy()
    runs.insert(0, "variant", variants(end))
    runs["lr"] = end["lr"].astype(float) if "lr" in end.columns else math.nan
    runs["final_accuracy"] = _scores(end)
    runs["start_accuracy"] = _scores(start).reindex(runs.index).astype(float)
    runs["final_greedy"] = end["greedy_accuracy"].astype(float)
    runs["start_greedy"] = start["greedy_accuracy"].reindex(runs.index).astype(float)
    runs["end_pass_at_k"] = [_as_list(v) for v in end["pass_at_k"]]
    runs["start_pass_at_k"] = [_as_list(v) for v in start["pass_at_k"].reindex(runs.index)]
    runs["completions"] = end["completions_generated"]
    return runs.reset_index()


def _ci(values: np.ndarray) -> tuple[float, float]:
    """95% Student-t CI of the mean score, cut to [0, 1], the scores' range (which cannot lower coverage)."""
    if values.size < 2:
        return math.nan, math.nan
    _, low, high = stats.t_interval(values)
    return max(low, 0.0), min(high, 1.0)


ARM = ["variant", "estimator", "group_size"]  # what one arm of the comparison is


def sort_arms(table: pd.DataFrame, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Rows sorted by variant, group size, the estimators' display order, then ``extra`` columns."""
    order = {name: i for i, name in enumerate(display_order(table["estimator"]))}
    keys = ["variant", "group_size", "estimator", *extra]
    return table.sort_values(keys, key=lambda s: s.map(order) if s.name == "estimator" else s).reset_index(drop=True)


def summary_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, estimator, group_size): n_seeds (runs that finished), n_diverged, final_accuracy (mean
    over those seeds), ci_low / ci_high (95% Student t cut to [0, 1], NaN for one seed), start_accuracy,
    change (mean of final - start), pass@1 and pass@n at the end (n = samples per test prompt), completions
    (mean generated by the end). Estimators in paper order."""
    runs = run_table(results)
    diverged = diverged_table(results).groupby(ARM).size()
    rows = []
    for (variant, estimator, size), group in runs.groupby(ARM):
        final = group["final_accuracy"].to_numpy(float)
        low, high = _ci(final)
        ends = [p for p in group["end_pass_at_k"] if p]
        rows.append(
            {
                "variant": variant,
                "estimator": estimator,
                "group_size": int(size),
                "n_seeds": len(group),
                "n_diverged": int(diverged.get((variant, estimator, size), 0)),
                "final_accuracy": float(final.mean()),
                "ci_low": low,
                "ci_high": high,
                "start_accuracy": float(group["start_accuracy"].mean()),
                "final_greedy": float(group["final_greedy"].mean()),
                "start_greedy": float(group["start_greedy"].mean()),
                "change": float((group["final_accuracy"] - group["start_accuracy"]).mean()),
                "pass@1": float(np.mean([p[0] for p in ends])) if ends else math.nan,
                "pass@n": float(np.mean([p[-1] for p in ends])) if ends else math.nan,
                "n": int(group["n"].max()),
                "completions": float(group["completions"].mean()),
            }
        )
    table = pd.DataFrame(
        rows,
        columns=[
            "variant",
            "estimator",
            "group_size",
            "n_seeds",
            "n_diverged",
            "final_accuracy",
            "ci_low",
            "ci_high",
            "start_accuracy",
            "final_greedy",
            "start_greedy",
            "change",
            "pass@1",
            "pass@n",
            "n",
            "completions",
        ],
    )
    return sort_arms(table)


def _training_start_rows(metrics: pd.DataFrame, size: int) -> pd.DataFrame:
    subset = metrics[metrics["group_size"] == size]
    plain = subset[~subset["estimator"].str.contains("+", regex=False)]
    subset = plain if len(plain) else subset
    return subset.sort_values("step").groupby("run_id").head(START_STEPS)


def _training_start(metrics: pd.DataFrame, column: str, size: int) -> float:
    if column not in metrics.columns or metrics.empty:
        return math.nan
    values = _training_start_rows(metrics, size)[column].dropna()
    return float(values.mean()) if len(values) else math.nan


def _training_d_iid(metrics: pd.DataFrame, size: int) -> float:
    """D_iid from pbar pooled over each run's first START_STEPS steps, averaged over runs."""
    if "starvation/p_mean" not in metrics.columns or metrics.empty:
        return _training_start(metrics, "starvation/d_iid", size)  # logs written before p_mean existed
    first = _training_start_rows(metrics, size).dropna(subset=["starvation/p_mean"])
    values = [iid_degeneracy(float(rows["starvation/p_mean"].mean()), int(size)) for _, rows in first.groupby("run_id")]
    return float(np.mean(values)) if values else math.nan


def _eval_degeneracy(starts: pd.DataFrame, size: int) -> tuple[float, float]:
    """(unbiased D_real, D_iid) from the start evaluations' counts, averaged over runs; NaN if n < G."""
    real, iid = [], []
    for successes, n in zip(starts["successes"], starts["n"], strict=True):
        c = np.asarray(successes, dtype=int)
        if c.size == 0 or int(n) < size:
            continue
        real.append(expected_degeneracy_from_counts(c, int(n), size))
        iid.append(iid_degeneracy(float(np.mean(c / int(n))), size))
    return (float(np.mean(real)), float(np.mean(iid))) if real else (math.nan, math.nan)


def _d_real_column(metrics: pd.DataFrame) -> str:
    """``starvation/uniform`` (all correct or all wrong); older logs only have ``starvation/degenerate``."""
    return "starvation/uniform" if "starvation/uniform" in metrics.columns else "starvation/degenerate"


def jensen_table(results: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """Per group size: D_real / D_iid from training (first START_STEPS steps) and from the start eval."""
    starts = results[results["phase"] == "start"]
    rows = []
    for size in sorted(results["group_size"].unique()):
        d_real_eval, d_iid_eval = _eval_degeneracy(starts, int(size))
        rows.append(
            {
                "group_size": int(size),
                "d_real_train": _training_start(metrics, _d_real_column(metrics), size),
                "d_iid_train": _training_d_iid(metrics, size),
                "d_real_eval": d_real_eval,
                "d_iid_eval": d_iid_eval,
            }
        )
    table = pd.DataFrame(rows, columns=["group_size", "d_real_train", "d_iid_train", "d_real_eval", "d_iid_eval"])
    table["gap_train"] = table["d_real_train"] - table["d_iid_train"]
    table["gap_eval"] = table["d_real_eval"] - table["d_iid_eval"]
    return table


def variance_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, G): the start evaluation's mean success p_bar, unbiased E[p_i (1 - p_i)] over its prompts,
    and sign's predicted SNR^2 ratio over a group-centred estimator from it (``snr_ratio``) and from p_bar alone
    (``snr_ratio_pbar``), averaged over the runs' start evaluations with n >= 2 samples per prompt. Empty
    without such evaluations or at G < 2."""
    starts = _last_eval(results, "start")
    starts = starts.assign(variant=variants(starts))
    rows = []
    for (variant, size), group in starts.groupby(["variant", "group_size"]):
        counts = [(np.asarray(c, dtype=float), int(n)) for c, n in zip(group["successes"], group["n"], strict=True)
                  if c is not None and np.asarray(c).size and int(n) >= 2]
        if not counts or int(size) < 2:
            continue
        p_bar = float(np.mean([c.mean() / n for c, n in counts]))
        rows.append({"variant": variant, "group_size": int(size), "p_bar": p_bar,
                     "mean_p_variance": float(np.mean([mean_success_variance(c, n) for c, n in counts])),
                     "snr_ratio": float(np.mean([snr_ratio_from_counts(c, n, int(size)) for c, n in counts])),
                     "snr_ratio_pbar": float(snr_ratio_sign_vs_centred(p_bar, int(size)))})
    return pd.DataFrame(rows, columns=["variant", "group_size", "p_bar", "mean_p_variance", "snr_ratio",
                                       "snr_ratio_pbar"])


def _at_budget(evals: pd.DataFrame, budget: float) -> tuple[float, float]:
    """(accuracy, completions) of a run's last evaluation within the budget; NaN if that is the start."""
    within = evals[evals["completions_generated"] <= budget].sort_values("completions_generated")
    if within.empty or (within.iloc[-1]["phase"] == "start" and evals["completions_generated"].max() > budget):
        return math.nan, math.nan
    last = within.iloc[-1]
    return score(last), float(last["completions_generated"])


def equal_cost_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per (estimator, G): completions generated by the end, final accuracy, and accuracy at the budget
    (largest completions count every run of that G reached) from the last evaluation within it."""
    rows = []
    for size, group in results[_statuses(results) != "diverged"].groupby("group_size"):
        per_run = group.groupby("run_id")
        budget = float(per_run["completions_generated"].max().min())
        for estimator in display_order(group["estimator"]):
            runs = group[group["estimator"] == estimator]
            at = [_at_budget(evals, budget) for _, evals in runs.groupby("run_id")]
            end = _last_eval(runs, "end")
            rows.append(
                {
                    "estimator": estimator,
                    "group_size": int(size),
                    "n_seeds": len(at),
                    "completions_end": float(end["completions_generated"].mean()),
                    "final_accuracy": float(_scores(end).mean()),
                    "budget": budget,
                    "accuracy_at_budget": float(np.mean([a for a, _ in at])),
                    "completions_at_budget": float(np.mean([c for _, c in at])),
                }
            )
    return pd.DataFrame(rows)


def _per_prompt(row: pd.Series) -> tuple[list[str], np.ndarray] | None:
    """(families, successes [P]) of one evaluation, or None when it carries no per-prompt data by family (a task
    without families, no samples, or successes lost with a damaged ``eval.jsonl``)."""
    families = list(row.get("families") if row.get("families") is not None else [])
    successes = np.asarray(row["successes"] if row["successes"] is not None else [], dtype=float)
    if not any(families) or len(families) != successes.size or int(row["n"]) == 0:
        return None
    return [family or "(none)" for family in families], successes


def family_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per (estimator, group_size, family): mean per-prompt success rate (c / n) at the start and at the end,
    averaged over the prompts of the family and then over runs; change = end - start. Empty when the
    evaluations carry no families (a task without families labels every problem "") or no samples; in a
    task where only some problems have a family, the others form the family "(none)". A run whose evaluation
    lacks per-prompt data is left out of that phase (``family_gaps`` names it)."""
    rows = []
    for phase in ("start", "end"):
        for run_id, row in _last_eval(results, phase).iterrows():
            found = _per_prompt(row)
            if found is None:
                continue
            families, successes = found
            rates = pd.Series(successes / int(row["n"])).groupby(pd.Series(families)).mean()
            rows += [{"run_id": run_id, "estimator": row["estimator"], "group_size": int(row["group_size"]),
                      "phase": phase, "family": family, "rate": float(rate)} for family, rate in rates.items()]
    columns = ["estimator", "group_size", "family", "start", "end", "change"]
    if not rows:
        return pd.DataFrame(columns=columns)
    table = pd.DataFrame(rows).pivot_table(index=["estimator", "group_size", "family"], columns="phase",
                                           values="rate", aggfunc="mean").reset_index()
    if "start" not in table or "end" not in table:
        return pd.DataFrame(columns=columns)
    table["change"] = table["end"] - table["start"]
    return table[columns]


def family_gaps(results: pd.DataFrame) -> list[str]:
    """The runs ``family_table`` leaves out of a phase because that evaluation lacks per-prompt data while other
    runs have it, as "ESTIMATOR G=g seed s (phase)"; empty when no run has such data."""
    gaps, found = [], False
    for phase in ("start", "end"):
        for _, row in _last_eval(results, phase).iterrows():
            if _per_prompt(row) is None:
                gaps.append(f"{row['estimator']} G={int(row['group_size'])} seed {row.get('seed', '?')} ({phase})")
            else:
                found = True
    return gaps if found else []


def family_split(families: pd.DataFrame) -> pd.DataFrame:
    """Per (estimator, group_size): mean change in the low-success families (start rate < 0.5) and in the
    high-success ones; says where an estimator's gain sits."""
    if families.empty:
        return pd.DataFrame(columns=["estimator", "group_size", "low_change", "high_change"])
    low = families["start"] < 0.5
    grouped = families.assign(low=low).groupby(["estimator", "group_size", "low"])["change"].mean().unstack()
    return pd.DataFrame({"low_change": grouped.get(True), "high_change": grouped.get(False)}).reset_index()


def labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each estimator renamed ``estimator+variant`` where its variant is not "", for the
    figures and the tables that group by estimator alone (``display_order`` keeps a variant beside its
    estimator; ``display_colors`` gives it a colour of its own)."""
    variant = variants(frame)
    if (variant == "").all():
        return frame
    names = [f"{name}+{v}" if v else name for name, v in zip(frame["estimator"], variant, strict=True)]
    return frame.assign(estimator=names)
