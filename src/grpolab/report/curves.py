"""The report's "Learning curves" section: how fast each estimator learns, not only where it ends.

Per arm (variant, estimator, G; a variant is drawn as ``estimator+variant``, ``tables.labelled``), over the
runs that did not diverge:

* the held-out learning curve (``curve_table``): the score (``tables.score``) of every evaluation, the start
  and end ones and those of ``--eval-every``, as the mean over seeds at each step with its 95% Student-t
  interval (``grpolab.stats.t_interval``);
* speed against ceiling (``speed_table``), each with its 95% Student-t interval over seeds: the area under
  each run's held-out curve (trapezoid rule, divided by the steps: the mean held-out score over training, so
  at equal end scores the estimator that got there sooner has the larger area), the end score (the ceiling
  within the budget), and the steps each run's training reward (``rollout/reward_mean``, rolling mean over
  the dynamics figure's window) takes to reach a level: the lowest arm's mean final smoothed reward at that
  (variant, G), which every arm reaches on average. Seeds that never reach it are counted and left out of
  that interval, which then describes only the seeds that did.

Each interval's ends are cut to the range its quantity can take: a score to [0, 1], the steps to those logged
(at 2 seeds the t interval of 4 and 12 steps runs from -43 to 59).

Departure from the papers: they report end scores and single curves; a claim such as "slow, not stuck" is
read here from intervals over seeds, not from two points.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from grpolab import stats
from grpolab.render import Section
from grpolab.report import figures as figs
from grpolab.report.tables import labelled, run_table, score, sort_arms

__all__ = ["REWARD", "curve_table", "curves_section", "reward_window", "speed_table"]

REWARD = "rollout/reward_mean"
_EVALUATED = ("start", "step", "end")


def _finished_evaluations(results: pd.DataFrame) -> pd.DataFrame:
    """The evaluations (start, step, end) of runs that ended without diverging, with their ``score``, labelled."""
    finished = set(run_table(results)["run_id"])
    rows = results[results["run_id"].isin(finished) & results["phase"].isin(_EVALUATED)]
    rows = rows.assign(score=[score(row) for _, row in rows.iterrows()]) if len(rows) else rows.assign(score=[])
    return labelled(rows).drop_duplicates(["run_id", "step"], keep="last")


def _interval(values: np.ndarray, bounds: tuple[float, float] = (0.0, 1.0)) -> tuple[float, float, float]:
    """(mean, low, high) of the 95% Student-t interval of the finite values, its ends cut to ``bounds`` (the range
    the quantity can take: the true mean lies in it, so cutting cannot lower coverage); NaN ends for fewer than 2,
    and for values without spread (a zero-width interval would read as certainty)."""
    values = values[np.isfinite(values)]
    if values.size == 0:
        return math.nan, math.nan, math.nan
    if np.ptp(values) == 0:
        return float(values[0]), math.nan, math.nan
    mean, low, high = stats.t_interval(values)
    return float(mean), float(np.clip(low, *bounds)), float(np.clip(high, *bounds))


def curve_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per (estimator, group_size, step): mean held-out score over seeds, its 95% t interval, n_seeds."""
    evaluations = _finished_evaluations(results)
    rows = []
    for (estimator, size, step), group in evaluations.groupby(["estimator", "group_size", "step"]):
        mean, low, high = _interval(group["score"].to_numpy(float))
        rows.append({"estimator": estimator, "group_size": int(size), "step": int(step), "mean": mean,
                     "low": low, "high": high, "n_seeds": len(group)})
    return pd.DataFrame(rows, columns=["estimator", "group_size", "step", "mean", "low", "high", "n_seeds"])


def _area(run: pd.DataFrame) -> float:
    """Area under one run's held-out curve divided by its span of steps (NaN with one evaluation)."""
    run = run.sort_values("step")
    steps, scores = run["step"].to_numpy(float), run["score"].to_numpy(float)
    if steps.size < 2 or steps[-1] <= steps[0]:
        return math.nan
    return float(np.sum((scores[1:] + scores[:-1]) / 2 * np.diff(steps)) / (steps[-1] - steps[0]))


def reward_window(metrics: pd.DataFrame) -> int:
    """The rolling-mean window of the dynamics figure: about a twentieth of a run's steps, at least 1."""
    return max(1, round(metrics.groupby("run_id")["step"].nunique().median() / 20))


def _smoothed_rewards(metrics: pd.DataFrame, window: int) -> dict[str, pd.Series]:
    """Each run's training reward by step, rolling mean over ``window`` steps."""
    return {run_id: run.sort_values("step").set_index("step")[REWARD].dropna().rolling(window, min_periods=1).mean()
            for run_id, run in metrics.groupby("run_id")}


def _steps_to(curve: pd.Series, level: float) -> float:
    """The first step at which the curve reaches ``level`` (NaN if it never does)."""
    reached = curve[curve >= level]
    return float(reached.index[0]) if len(reached) else math.nan


def _reward_speed(metrics: pd.DataFrame | None, arms: pd.DataFrame) -> pd.DataFrame:
    """Per arm: the level (per G) and the steps each seed's smoothed training reward takes to reach it."""
    columns = ["estimator", "group_size", "level", "steps_to_level", "steps_low", "steps_high", "reached"]
    if metrics is None or metrics.empty or REWARD not in metrics.columns or metrics[REWARD].isna().all():
        return pd.DataFrame(columns=columns)
    shown = labelled(metrics)
    curves = _smoothed_rewards(shown, reward_window(shown))
    owner = shown.groupby("run_id")[["estimator", "group_size"]].first()
    final = pd.Series({run_id: curve.iloc[-1] for run_id, curve in curves.items() if len(curve)})
    levels = owner.assign(final=final).groupby(["group_size", "estimator"])["final"].mean().groupby(level=0).min()
    span = (float(shown["step"].min()), float(shown["step"].max()))  # a level is reached within the logged steps
    rows = []
    for (estimator, size), runs in owner.groupby(["estimator", "group_size"]):
        steps = np.array([_steps_to(curves[run_id], levels[size]) for run_id in runs.index])
        mean, low, high = _interval(steps, span)
        rows.append({"estimator": estimator, "group_size": int(size), "level": float(levels[size]),
                     "steps_to_level": mean, "steps_low": low, "steps_high": high,
                     "reached": f"{int(np.isfinite(steps).sum())} of {steps.size}"})
    return pd.DataFrame(rows, columns=columns)


def speed_table(results: pd.DataFrame, metrics: pd.DataFrame | None) -> pd.DataFrame:
    """Per (estimator, group_size), variants labelled: n_seeds, evaluations per run, the area under the held-out
    curve (mean score over training) with its 95% t interval, the end score with its interval, and the steps
    to the reward level (``level``) with its interval over the seeds that reached it (``reached``: "k of n")."""
    evaluations = _finished_evaluations(results)
    rows = []
    for (estimator, size), group in evaluations.groupby(["estimator", "group_size"]):
        per_run = group.groupby("run_id")
        area = _interval(np.array([_area(run) for _, run in per_run], dtype=float))
        end = _interval(np.array([run.sort_values("step")["score"].iloc[-1] for _, run in per_run], dtype=float))
        rows.append({"estimator": estimator, "group_size": int(size), "n_seeds": per_run.ngroups,
                     "evaluations": int(per_run.size().min()), "area": area[0], "area_low": area[1],
                     "area_high": area[2], "end": end[0], "end_low": end[1], "end_high": end[2]})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    speed = _reward_speed(metrics, table[["estimator", "group_size"]])
    table = table.merge(speed, on=["estimator", "group_size"], how="left") if not speed.empty else table
    return sort_arms(table.assign(variant=""))


def _pct(value: float) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:.1f}%"


def _with_interval(mean: float, low: float, high: float, format_value: Callable[[float], str]) -> str:
    if not np.isfinite(mean):
        return "n/a"
    ends = f" [{format_value(low)}, {format_value(high)}]" if np.isfinite(low) else ""
    return format_value(mean) + ends


def _speed_display(table: pd.DataFrame) -> pd.DataFrame:
    display = pd.DataFrame({
        "Estimator": table["estimator"], "G": table["group_size"], "Seeds": table["n_seeds"],
        "Evaluations per run": table["evaluations"],
        "Area under the held-out curve [95% CI]": [_with_interval(*v, _pct) for v in
                                                   zip(table["area"], table["area_low"], table["area_high"],
                                                       strict=True)],
        "End score [95% CI]": [_with_interval(*v, _pct) for v in
                               zip(table["end"], table["end_low"], table["end_high"], strict=True)],
    })
    if "level" in table.columns:
        display["Reward level"] = table["level"].map(_pct)
        display["Steps to reach it [95% CI]"] = [
            _with_interval(*v, lambda x: f"{x:.1f}") for v in
            zip(table["steps_to_level"], table["steps_low"], table["steps_high"], strict=True)]
        display["Seeds that reached it"] = table["reached"]
    return display


def curves_section(results: pd.DataFrame, metrics: pd.DataFrame | None, png: Callable[[Any], bytes]) -> Section:
    """The learning curves with t bands and the speed-against-ceiling table; ``png`` renders a figure."""
    curves, speed = curve_table(results), speed_table(results, metrics)
    text = ("Held-out score at every evaluation (the start, each --eval-every step and the end), mean over seeds "
            "with its 95% Student-t band. Speed against ceiling, each with a 95% Student-t interval over seeds: "
            "the area under each run's held-out curve divided by its steps (the mean held-out score over "
            "training: at equal end scores, the estimator that got there sooner has the larger area); the end "
            "score; and the steps each run's training reward (rolling mean, as in Training dynamics) takes to "
            "reach the reward level of its group size, the lowest arm's mean final training reward, which every "
            "arm reaches on average (the interval covers only the seeds that reached it). Each interval is cut to "
            "the range its quantity can take: a score to 0-100%, the steps to those logged.")
    section = Section("Learning curves", [text], [("Speed against ceiling", _speed_display(speed))])
    if not speed.empty and speed["evaluations"].max() <= 2:
        section.notes.append("Only the start and the end were evaluated (--eval-every 0): no learning-curve figure, "
                             "since each curve would be two points that the table already holds, and each area is "
                             "(start + end) / 2; rerun with --eval-every N for a curve.")
        return section
    section.figures.append(("learning_curves", "Held-out score per estimator at each evaluation step; band: 95% "
                            "Student-t interval over seeds.", png(figs.figure_learning_curves(curves))))
    return section
