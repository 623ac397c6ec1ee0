"""Learning curves (grpolab.report.curves): the held-out curve with t bands, the area under it and the steps to
a reward level, by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from grpolab.report.curves import curve_table, curves_section, speed_table
from grpolab.report.sections import figure_png
from report_sweeps import FINALS, START_ACCURACY, synthetic_sweep

pytestmark = pytest.mark.fast


def test_the_held_out_curve_has_a_t_band_over_seeds_at_each_step() -> None:
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(2,))
    curve = curve_table(results).set_index(["estimator", "step"])
    assert sorted(curve.loc["sign"].index) == [0, 20, 40, 60]  # start, two --eval-every steps, end
    end = curve.loc[("sign", 60)]
    half = scipy_stats.t.ppf(0.975, 2) * np.std(FINALS[("sign", 2)], ddof=1) / np.sqrt(3)
    assert (end["mean"], end["low"], end["high"]) == pytest.approx((0.74, 0.74 - half, 0.74 + half))
    assert curve.loc[("sign", 0), "n_seeds"] == 3


def test_area_under_the_held_out_curve_by_hand() -> None:
    # each synthetic run's score rises linearly from the start to its final score, so the area divided by the
    # steps is (start + final) / 2 exactly
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(2,))
    table = speed_table(results, None).set_index("estimator")
    areas = [(START_ACCURACY + final) / 2 for final in FINALS[("sign", 2)]]
    half = scipy_stats.t.ppf(0.975, 2) * np.std(areas, ddof=1) / np.sqrt(3)
    sign = table.loc["sign"]
    assert sign["evaluations"] == 4 and sign["n_seeds"] == 3
    assert (sign["area"], sign["area_low"], sign["area_high"]) == pytest.approx(
        (np.mean(areas), np.mean(areas) - half, np.mean(areas) + half))
    assert sign["end"] == pytest.approx(0.74) and "level" not in table.columns  # no metrics: no reward speed


def test_steps_to_the_reward_level_by_hand() -> None:
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    # 10 steps (rolling window 1): sign's reward is step / 10, dr_grpo's step / 20 in seed 0 and step / 30 in seed
    # 1; the level is the lower arm's mean final reward, (1/2 + 1/3) / 2 = 5/12
    slope = {("sign", 0): 10, ("sign", 1): 10, ("dr_grpo", 0): 20, ("dr_grpo", 1): 30}
    metrics = pd.DataFrame([{"run_id": f"{name}-G2-s{seed}", "estimator": name, "group_size": 2, "seed": seed,
                             "step": step, "rollout/reward_mean": step / slope[(name, seed)]}
                            for (name, seed) in slope for step in range(1, 11)])
    table = speed_table(results, metrics).set_index("estimator")
    assert table.loc["sign", "level"] == pytest.approx(5 / 12)
    assert table.loc["sign", "steps_to_level"] == pytest.approx(5.0)  # 0.4 at step 4, 0.5 at step 5, both seeds
    assert table.loc["sign", "reached"] == "2 of 2"
    assert table.loc["dr_grpo", "steps_to_level"] == pytest.approx(9.0)  # seed 0: 0.45 at step 9; seed 1 never
    assert table.loc["dr_grpo", "reached"] == "1 of 2" and np.isnan(table.loc["dr_grpo", "steps_low"])


def test_intervals_are_cut_to_the_range_their_quantity_can_take() -> None:
    """At 2 seeds the raw t interval of reaching the level at steps 2 and 9 runs from about -42 to 53, and that of
    end scores 0.1 and 0.9 from -4.6 to 5.6: the table gives the logged steps 1 to 10, and [0, 1]."""
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    results = results.copy()
    ends = results["phase"] == "end"
    for seed, final in ((0, 0.1), (1, 0.9)):  # sign's end scores spread as widely as a score can
        rows = ends & (results["estimator"] == "sign") & (results["seed"] == seed)
        results.loc[rows, "pass_at_k"] = pd.Series([[final]] * int(rows.sum()), index=results.index[rows])
    reach = {("sign", 0): 2, ("sign", 1): 9, ("dr_grpo", 0): 10, ("dr_grpo", 1): 10}  # the level, 1.0, from then
    metrics = pd.DataFrame([{"run_id": f"{name}-G2-s{seed}", "estimator": name, "group_size": 2, "seed": seed,
                             "step": step, "rollout/reward_mean": float(step >= reach[(name, seed)])}
                            for (name, seed) in reach for step in range(1, 11)])
    sign = speed_table(results, metrics).set_index("estimator").loc["sign"]
    assert sign["steps_to_level"] == pytest.approx(5.5)
    assert (sign["steps_low"], sign["steps_high"]) == (1.0, 10.0)
    assert sign["end"] == pytest.approx(0.5) and (sign["end_low"], sign["end_high"]) == (0.0, 1.0)
    raw = scipy_stats.t.ppf(0.975, 1) * np.std([2, 9], ddof=1) / np.sqrt(2)
    assert 5.5 - raw < 1 and 5.5 + raw > 10  # the cut is what bounded them


def test_the_learning_curve_figure_is_dropped_when_runs_have_only_their_start_and_end() -> None:
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    drawn = curves_section(results, None, figure_png)
    assert [stem for stem, _, _ in drawn.figures] == ["learning_curves"] and not drawn.notes
    two_points = curves_section(results[results["phase"] != "step"], None, figure_png)
    assert two_points.figures == []
    assert two_points.notes[0].startswith("Only the start and the end were evaluated (--eval-every 0): no "
                                          "learning-curve figure")
    assert two_points.tables  # the speed table stays


def test_values_without_spread_give_their_mean_and_no_zero_width_interval() -> None:
    """Every seed reached the level at step 10: was "10.0 [10.0, 10.0]", an interval of no width read as certainty."""
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    metrics = pd.DataFrame([{"run_id": f"{name}-G2-s{seed}", "estimator": name, "group_size": 2, "seed": seed,
                             "step": step, "rollout/reward_mean": float(step >= 10)}
                            for name in ("sign", "dr_grpo") for seed in (0, 1) for step in range(1, 11)])
    sign = speed_table(results, metrics).set_index("estimator").loc["sign"]
    assert sign["steps_to_level"] == 10.0 and np.isnan(sign["steps_low"]) and np.isnan(sign["steps_high"])
